"""Quoting SQL identifiers (pure): one definition for the applier and the checksum."""

from __future__ import annotations


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_name(schema: str, table: str) -> str:
    return f"{quote_name(schema)}.{quote_name(table)}"
