"""TABLE_MAP events and the row images of row events, read from bytes (pure).

In binlog apply mode the replica's server applies row events itself; the bridge only
needs a few values out of them: the key columns of each row for the writeset
scheduler (parallel workers), the heartbeat's timestamp and the repair marker's
fields. So a row image is walked column by column using the sizes the TABLE_MAP
gives (MySQL internals "Binlog row event"; ``log_event_server.cc``
``calc_field_size``), and each value comes back as its raw bytes (NULL: None):
callers turn the few they need into ints or text. With ``binlog_row_metadata=FULL``
the TABLE_MAP also carries the column names, signedness, character sets and the
primary key ("optional metadata"), read here.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.errors import RemoteProtocolError
from bridge.wire.binlog import (
    HEADER_BYTES,
    PARTIAL_UPDATE_ROWS,
    ROW_KINDS,
    TABLE_ID_BYTES,
    TABLE_MAP,
    UPDATE_ROWS_V1,
    UPDATE_ROWS_V2,
    WRITE_ROWS_V2,
    decimal_size,
    event_type,
    split_events,
    table_id,
)

# Column types (MySQL enum_field_types; MariaDB's compressed ones).
(DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24, DATE, TIME, DATETIME, YEAR,
 NEWDATE, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2) = range(20)
VARCHAR_COMPRESSED, BLOB_COMPRESSED = 140, 141
VECTOR, JSON, NEWDECIMAL, ENUM, SET = 242, 245, 246, 247, 248  # VECTOR: MySQL 9
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = 249, 250, 251, 252, 253, 254, 255
_FIXED = {TINY: 1, SHORT: 2, INT24: 3, LONG: 4, LONGLONG: 8, FLOAT: 4, DOUBLE: 8, NULL: 0, TIMESTAMP: 4,
          DATE: 3, NEWDATE: 3, TIME: 3, DATETIME: 8, YEAR: 1}
_META_BYTES = {FLOAT: 1, DOUBLE: 1, BLOB: 1, GEOMETRY: 1, JSON: 1, VECTOR: 1, BLOB_COMPRESSED: 1, TIMESTAMP2: 1,
               DATETIME2: 1,
               TIME2: 1, VARCHAR: 2, VAR_STRING: 2, VARCHAR_COMPRESSED: 2, BIT: 2, NEWDECIMAL: 2, STRING: 2,
               ENUM: 2, SET: 2}
_NUMERIC = frozenset({TINY, SHORT, INT24, LONG, LONGLONG, NEWDECIMAL, FLOAT, DOUBLE, YEAR})
_CHARACTER = frozenset({STRING, VAR_STRING, VARCHAR, BLOB, VECTOR})  # MySQL lists a VECTOR's (binary) one too
BINARY_COLLATION = 63
# optional metadata field types (binlog_row_metadata=FULL)
_SIGNEDNESS, _DEFAULT_CHARSET, _COLUMN_CHARSET, _COLUMN_NAME, _SIMPLE_PRIMARY_KEY, _PRIMARY_KEY_WITH_PREFIX = \
    1, 2, 3, 4, 8, 9


@dataclass(frozen=True, slots=True)
class TableMap:
    """One table as the binlog describes it. ``sizes``: per column a fixed byte size
    (>= 0) or minus the width of its length prefix (< 0). ``collations``: per column
    the collation id of character columns, else None."""

    table_id: int
    schema: str
    table: str
    types: tuple[int, ...]
    sizes: tuple[int, ...]
    names: tuple[str, ...]  # '' where the event has no names (binlog_row_metadata MINIMAL)
    unsigned: tuple[bool, ...]
    collations: tuple[int | None, ...]
    primary_key: tuple[int, ...]

    def column(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise RemoteProtocolError(f"table map {self.schema}.{self.table}: no column {name!r}") from None


def packed_int(data, at: int) -> tuple[int, int]:
    """A length-encoded integer: (value, next position)."""
    first = data[at]
    if first < 251:
        return first, at + 1
    size = {252: 2, 253: 3, 254: 8}.get(first)
    if size is None:
        raise RemoteProtocolError(f"packed integer: bad first byte {first} at {at}")
    return int.from_bytes(data[at + 1:at + 1 + size], "little"), at + 1 + size


# Every transaction repeats the TABLE_MAP of each table it touches; the same body (table
# id, names, types, metadata) is the same table, so it is read once (an ALTER or a
# reused table id changes the body).
_PARSED: dict[bytes, TableMap] = {}
_PARSED_MAX = 4096


def parse_table_map(event, checksum_bytes: int) -> TableMap:
    body = bytes(event[HEADER_BYTES:len(event) - checksum_bytes])
    table = _PARSED.get(body)
    if table is not None:
        return table
    try:
        table = _parse_table_map(bytes(event), checksum_bytes)
    except (IndexError, ValueError) as exc:
        raise RemoteProtocolError(f"table map: unreadable ({exc})") from exc
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[body] = table
    return table


def _parse_table_map(event: bytes, checksum_bytes: int) -> TableMap:
    end = len(event) - checksum_bytes
    at = HEADER_BYTES + TABLE_ID_BYTES + 2
    n = event[at]
    schema = event[at + 1:at + 1 + n].decode("utf-8")
    at += n + 2
    n = event[at]
    table = event[at + 1:at + 1 + n].decode("utf-8")
    at += n + 2
    count, at = packed_int(event, at)
    raw_types = event[at:at + count]
    at += count
    meta_len, at = packed_int(event, at)
    types, sizes, at_meta = [], [], at
    for t in raw_types:
        width = _META_BYTES.get(t, 0)
        real, size = _column_size(t, int.from_bytes(event[at_meta:at_meta + width], "little"),
                                  event[at_meta:at_meta + width])
        types.append(real)
        sizes.append(size)
        at_meta += width
    at += meta_len + (count + 7) // 8  # metadata, then the nullability bitmap
    optional = _optional_metadata(event, at, end)
    return TableMap(table_id(event), schema, table, tuple(types), tuple(sizes),
                    tuple(optional.get(_COLUMN_NAME) or [""] * count),
                    _signedness(types, optional.get(_SIGNEDNESS, b"")), _collations(types, optional),
                    tuple(optional.get(_SIMPLE_PRIMARY_KEY) or optional.get(_PRIMARY_KEY_WITH_PREFIX) or ()))


def _column_size(t: int, meta: int, raw_meta: bytes) -> tuple[int, int]:
    """(real type, size rule) of a column from its TABLE_MAP type and metadata."""
    if t in _FIXED:
        return t, _FIXED[t]
    if t in (VARCHAR, VAR_STRING, VARCHAR_COMPRESSED):
        return t, -1 if meta < 256 else -2
    if t in (BLOB, GEOMETRY, JSON, VECTOR, BLOB_COMPRESSED, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB):
        return t, -meta
    if t in (TIMESTAMP2, DATETIME2, TIME2):
        return t, {TIMESTAMP2: 4, DATETIME2: 5, TIME2: 3}[t] + (meta + 1) // 2
    if t == NEWDECIMAL:
        return t, decimal_size(raw_meta[0], raw_meta[1])
    if t == BIT:
        return t, raw_meta[1] + (1 if raw_meta[0] else 0)
    if t in (STRING, ENUM, SET):
        byte0, byte1 = raw_meta[0], raw_meta[1]
        if (byte0 & 0x30) != 0x30:  # a CHAR longer than 255: the length's high bits hide in byte0
            return STRING, -1 if (((byte0 & 0x30) ^ 0x30) << 4 | byte1) < 256 else -2
        if byte0 in (ENUM, SET):
            return byte0, byte1
        return STRING, -1 if byte1 < 256 else -2
    raise RemoteProtocolError(f"table map: column type {t} is not known to this version of rdma-bridge")


def _optional_metadata(event: bytes, at: int, end: int) -> dict:
    out: dict = {}
    while at < end:
        kind = event[at]
        length, at = packed_int(event, at + 1)
        value, at = event[at:at + length], at + length
        if kind in (_SIGNEDNESS, _DEFAULT_CHARSET, _COLUMN_CHARSET):
            out[kind] = value
        elif kind == _COLUMN_NAME:
            out[kind] = _strings(value)
        elif kind in (_SIMPLE_PRIMARY_KEY, _PRIMARY_KEY_WITH_PREFIX):
            ints = _ints(value)
            out[kind] = ints if kind == _SIMPLE_PRIMARY_KEY else ints[::2]
    return out


def _ints(value: bytes) -> list[int]:
    out, at = [], 0
    while at < len(value):
        n, at = packed_int(value, at)
        out.append(n)
    return out


def _strings(value: bytes) -> list[str]:
    out, at = [], 0
    while at < len(value):
        n, at = packed_int(value, at)
        out.append(value[at:at + n].decode("utf-8"))
        at += n
    return out


def _signedness(types: list[int], bitmap: bytes) -> tuple[bool, ...]:
    """One bit per numeric column, most significant first: set = UNSIGNED."""
    out, k = [], 0
    for t in types:
        if t in _NUMERIC:
            byte = bitmap[k // 8] if k // 8 < len(bitmap) else 0
            out.append(bool(byte & (0x80 >> (k % 8))))
            k += 1
        else:
            out.append(False)
    return tuple(out)


def _collations(types: list[int], optional: dict) -> tuple[int | None, ...]:
    """Per character column: DEFAULT_CHARSET (a default and exceptions by character
    column index) or COLUMN_CHARSET (one per character column)."""
    chars = [i for i, t in enumerate(types) if t in _CHARACTER]
    found: dict[int, int] = {}
    if _COLUMN_CHARSET in optional:
        found = dict(zip(chars, _ints(optional[_COLUMN_CHARSET])))
    elif _DEFAULT_CHARSET in optional:
        ints = _ints(optional[_DEFAULT_CHARSET])
        exceptions = dict(zip(ints[1::2], ints[2::2]))
        found = {col: exceptions.get(k, ints[0]) for k, col in enumerate(chars)} if ints else {}
    return tuple(found.get(i) for i in range(len(types)))


# --- row images ----------------------------------------------------------------

Image = tuple  # raw value bytes per column (None: NULL, ABSENT: not in the image)


class _Absent:
    """A column a row image leaves out (not NULL: nothing is known of it)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def row_images(event, table: TableMap, checksum_bytes: int) -> list[tuple[Image | None, Image | None]]:
    """(before, after) per row of a WRITE/UPDATE/DELETE rows event (v1 or v2) on
    ``table``. A column the image leaves out reads as ``ABSENT``: with
    binlog_row_image=FULL (which the primary side's preflight demands) only MariaDB
    11.x leaves any out, the generated columns of an UPDATE's images (measured, 11.8)."""
    kind = ROW_KINDS.get(event_type(event))
    if kind is None or event_type(event) == PARTIAL_UPDATE_ROWS:
        raise RemoteProtocolError(f"row images: event type {event_type(event)} is not a full-image rows event")
    try:
        return _row_images(bytes(event), table, checksum_bytes, kind)
    except IndexError as exc:
        raise RemoteProtocolError(f"row images of {table.schema}.{table.table}: truncated ({exc})") from exc


def _row_images(event: bytes, table: TableMap, checksum_bytes: int, kind: str):
    at = HEADER_BYTES + TABLE_ID_BYTES + 2
    if event_type(event) >= WRITE_ROWS_V2:
        at += int.from_bytes(event[at:at + 2], "little")  # extra data, its length field included
    width, at = packed_int(event, at)
    n, bitmap_bytes = len(table.sizes), (width + 7) // 8
    if width != n:
        raise RemoteProtocolError(f"row images of {table.schema}.{table.table}: {width} columns, table map has {n}")
    present = []  # per image (an UPDATE has two): the columns it holds
    for _ in range(2 if event_type(event) in (UPDATE_ROWS_V1, UPDATE_ROWS_V2) else 1):
        bits = int.from_bytes(event[at:at + bitmap_bytes], "little")
        present.append(tuple(bits >> i & 1 for i in range(n)))
        at += bitmap_bytes
    end, rows = len(event) - checksum_bytes, []
    while at < end:
        first, at = _image(event, at, table.sizes, present[0])
        if kind == "update":
            second, at = _image(event, at, table.sizes, present[1])
            rows.append((first, second))
        else:
            rows.append((None, first) if kind == "insert" else (first, None))
    if at != end:
        raise RemoteProtocolError(f"row images of {table.schema}.{table.table}: overran the event by {at - end} bytes")
    return rows


def _image(event: bytes, at: int, sizes: tuple[int, ...], present: tuple[int, ...]) -> tuple[Image, int]:
    """One row image: its NULL bits count only the columns it holds."""
    null_bytes = (sum(present) + 7) // 8
    nulls = int.from_bytes(event[at:at + null_bytes], "little")
    at += null_bytes
    values, held = [], 0
    for size, here in zip(sizes, present):
        if not here:
            values.append(ABSENT)
            continue
        held += 1
        if nulls >> (held - 1) & 1:
            values.append(None)
            continue
        if size < 0:
            length = int.from_bytes(event[at:at - size], "little")
            at -= size
            size = length
        values.append(event[at:at + size])
        at += size
    return tuple(values), at


def as_int(raw: bytes | None, unsigned: bool = False) -> int | None:
    return None if raw is None else int.from_bytes(raw, "little", signed=not unsigned)


# Collation ids of the latin1 character set (everything else is read as UTF-8 text,
# which holds for utf8mb3/utf8mb4 and is only used to fold keys and read our own rows).
_LATIN1 = frozenset({5, 8, 15, 31, 47, 48, 49, 94})


def as_text(raw: bytes | None, collation: int | None) -> str | bytes | None:
    """A character column's value as text; binary strings stay bytes."""
    if raw is None or collation == BINARY_COLLATION:
        return raw
    return raw.decode("latin-1" if collation in _LATIN1 else "utf-8", "surrogateescape")


def rows_of(data: bytes, checksum_bytes: int):
    """(table, kind, before, after) for every row of a concatenation of TABLE_MAP and
    row events (``RowEvents.data``), in order."""
    tables: dict[int, TableMap] = {}
    for ev in split_events(data):
        kind = event_type(ev)
        if kind == TABLE_MAP:
            table = parse_table_map(ev, checksum_bytes)
            tables[table.table_id] = table
            continue
        table = tables.get(table_id(ev))
        if table is None:
            raise RemoteProtocolError(f"row event on table id {table_id(ev)} without its TABLE_MAP")
        for before, after in row_images(ev, table, checksum_bytes):
            yield table, ROW_KINDS[kind], before, after
