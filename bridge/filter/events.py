"""The filter on binlog events as bytes (pure): row events of tables a channel does
not replicate dropped, schemas renamed in TABLE_MAP and QUERY events.

Rewritten events get their new size in the header and a new CRC32 when the stream
has checksums (``mariadb-binlog --rewrite-db`` changes TABLE_MAP events the same way;
the replica's server reads the positions in the headers of BINLOG events for nothing).
Within a statement (its TABLE_MAPs, then its row events, the last one flagged
STMT_END_F), a kept TABLE_MAP is written only before a kept row event, and when the
statement's flagged event is dropped the last kept one takes the flag: the server
ends the statement there (closes its tables) as it would have.
"""

from __future__ import annotations

import struct
import zlib

from bridge.filter.rules import Filter
from bridge.model import RowEvents
from bridge.wire import binlog

_FLAGS_AT = binlog.HEADER_BYTES + binlog.TABLE_ID_BYTES


def _reseal(event: bytes | bytearray, checksum_bytes: int) -> bytes:
    """``event`` (header and body, no checksum) with its size set and its CRC32 added."""
    event = bytearray(event)
    event[9:13] = struct.pack("<I", len(event) + checksum_bytes)
    if checksum_bytes:
        event += struct.pack("<I", zlib.crc32(event) & 0xFFFFFFFF)
    return bytes(event)


def rename_table_map(event: bytes, schema: str, checksum_bytes: int) -> bytes:
    """A TABLE_MAP event naming ``schema`` instead of its own."""
    at = _FLAGS_AT + 2
    old = event[at]
    name = schema.encode("utf-8")
    if len(name) > 255:
        raise ValueError(f"schema name {schema!r} is longer than a TABLE_MAP event holds")
    body = event[:at] + bytes([len(name)]) + name + event[at + 1 + old:len(event) - checksum_bytes]
    return _reseal(body, checksum_bytes)


def with_statement_end(event: bytes, checksum_bytes: int) -> bytes:
    """A row event with STMT_END_F set."""
    flags = binlog.rows_flags(event) | binlog.STMT_END_F
    body = event[:_FLAGS_AT] + struct.pack("<H", flags) + event[_FLAGS_AT + 2:len(event) - checksum_bytes]
    return _reseal(body, checksum_bytes)


def rewrite_query(event: bytes, checksum_bytes: int, schema: str, sql: bytes) -> bytes:
    """A QUERY event with another default schema and statement (status variables kept)."""
    _, _, db_len, _, status_len = struct.unpack_from("<IIBHH", event, binlog.HEADER_BYTES)
    at = binlog.HEADER_BYTES + 13 + status_len
    name = schema.encode("utf-8")
    if len(name) > 255:
        raise ValueError(f"schema name {schema!r} is longer than a QUERY event holds")
    head = bytearray(event[:at])
    head[binlog.HEADER_BYTES + 8] = len(name)
    return _reseal(head + name + b"\0" + sql, checksum_bytes)


def filter_row_events(rows: RowEvents, rules: Filter, checksum_bytes: int) -> RowEvents | None:
    """``rows`` as the channel replicates them; None when nothing is left."""
    out = bytearray()
    tables: list[tuple[str, str]] = []
    events = 0
    dropped: set[int] = set()
    pending: list[tuple[bytes, tuple[str, str]]] = []  # kept TABLE_MAPs of the statement, not yet written
    last_kept = -1  # where in ``out`` the statement's last kept row event starts (-1: none yet)
    for ev in binlog.split_events(rows.data):
        if binlog.event_type(ev) == binlog.TABLE_MAP:
            schema, table = binlog.table_map_names(ev)
            if not rules.keeps(schema, table):
                dropped.add(binlog.table_id(ev))
                continue
            dropped.discard(binlog.table_id(ev))
            target = rules.target(schema)
            pending.append((ev if target == schema else rename_table_map(ev, target, checksum_bytes),
                            (target, table)))
            continue
        ends = bool(binlog.rows_flags(ev) & binlog.STMT_END_F)
        if binlog.table_id(ev) in dropped:
            if ends and last_kept >= 0:
                size = binlog.event_size(out, last_kept)
                out[last_kept:last_kept + size] = with_statement_end(bytes(out[last_kept:last_kept + size]),
                                                                     checksum_bytes)
        else:
            for event, name in pending:
                out += event
                tables.append(name)
            pending = []
            last_kept = len(out)
            out += ev
            events += 1
        if ends:
            pending, last_kept = [], -1
    if not events:
        return None
    return RowEvents(bytes(out), tuple(tables), events)
