"""The binlog events the assembler understands (pure value types).

The reader adapter turns library events into these, so nothing past
``bridge/source/reader.py`` sees a pymysqlreplication object.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GtidStart:
    gtid: str
    standalone: bool  # MariaDB FL_STANDALONE: a statement with no BEGIN/COMMIT (DDL)


@dataclass(frozen=True, slots=True)
class RowsRead:
    kind: str  # insert | update | delete
    schema: str
    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    rows: tuple[tuple[tuple | None, tuple | None], ...]  # (before, after) per row
    size: int = 0  # bytes of the binlog event, to size chunks without walking the values
    flags: int = 0  # the row event's flags (the primary's foreign_key_checks=0 shows here)


@dataclass(frozen=True, slots=True)
class RawRowEvent:
    """A TABLE_MAP or row event kept whole, as the binlog holds it (binlog apply mode)."""

    event: bytes
    table: tuple[str, str] | None  # TABLE_MAP: (schema, table); a row event: None
    statement_end: bool = False  # a row event with STMT_END_F: its TABLE_MAPs are no longer needed


@dataclass(frozen=True, slots=True)
class QueryRead:
    schema: str
    sql: str
    raw: bytes = b""  # the QUERY event whole, for a replay in its own session context


@dataclass(frozen=True, slots=True)
class ContextRead:
    """INTVAR, RAND or USER_VAR: session context of the statement-format QUERY after it."""

    event: bytes


@dataclass(frozen=True, slots=True)
class CommitRead:
    """Xid event (InnoDB commit)."""


@dataclass(frozen=True, slots=True)
class VerbatimRead:
    """Any event of the dump kept whole, as the primary sent it, not decoded (relay apply
    mode: bridge.source.verbatim groups them)."""

    event: bytes


@dataclass(frozen=True, slots=True)
class HeartbeatRead:
    """The primary is idle; lets loops check for stop requests."""


SourceEvent = GtidStart | RowsRead | RawRowEvent | QueryRead | ContextRead | CommitRead | HeartbeatRead | VerbatimRead
