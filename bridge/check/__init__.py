"""Consistency: row-by-row comparison and per-table digests of both databases."""
