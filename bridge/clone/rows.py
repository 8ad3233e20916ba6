"""Rows of one table, from a snapshot connection into the replica, with bounded
memory: one unbuffered SELECT streams the table, multi-row INSERTs of at most
BATCH_BYTES go to the replica, each committed.

Exactness: values travel as the server prints them (a raw connection, no
conversion), as string literals the replica converts back: exact for integers,
DECIMAL, DOUBLE, dates and times (both sessions at time zone +00:00), strings of
any character set (through utf8mb4 and back), ENUM, SET and JSON; binary strings,
BIT and spatial values as hex literals of their bytes. FLOAT is printed with 6
digits, which loses bits: it is read as ``col + 0e0`` (its exact value as a DOUBLE,
which the FLOAT column rounds back to the same value). Generated columns are left
to the replica to compute; invisible columns are named, so they come along.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pymysql
import pymysql.cursors

from bridge.errors import ApplyError, SourceError
from bridge.sqlnames import quote_name, table_name

BATCH_BYTES = 1 << 20  # per INSERT: well under max_allowed_packet, a round trip per MiB
TARGET_SESSION = ("SET SESSION time_zone='+00:00', sql_mode='NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION', "
                  "foreign_key_checks=0, unique_checks=0, autocommit=0")


@dataclass(frozen=True, slots=True)
class TableShape:
    db: str
    table: str
    columns: tuple[str, ...]  # written (generated columns left out)
    select: tuple[str, ...]  # how each is read
    estimated_rows: int

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


def table_shape(conn: pymysql.Connection, db: str, table: str) -> TableShape:
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND "
                    "TABLE_NAME=%s AND IS_GENERATED='NEVER' ORDER BY ORDINAL_POSITION", (db, table))
        columns = cur.fetchall()
        cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                    (db, table))
        estimate = cur.fetchone()[0]
    names = tuple(_text(c) for c, _ in columns)
    select = tuple(f"{quote_name(c)} + 0e0" if _text(t).lower() == "float" else quote_name(c) for c, t in
                   zip(names, (t for _, t in columns)))
    return TableShape(db, table, names, select, int(estimate or 0))


def copy_table(source: pymysql.Connection, target: pymysql.Connection, shape: TableShape,
               on_batch: Callable[[int, int], None]) -> tuple[int, int]:
    """(rows, bytes) copied; ``on_batch(rows, bytes)`` after each committed batch (throttle,
    progress). ``source`` is in its snapshot transaction."""
    head = f"INSERT INTO {table_name(shape.db, shape.table)} ({', '.join(map(quote_name, shape.columns))}) VALUES "
    rows = total_bytes = 0
    cur = pymysql.cursors.SSCursor(source)
    try:
        cur.execute(f"SELECT {', '.join(shape.select)} FROM {table_name(shape.db, shape.table)}")
        batch, size = [], 0
        for row in cur:
            values = "(" + ",".join(_literal(target, v) for v in row) + ")"
            batch.append(values)
            size += len(values) + 1
            if size >= BATCH_BYTES:
                _insert(target, head, batch, shape)
                rows, total_bytes = rows + len(batch), total_bytes + size
                on_batch(len(batch), size)
                batch, size = [], 0
        if batch:
            _insert(target, head, batch, shape)
            rows, total_bytes = rows + len(batch), total_bytes + size
            on_batch(len(batch), size)
    except pymysql.MySQLError as exc:
        raise SourceError(f"clone: read {shape.name} from the primary: {exc.args[-1] if exc.args else exc}") \
            from exc
    finally:
        cur.close()
    return rows, total_bytes


def _literal(conn: pymysql.Connection, value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'" if value else "''"
    return conn.escape(value)  # quoted; the target session has no NO_BACKSLASH_ESCAPES


def _insert(conn: pymysql.Connection, head: str, batch: list[str], shape: TableShape) -> None:
    try:
        with conn.cursor() as cur:
            cur.execute(head + ",".join(batch))
        conn.commit()
    except pymysql.MySQLError as exc:
        conn.rollback()
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
        raise ApplyError(f"clone: write {shape.name} on the replica: {exc.args[-1] if exc.args else exc}", code) \
            from exc


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value
