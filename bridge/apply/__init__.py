"""Replica side: SQL building (pure) and the applier that replays transactions."""
