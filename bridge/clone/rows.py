"""Rows of one table, from a snapshot connection into the replica, with bounded
memory: a table with a key is read in key-range chunks of about BATCH_BYTES (the
server joins a chunk's rows into one text, GROUP_CONCAT), one INSERT per chunk; a
table without one is streamed by one unbuffered SELECT into INSERTs of that size.
Each INSERT is committed.

The primary writes the SQL: each row is read as one ``(v1,v2,...)`` text built by
the server (QUOTE() of each value, X'hex' of binary ones), so Python only joins rows
into INSERTs, and the values are exactly what the server prints: exact for integers,
DECIMAL, DOUBLE, dates and times (both sessions at time zone +00:00), strings of any
character set (through utf8mb4 and back), ENUM, SET and JSON; binary strings and
spatial values as hex of their bytes, BIT as its number. FLOAT is printed with 6
digits, which loses bits: it is quoted as ``col + 0e0`` (its exact value as a DOUBLE, which the FLOAT
column rounds back to the same value). Generated columns are left to the replica to
compute; invisible columns are named, so they come along.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pymysql
import pymysql.cursors

from bridge.apply.connection import apply_error
from bridge.check.ranges import range_sql, unique_key
from bridge.errors import SourceError
from bridge.server.flavor import Flavor
from bridge.server.sqlnames import as_str, quote_name, table_name

log = logging.getLogger(__name__)
BATCH_BYTES = 1 << 20  # per INSERT: well under max_allowed_packet, a round trip per MiB
WRITES_AHEAD = 2  # INSERTs read and waiting for the replica, per table being copied
MAX_CHUNK_BYTES = 32 << 20  # a chunk of rows whose text is longer is read again in smaller chunks
TARGET_SESSION = ("SET SESSION time_zone='+00:00', sql_mode='NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION', "
                  "foreign_key_checks=0, unique_checks=0, autocommit=0")


@dataclass(frozen=True, slots=True)
class TableShape:
    db: str
    table: str
    columns: tuple[str, ...]  # written (generated columns left out)
    select: str  # the expression that reads a row as its VALUES tuple
    estimated_rows: int
    row_bytes: int  # the average, as the server estimates it
    index: str | None = None  # a unique NOT NULL index without FLOAT/DOUBLE columns: chunks; None: streamed
    key: tuple[str, ...] = ()
    into: str = ""  # the replica's schema (--rename-schema); "": the same as db

    @property
    def target(self) -> str:
        """The table on the replica, quoted."""
        return table_name(self.into or self.db, self.table)

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


def table_shape(conn: pymysql.Connection, db: str, table: str, into: str = "") -> TableShape:
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND "
                    f"TABLE_NAME=%s AND {Flavor.of(conn).not_generated} ORDER BY ORDINAL_POSITION", (db, table))
        columns = cur.fetchall()
        if Flavor.of(conn).is_mysql:  # MySQL keeps table statistics for a day unless told to read them now
            cur.execute("SET SESSION information_schema_stats_expiry=0")
        cur.execute("SELECT TABLE_ROWS, AVG_ROW_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND "
                    "TABLE_NAME=%s", (db, table))
        estimate, row_bytes = cur.fetchone()
        # FLOAT/DOUBLE text is not exact enough to bound a key range with
        index, key = unique_key(cur, db, table, refused_types=("float", "double"))
    names = tuple(as_str(c) for c, _ in columns)
    parts = ", ',', ".join(_quoted(quote_name(c), as_str(t).lower()) for c, t in zip(names, (t for _, t in columns)))
    return TableShape(db, table, names, f"CONCAT('(', {parts}, ')')", int(estimate or 0), int(row_bytes or 0),
                      index, key, into if into != db else "")


BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
                "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection",
                "geomcollection", "vector"}  # MySQL 8 names the collection so; VECTOR: MySQL 9's floats
HEX_LITERAL = "IF({c} IS NULL, 'NULL', CONCAT('X''', HEX({c}), ''''))"  # X'..' ('' inside SQL quotes is ')


def _quoted(column: str, data_type: str) -> str:
    """A value as an SQL literal, written by the server (QUOTE gives NULL for NULL)."""
    if data_type in BINARY_TYPES:
        return HEX_LITERAL.format(c=column)
    if data_type == "bit":  # its number, unquoted (a quoted '5' would be the bits of the character)
        return f"IFNULL(CAST({column} + 0 AS CHAR), 'NULL')"
    if data_type == "float":
        return f"QUOTE({column} + 0e0)"
    return f"QUOTE({column})"


def copy_table(source: pymysql.Connection, target: pymysql.Connection, shape: TableShape,
               on_batch: Callable[[int, int], None]) -> tuple[int, int]:
    """(rows, bytes) copied; ``on_batch(rows, bytes)`` after each committed batch (throttle,
    progress; on the writer's thread). ``source`` is in its snapshot transaction."""
    head = f"INSERT INTO {shape.target} ({', '.join(map(quote_name, shape.columns))}) VALUES "
    writer = _Writer(target, shape, on_batch)
    try:
        copied = (_copy_chunks if shape.key else _copy_streamed)(source, writer, shape, head)
    except pymysql.MySQLError as exc:
        writer.stop()
        raise SourceError(f"clone: read {shape.name} from the primary: {exc.args[-1] if exc.args else exc}") \
            from exc
    except BaseException:
        writer.stop()
        raise
    writer.close()
    return copied


class _Writer:
    """The INSERTs on a thread of their own: the primary reads the next chunk while the
    replica writes this one (at most WRITES_AHEAD wait, so memory stays bounded)."""

    def __init__(self, target: pymysql.Connection, shape: TableShape, on_batch: Callable[[int, int], None]) -> None:
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=WRITES_AHEAD)
        self._thread = threading.Thread(target=self._run, args=(target, shape, on_batch), name="clone-write",
                                        daemon=True)
        self._thread.start()

    def put(self, statement: str, rows: int, nbytes: int) -> None:
        if self.error is not None:
            raise self.error
        self._queue.put((statement, rows, nbytes))

    def close(self) -> None:
        """Once every INSERT is committed; the first that failed is raised."""
        self.stop()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self, target, shape: TableShape, on_batch) -> None:
        while (item := self._queue.get()) is not None:
            if self.error is not None:
                continue  # drain: the reader learns of it at its next put
            statement, rows, nbytes = item
            try:
                _insert(target, statement, shape)
                on_batch(rows, nbytes)
            except BaseException as exc:  # handed to the reader's thread, which raises it
                self.error = exc


def _copy_chunks(source, writer: _Writer, shape: TableShape, head: str) -> tuple[int, int]:
    rows = total_bytes = 0
    per_chunk = min(max(BATCH_BYTES // max(2 * shape.row_bytes, 1), 100), 100_000)  # hex doubles binary values
    with source.cursor() as cur:
        cur.execute("SELECT @@max_allowed_packet")
        cur.execute(f"SET SESSION group_concat_max_len = {min(int(cur.fetchone()[0]) - 1024, MAX_CHUNK_BYTES)}")
        lower = None
        while True:
            upper = _next_upper(cur, shape, lower, per_chunk)
            where = range_sql(cur, shape.key, lower, upper)
            cur.execute(f"SELECT GROUP_CONCAT({shape.select} SEPARATOR ','), COUNT(*) FROM "
                        f"{table_name(shape.db, shape.table)} FORCE INDEX ({quote_name(shape.index)}) WHERE {where}")
            text, count = cur.fetchone()
            count = int(count)  # the raw connection gives text
            if count and (text is None or cur.warning_count):  # longer than group_concat_max_len: fewer rows
                if per_chunk == 1:
                    raise SourceError(f"clone: a row of {shape.name} is longer than the primary's "
                                      "max_allowed_packet allows a copy to read; raise it there")
                per_chunk = max(per_chunk // 4, 1)
                log.debug("clone: a chunk of %s was longer than group_concat_max_len: %d rows a chunk now",
                          shape.name, per_chunk)
                continue
            if count:
                writer.put(head + text, count, len(text))
                rows, total_bytes = rows + count, total_bytes + len(text)
            if upper is None:
                return rows, total_bytes
            lower = upper


def _next_upper(cur, shape: TableShape, lower: tuple | None, rows: int) -> tuple | None:
    """The key of the chunk's last row, ``rows`` after ``lower``; None: the table ends first."""
    cols = ", ".join(map(quote_name, shape.key))
    cur.execute(f"SELECT {cols} FROM {table_name(shape.db, shape.table)} FORCE INDEX ({quote_name(shape.index)}) "
                f"WHERE {range_sql(cur, shape.key, lower, None)} ORDER BY {cols} LIMIT {rows - 1}, 1")
    row = cur.fetchone()
    return tuple(row) if row else None


def _copy_streamed(source, writer: _Writer, shape: TableShape, head: str) -> tuple[int, int]:
    rows = total_bytes = 0
    cur = pymysql.cursors.SSCursor(source)
    try:
        cur.execute(f"SELECT {shape.select} FROM {table_name(shape.db, shape.table)}")
        batch, size = [], 0
        for (values,) in cur:
            batch.append(values)
            size += len(values) + 1
            if size >= BATCH_BYTES:
                writer.put(head + ",".join(batch), len(batch), size)
                rows, total_bytes = rows + len(batch), total_bytes + size
                batch, size = [], 0
        if batch:
            writer.put(head + ",".join(batch), len(batch), size)
            rows, total_bytes = rows + len(batch), total_bytes + size
    finally:
        cur.close()
    return rows, total_bytes


def _insert(conn: pymysql.Connection, statement: str, shape: TableShape) -> None:
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
        conn.commit()
    except pymysql.MySQLError as exc:
        conn.rollback()
        raise apply_error(f"clone: write {shape.name} on the replica", exc) from exc

