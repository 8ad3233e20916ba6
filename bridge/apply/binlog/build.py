"""Row events as ``BINLOG`` statements (pure).

``BINLOG '<base64>'`` (what ``mariadb-binlog | mariadb`` runs) makes the replica's
server apply row events with its own replication code: cascades, generated columns,
every type and character set as in native replication, and no replica trigger fires
for the rows (MariaDB ``sql_binlog.cc``). Its rules, measured on MariaDB 10.11:
- the session must first have run a FORMAT_DESCRIPTION event through ``BINLOG``;
- the TABLE_MAP events a row event uses must be in the same statement (the server
  forgets them when the statement ends);
- a statement (with its base64) must fit the replica's ``max_allowed_packet``; one
  event too large for that goes as two user-variable fragments
  (``BINLOG @binlog_fragment_0, @binlog_fragment_1``, MariaDB 10.2+);
- after a ``BINLOG`` that applied row events, the OK packet lacks
  SERVER_MORE_RESULTS_EXISTS although the server goes on with the rest of a
  multi-statement: the applier reads as many results as it sent statements
  (``probe_events`` checks this once per connection).
"""

from __future__ import annotations

import base64
import functools
import struct
import zlib
from dataclasses import dataclass

from bridge.server import sqlnames
from bridge.wire import binlog, tablemap

PROBE_SCHEMA, PROBE_TABLE = sqlnames.PROBE.split(".")  # created by sql/bridge_schema.sql
_PROBE_TABLE_ID = (1 << 48) - 2  # any id: it only has to match within the one statement
_POSITION_TABLE_ID = (1 << 48) - 3  # (1 << 48) - 1 is the servers' "no table"; primaries never get this far


def fragment_statements(data: bytes) -> list[bytes]:
    """One event too large for a single statement, as two variables and a BINLOG of them."""
    encoded = base64.b64encode(data)
    half = len(encoded) // 2 // 4 * 4
    return [b"SET @binlog_fragment_0='" + encoded[:half] + b"'", b"SET @binlog_fragment_1='" + encoded[half:] + b"'",
            b"BINLOG @binlog_fragment_0, @binlog_fragment_1"]


def batches(chunks: list[bytes], limit: int) -> list[bytes]:
    """Concatenations of ``chunks`` (each whole TABLE_MAP + row events) whose BINLOG
    statements stay within ``limit`` bytes. A chunk too large is cut between row
    events, the next part starting with the TABLE_MAPs of the statement it is in; an
    event too large alone stays alone (``fragment_statements``)."""
    out: list[bytes] = []
    current = bytearray()
    for chunk in chunks:
        if binlog.statement_bytes(len(current) + len(chunk)) <= limit:
            current += chunk
            continue
        if current:
            out.append(bytes(current))
            current = bytearray()
        if binlog.statement_bytes(len(chunk)) <= limit:
            current += chunk
        else:
            parts = _cut(chunk, limit)
            out += parts[:-1]
            current += parts[-1]
    if current:
        out.append(bytes(current))
    return out


def _cut(data: bytes, limit: int) -> list[bytes]:
    parts: list[bytes] = []
    current, maps = bytearray(), []
    for ev in binlog.split_events(data):
        is_map = binlog.event_type(ev) == binlog.TABLE_MAP
        if current and not is_map and binlog.statement_bytes(len(current) + len(ev)) > limit and \
                len(current) > sum(map(len, maps)):
            parts.append(bytes(current))
            current = bytearray(b"".join(maps))
        current += ev
        if is_map:
            maps.append(ev)
        elif binlog.rows_flags(ev) & binlog.STMT_END_F:
            maps = []
    parts.append(bytes(current))
    return parts


def probe_events(fmt: binlog.FormatDescription) -> bytes:
    """A TABLE_MAP and a WRITE_ROWS event inserting one row into
    rdma_bridge.bridge_probe (id INT NOT NULL), in the stream's format (CRC32 or not;
    v1 rows as MariaDB logs them, v2 as MySQL does: MySQL 8's BINLOG refuses v1):
    run inside a transaction that is rolled back, it shows whether this server goes on
    with the statements after a BINLOG and whether the user may run BINLOG at all."""
    names = b"".join(bytes([len(n)]) + n + b"\0" for n in (PROBE_SCHEMA.encode(), PROBE_TABLE.encode()))
    table_id = _PROBE_TABLE_ID.to_bytes(6, "little")
    table_map = table_id + b"\x01\x00" + names + b"\x01" + bytes([3]) + b"\x00" + b"\x00"  # 1 column, LONG, no meta
    v2 = fmt.flavor.binlog_rows_v2
    rows = table_id + struct.pack("<H", binlog.STMT_END_F) + (V2_EXTRA if v2 else b"") + b"\x01\x01" + b"\x00" + \
        struct.pack("<i", 1)
    return _event(binlog.TABLE_MAP, table_map, fmt) + _event(binlog.WRITE_ROWS_V2 if v2 else binlog.WRITE_ROWS_V1,
                                                             rows, fmt)


V2_EXTRA = struct.pack("<H", 2)  # a v2 row event's extra data: its length, itself included (none)


def update_type(fmt: binlog.FormatDescription) -> int:
    """The position event's type in ``fmt``'s stream: UPDATE_ROWS v2 or v1
    (bridge.server.flavor: ``Flavor.binlog_rows_v2``)."""
    return binlog.UPDATE_ROWS_V2 if fmt.flavor.binlog_rows_v2 else binlog.UPDATE_ROWS_V1


def _event(kind: int, body: bytes, fmt: binlog.FormatDescription) -> bytes:
    """An event as the primary (``fmt``'s server) would have logged it."""
    return event_bytes(kind, body, fmt.server_id, fmt.checksum_bytes == 4)


def event_bytes(kind: int, body: bytes, server_id: int, checksum: bool) -> bytes:
    """An event of ``server_id`` with ``body``, a CRC32 after it where the stream has them."""
    size = binlog.HEADER_BYTES + len(body) + 4 * checksum
    event = struct.pack("<IBIIIH", 0, kind, server_id, size, 0, 0) + body
    if checksum:
        event += struct.pack("<I", zlib.crc32(event) & 0xFFFFFFFF)
    return event


# --- the channel's position as a row event ------------------------------------------
# The position row changes in every replicated transaction. As an UPDATE statement it
# costs the replica's server a parse and a plan each time (about 40 us of its CPU per
# transaction, measured); as one more row event inside the transaction's BINLOG
# statement it costs a row lookup. The event is an UPDATE_ROWS (v1; v2 for MySQL) of
# rdma_bridge.bridge_meta that names the row by its key (the channel) and sets the
# position columns; the TABLE_MAP declares only the leading columns this writes, in
# the replica's own definitions, so the columns after them (epoch) keep their values.

POSITION_COLUMNS = ("channel", "applied_seq", "gtid_set", "pending_ddl_seq", "updated_at")
_ASCII_CHARSETS = ("latin1", "utf8mb3", "utf8", "utf8mb4", "ascii", "binary")


@dataclass(frozen=True, slots=True)
class PositionTable:
    """rdma_bridge.bridge_meta's leading columns as the replica defines them."""

    channel_bytes: int  # VARCHAR length in bytes: 1- or 2-byte length prefix
    updated_at_digits: int  # TIMESTAMP fractional digits

    def table_map(self, fmt: binlog.FormatDescription) -> bytes:
        names = b"".join(bytes([len(n)]) + n + b"\0" for n in (b"rdma_bridge", b"bridge_meta"))
        types = bytes([tablemap.VARCHAR, tablemap.LONGLONG, tablemap.BLOB, tablemap.LONGLONG, tablemap.TIMESTAMP2])
        meta = struct.pack("<H", self.channel_bytes) + bytes([2, self.updated_at_digits])  # TEXT: 2-byte length
        body = (_POSITION_TABLE_ID.to_bytes(6, "little") + b"\x01\x00" + names + bytes([len(types)]) + types
                + bytes([len(meta)]) + meta + b"\x00")  # no column is NULL
        return _event(binlog.TABLE_MAP, body, fmt)

    def update(self, channel: bytes, seq: int, gtids: bytes, now_us: int, fmt: binlog.FormatDescription) -> bytes:
        """The row of ``channel`` found by its key, then applied_seq, gtid_set,
        pending_ddl_seq (0) and updated_at set (once per applied group: the parts that
        never change are made once per channel)."""
        key = position_key(channel, self.channel_bytes, fmt.flavor.binlog_rows_v2)
        body = position_update_body(key, self.updated_at_digits, seq, gtids, now_us)
        return _event(update_type(fmt), body, fmt)


def position_update_body(key: bytes, digits: int, seq: int, gtids: bytes, now_us: int) -> bytes:
    """The UPDATE_ROWS body after ``key`` (``position_key``): applied_seq, gtid_set,
    pending_ddl_seq (0) and updated_at (TIMESTAMP2 of ``digits`` fractional digits)."""
    seconds, micros = divmod(now_us, 1_000_000)
    width = (digits + 1) // 2
    fraction = (micros - micros % 10 ** (6 - digits)) // 10 ** (6 - 2 * width)  # my_timestamp_to_binary
    return (key + _POSITION_VALUES.pack(seq, len(gtids)) + gtids + _POSITION_PENDING + _SECONDS.pack(seconds)
            + fraction.to_bytes(width, "big"))


_POSITION_VALUES = struct.Struct("<xQH")  # NULL bitmap of the after image, applied_seq, gtid_set length
_POSITION_PENDING = bytes(8)  # pending_ddl_seq 0
_SECONDS = struct.Struct(">I")  # updated_at's seconds (big-endian, as TIMESTAMP2 is stored)


def position_key(channel: bytes, channel_bytes: int, v2: bool = False) -> bytes:
    """The position event's fixed part for ``channel`` in a VARCHAR of ``channel_bytes``
    (``v2``: of a v2 event)."""
    return _position_key(channel, 1 if channel_bytes < 256 else 2, v2)


@functools.lru_cache(maxsize=16)
def _position_key(channel: bytes, prefix: int, v2: bool) -> bytes:
    """Table id, flags, (v2: the extra data,) column count and bitmaps, and the before image (the channel)."""
    return (_POSITION_TABLE_ID.to_bytes(6, "little") + struct.pack("<H", binlog.STMT_END_F)
            + (V2_EXTRA if v2 else b"") + b"\x05"
            + b"\x01" + b"\x1e"  # before image: channel; after image: the other four
            + b"\x00" + len(channel).to_bytes(prefix, "little") + channel)


def position_table(columns: list[tuple]) -> PositionTable | None:
    """From the replica's information_schema.COLUMNS rows of bridge_meta (name,
    data type, octet length, datetime precision, character set), in ordinal order;
    None when its leading columns are not the ones this writes."""
    leading = [(str(c[0]).lower(), str(c[1]).lower()) for c in columns[:len(POSITION_COLUMNS)]]
    if leading != list(zip(POSITION_COLUMNS, ("varchar", "bigint", "text", "bigint", "timestamp"))):
        return None
    channel, updated_at = columns[0], columns[4]
    if str(channel[4]).lower() not in _ASCII_CHARSETS or str(columns[2][4]).lower() not in _ASCII_CHARSETS:
        return None
    return PositionTable(int(channel[2]), int(updated_at[3] or 0))
