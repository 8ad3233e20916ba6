"""Binlog events as bytes (pure): what the bridge reads of them, and nothing more.

Every event is the 19-byte common header (timestamp u32, type u8, server_id u32,
event size u32, log_pos u32, flags u16), a type-specific body and, when the stream's
FORMAT_DESCRIPTION event says so (``checksum_alg`` 1), a 4-byte CRC32 trailer
(MySQL internals, "Binlog Event header"; MariaDB's ``log_event.h``). In binlog apply
mode the primary side ships the row events of a transaction as they came and the
replica hands them to its server unchanged (``BINLOG '<base64>'``), so only the parts
needed for framing, dedup, scheduling and session context are read here: headers,
GTIDs, table names of TABLE_MAP events, row-event flags, and QUERY events with their
status variables. Malformed input raises ``RemoteProtocolError``.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from bridge.errors import RemoteProtocolError
from bridge.server.flavor import Flavor
from bridge.wire import mysqlgtid

HEADER_BYTES = 19
_HEADER = struct.Struct("<IBIIIH")

# Event type codes (MySQL binlog_event.h, MariaDB log_event.h).
QUERY, ROTATE, INTVAR, FORMAT_DESCRIPTION, XID = 2, 4, 5, 15, 16
RAND, USER_VAR, TABLE_MAP, HEARTBEAT = 13, 14, 19, 27
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 30, 31, 32
MYSQL_GTID, MYSQL_ANONYMOUS_GTID, PARTIAL_UPDATE_ROWS, TRANSACTION_PAYLOAD = 33, 34, 39, 40
MYSQL_GTID_TAGGED = 42  # MySQL 8.4+: a transaction committed with a tagged GTID (uuid:tag:n)
ANNOTATE_ROWS, MARIADB_GTID, QUERY_COMPRESSED = 160, 162, 165
ROWS_COMPRESSED = frozenset(range(166, 172))  # MariaDB log_bin_compress
ROW_EVENTS = frozenset({WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1, WRITE_ROWS_V2, UPDATE_ROWS_V2,
                        DELETE_ROWS_V2, PARTIAL_UPDATE_ROWS})
ROW_KINDS = {WRITE_ROWS_V1: "insert", WRITE_ROWS_V2: "insert", UPDATE_ROWS_V1: "update", UPDATE_ROWS_V2: "update",
             PARTIAL_UPDATE_ROWS: "update", DELETE_ROWS_V1: "delete", DELETE_ROWS_V2: "delete"}
CONTEXT_EVENTS = frozenset({INTVAR, RAND, USER_VAR})  # session context of the statement-format QUERY after them
# Row event flags (post-header): the statement ends here; the primary ran with
# foreign_key_checks=0 / unique_checks=0 for it.
STMT_END_F, NO_FOREIGN_KEY_CHECKS_F, RELAXED_UNIQUE_CHECKS_F = 0x1, 0x2, 0x4
MARIADB_FL_STANDALONE = 0x01
TABLE_ID_BYTES = 6  # post-header length 8 (TABLE_MAP) / 8 or 10 (rows) on every server since MySQL 5.1


@dataclass(frozen=True, slots=True)
class EventHeader:
    timestamp: int
    type: int
    server_id: int
    size: int
    log_pos: int
    flags: int


def read_header(event, at: int = 0) -> EventHeader:
    if len(event) - at < HEADER_BYTES:
        raise RemoteProtocolError(f"binlog event at byte {at}: {len(event) - at} bytes, shorter than its header")
    return EventHeader(*_HEADER.unpack_from(event, at))


def event_type(event) -> int:
    return event[4]


def event_size(event, at: int = 0) -> int:
    return int.from_bytes(event[at + 9:at + 13], "little")


def next_position(event, at: int = 0) -> int:
    """The header's next position: where the event ends in its binlog file (0: an event
    that moves no position)."""
    return int.from_bytes(event[at + 13:at + 17], "little")


def made_header(kind: int, server_id: int, size: int, next_pos: int, flags: int, timestamp: int = 0) -> bytes:
    return _HEADER.pack(timestamp, kind, server_id, size, next_pos, flags)


def rotate_target(event, checksum_bytes: int) -> tuple[str, int]:
    """A ROTATE event's (next file, position in it)."""
    end = len(event) - checksum_bytes
    return bytes(event[HEADER_BYTES + 8:end]).decode(), struct.unpack_from("<Q", event, HEADER_BYTES)[0]


def split_events(data) -> Iterator[bytes]:
    """The events of a concatenation (each says its own size)."""
    at, end = 0, len(data)
    while at < end:
        size = event_size(data, at) if end - at >= HEADER_BYTES else 0
        if size < HEADER_BYTES or at + size > end:
            raise RemoteProtocolError(f"binlog events: bad event size {size} at byte {at} of {end}")
        yield bytes(data[at:at + size])
        at += size


# --- FORMAT_DESCRIPTION ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FormatDescription:
    """The stream's FORMAT_DESCRIPTION event: the server's version and whether every
    event ends with a CRC32 (binlog_checksum)."""

    event: bytes
    server_version: str
    checksum_bytes: int  # 4 with CRC32, else 0

    @property
    def server_id(self) -> int:
        return int.from_bytes(self.event[5:9], "little")

    @property
    def flavor(self) -> Flavor:
        """The flavor of the server that wrote the stream (its version string says)."""
        return Flavor.from_version(self.server_version)

    @property
    def id(self) -> str:
        """A short name for the event, compared when a session resumes."""
        return f"{zlib.crc32(self.event):08x}"


def parse_format_description(event: bytes) -> FormatDescription:
    """Body: binlog version u16, server version char[50], create time u32, header
    length u8, post-header lengths, then (every server since MySQL 5.6.1 / MariaDB
    5.3) the checksum algorithm u8 and a 4-byte checksum."""
    if event_type(event) != FORMAT_DESCRIPTION or len(event) < HEADER_BYTES + 57 + 5:
        raise RemoteProtocolError(f"format description: not a FORMAT_DESCRIPTION event ({len(event)} bytes)")
    version = event[HEADER_BYTES + 2:HEADER_BYTES + 52].split(b"\0", 1)[0].decode("ascii", "replace")
    alg = event[-5]
    if alg not in (0, 1):
        raise RemoteProtocolError(f"format description of {version}: unknown checksum algorithm {alg}")
    return FormatDescription(bytes(event), version, 4 if alg == 1 else 0)


# --- GTID ----------------------------------------------------------------------

def parse_gtid(event) -> tuple[str, bool]:
    """(GTID text, standalone) of a MariaDB GTID event (seq u64, domain u32, flags u8;
    the server id is the header's) or a MySQL GTID event (flags u8, uuid 16, gno u64)."""
    body, kind = HEADER_BYTES, read_header(event).type
    try:
        if kind == MARIADB_GTID:
            seq, domain, flags = struct.unpack_from("<QIB", event, body)
            server = int.from_bytes(event[5:9], "little")
            return f"{domain}-{server}-{seq}", bool(flags & MARIADB_FL_STANDALONE)
        if kind == MYSQL_GTID:
            flags, sid, gno = struct.unpack_from("<B16sQ", event, body)
            return f"{mysqlgtid.uuid_text(sid)}:{gno}", False
        if kind == MYSQL_GTID_TAGGED:
            return mysqlgtid.tagged_gtid(bytes(event[body:])), False
    except (struct.error, IndexError) as exc:
        raise RemoteProtocolError(f"gtid event: truncated ({exc})") from exc
    raise RemoteProtocolError(f"gtid: event type {kind} is not a GTID event")


# --- BINLOG statements ---------------------------------------------------------
# ``BINLOG '<base64 of events>'``: how events reach a server as a statement (what
# ``mariadb-binlog`` prints); the replica side's apply (bridge.apply.binlog.build) and
# its one-call round trip (bridge.wire.hotpath.one_trip) both build them here.
BINLOG_PREFIX, BINLOG_SUFFIX = b"BINLOG '", b"'"


def semi_sync_ack(position: int, log_file: bytes) -> bytes:
    """A semi-sync replica's ACK packet on the dump connection: sequence id 0, then 0xEF,
    the 8-byte binlog position, the file name (no NUL)."""
    payload = b"\xef" + position.to_bytes(8, "little") + log_file
    return len(payload).to_bytes(3, "little") + b"\0" + payload


def binlog_statement(data) -> bytes:
    return BINLOG_PREFIX + base64.b64encode(data) + BINLOG_SUFFIX


def statement_bytes(raw_bytes: int) -> int:
    """Size of the BINLOG statement for ``raw_bytes`` of events."""
    return len(BINLOG_PREFIX) + 4 * ((raw_bytes + 2) // 3) + len(BINLOG_SUFFIX)


# --- row events --------------------------------------------------------------

def rows_flags(event) -> int:
    return int.from_bytes(event[HEADER_BYTES + TABLE_ID_BYTES:HEADER_BYTES + TABLE_ID_BYTES + 2], "little")


def table_id(event) -> int:
    return int.from_bytes(event[HEADER_BYTES:HEADER_BYTES + TABLE_ID_BYTES], "little")


def table_map_names(event) -> tuple[str, str]:
    """(schema, table) of a TABLE_MAP event: table id u48, flags u16, then the
    length-prefixed, NUL-terminated schema and table names."""
    at = HEADER_BYTES + TABLE_ID_BYTES + 2
    try:
        n = event[at]
        schema = bytes(event[at + 1:at + 1 + n]).decode("utf-8")
        at += n + 2
        m = event[at]
        return schema, bytes(event[at + 1:at + 1 + m]).decode("utf-8")
    except (IndexError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"table map: unreadable names ({exc})") from exc


# --- QUERY -------------------------------------------------------------------

# Status variable codes (MySQL Query_event, MariaDB Query_log_event), with the byte
# size of the fixed-size ones. A code this table does not know ends the parse
# (its size is unknown), exactly as the server itself does.
Q_FLAGS2, Q_SQL_MODE, Q_CATALOG, Q_AUTO_INCREMENT, Q_CHARSET, Q_TIME_ZONE = 0, 1, 2, 3, 4, 5
Q_CATALOG_NZ, Q_LC_TIME_NAMES, Q_CHARSET_DATABASE, Q_TABLE_MAP_FOR_UPDATE = 6, 7, 8, 9
Q_MASTER_DATA_WRITTEN, Q_INVOKER, Q_UPDATED_DB_NAMES, Q_MICROSECONDS = 10, 11, 12, 13
Q_COMMIT_TS, Q_COMMIT_TS2, Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP, Q_DDL_LOGGED_WITH_XID = 14, 15, 16, 17
Q_DEFAULT_COLLATION_FOR_UTF8MB4, Q_SQL_REQUIRE_PRIMARY_KEY, Q_DEFAULT_TABLE_ENCRYPTION = 18, 19, 20
Q_HRNOW, Q_XID, Q_GTID_FLAGS3, Q_CHARACTER_SET_COLLATIONS = 128, 129, 130, 131
_FIXED = {Q_FLAGS2: 4, Q_SQL_MODE: 8, Q_AUTO_INCREMENT: 4, Q_CHARSET: 6, Q_LC_TIME_NAMES: 2,
          Q_CHARSET_DATABASE: 2, Q_TABLE_MAP_FOR_UPDATE: 8, Q_MASTER_DATA_WRITTEN: 4, Q_MICROSECONDS: 3,
          Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP: 1, Q_DDL_LOGGED_WITH_XID: 8, Q_DEFAULT_COLLATION_FOR_UTF8MB4: 2,
          Q_SQL_REQUIRE_PRIMARY_KEY: 1, Q_DEFAULT_TABLE_ENCRYPTION: 1, Q_HRNOW: 3, Q_XID: 8, Q_GTID_FLAGS3: 1}
# flags2 bits (sql_priv.h OPTION_*): the session switches a statement ran with
OPTION_AUTO_IS_NULL, OPTION_NO_FOREIGN_KEY_CHECKS, OPTION_RELAXED_UNIQUE_CHECKS = 1 << 14, 1 << 26, 1 << 27
OPTION_EXPLICIT_DEF_TIMESTAMP = 1 << 24  # MariaDB: explicit_defaults_for_timestamp (MySQL has a status variable)


@dataclass(frozen=True, slots=True)
class QueryEvent:
    """A QUERY event: ``sql`` as the primary's client sent it, in its
    character_set_client (``charset``: client, connection collation, server
    collation ids). ``status`` holds the other session variables the statement ran
    with, by status-variable code."""

    schema: str
    sql: bytes
    timestamp: int
    microseconds: int = 0
    error_code: int = 0
    flags2: int | None = None
    sql_mode: int | None = None
    charset: tuple[int, int, int] | None = None
    status: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The statement for logs and for recognising its verb (not for execution)."""
        return self.sql.decode("utf-8", "replace")


def parse_query(event, checksum_bytes: int) -> QueryEvent:
    """Post-header: thread id u32, exec time u32, schema length u8, error code u16,
    status length u16; then the status variables, the schema (NUL-terminated) and
    the statement."""
    try:
        h = read_header(event)
        _, _, db_len, error_code, status_len = struct.unpack_from("<IIBHH", event, HEADER_BYTES)
        at = HEADER_BYTES + 13
        status = _status_vars(bytes(event[at:at + status_len]))
        at += status_len
        schema = bytes(event[at:at + db_len]).decode("utf-8")
        sql = bytes(event[at + db_len + 1:len(event) - checksum_bytes])
    except (struct.error, UnicodeDecodeError, IndexError) as exc:  # IndexError: a status variable cut short
        raise RemoteProtocolError(f"query event: unreadable ({exc})") from exc
    micro = status.pop(Q_HRNOW, None)
    micro = status.pop(Q_MICROSECONDS, micro)
    return QueryEvent(schema, sql, h.timestamp, micro or 0, error_code, status.pop(Q_FLAGS2, None),
                      status.pop(Q_SQL_MODE, None), status.pop(Q_CHARSET, None), status)


def _status_vars(data: bytes) -> dict:
    out: dict = {}
    at, end = 0, len(data)
    while at < end:
        code, at = data[at], at + 1
        size = _FIXED.get(code)
        if size is not None:
            out[code] = _fixed_status(code, data[at:at + size])
            at += size
        elif code in (Q_CATALOG, Q_TIME_ZONE, Q_CATALOG_NZ):
            n = data[at]
            out[code] = data[at + 1:at + 1 + n].decode("utf-8")
            at += 1 + n + (code == Q_CATALOG)  # the old catalog form is also NUL-terminated
        elif code == Q_INVOKER:
            n = data[at]
            user = data[at + 1:at + 1 + n].decode("utf-8")
            at += 1 + n
            m = data[at]
            out[code] = (user, data[at + 1:at + 1 + m].decode("utf-8"))
            at += 1 + m
        elif code == Q_CHARACTER_SET_COLLATIONS:  # MariaDB 11.2+: count u8, then (charset id, collation id) u16 pairs
            count = data[at]
            ids = struct.unpack_from(f"<{2 * count}H", data, at + 1)
            out[code] = tuple(zip(ids[::2], ids[1::2]))
            at += 1 + 4 * count
        elif code == Q_UPDATED_DB_NAMES:
            count, at = data[at], at + 1
            names = data[at:].split(b"\0")[:count] if count < 254 else []
            out[code] = tuple(n.decode("utf-8") for n in names)
            at += sum(len(n) + 1 for n in names)
        else:
            break  # the server stops here too: later codes cannot be sized
    return out


def _fixed_status(code: int, raw: bytes):
    if code == Q_AUTO_INCREMENT:
        return struct.unpack("<HH", raw)
    if code == Q_CHARSET:
        return struct.unpack("<HHH", raw)
    return int.from_bytes(raw, "little")


# --- context events of statement-format DML ----------------------------------

@dataclass(frozen=True, slots=True)
class UserVar:
    name: str
    kind: str  # null | string | real | int | decimal
    value: object = None
    collation: int = 0  # string values: the collation id


def parse_context(event, checksum_bytes: int) -> tuple[str, object]:
    """("intvar", (1 LAST_INSERT_ID | 2 INSERT_ID, value)), ("rand", (seed1, seed2)),
    or ("user_var", UserVar)."""
    body, kind = HEADER_BYTES, read_header(event).type
    try:
        if kind == INTVAR:
            return "intvar", struct.unpack_from("<BQ", event, body)
        if kind == RAND:
            return "rand", struct.unpack_from("<QQ", event, body)
        if kind == USER_VAR:
            return "user_var", _user_var(bytes(event[body:len(event) - checksum_bytes]))
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise RemoteProtocolError(f"context event type {kind}: unreadable ({exc})") from exc
    raise RemoteProtocolError(f"context event: type {kind} is not INTVAR, RAND or USER_VAR")


def _user_var(data: bytes) -> UserVar:
    """name length u32, name, is_null u8, then value type u8, collation u32, value
    length u32, value and (optional) flags u8 (1: unsigned)."""
    n = int.from_bytes(data[0:4], "little")
    name = data[4:4 + n].decode("utf-8")
    at = 4 + n
    if data[at]:
        return UserVar(name, "null")
    vtype, collation, length = struct.unpack_from("<BII", data, at + 1)
    at += 10
    raw, flags = data[at:at + length], (data[at + length] if len(data) > at + length else 0)
    if vtype == 0:
        return UserVar(name, "string", raw, collation)
    if vtype == 1:
        return UserVar(name, "real", struct.unpack("<d", raw)[0])
    if vtype == 2:
        return UserVar(name, "int", int.from_bytes(raw, "little", signed=not flags & 1))
    if vtype == 4:
        return UserVar(name, "decimal", decimal_text(raw[2:], raw[0], raw[1]))
    raise RemoteProtocolError(f"user variable @{name}: unknown value type {vtype}")


_DIG_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_size(precision: int, scale: int) -> int:
    """Bytes of MySQL's binary DECIMAL(precision, scale) (decimal.c decimal_bin_size)."""
    intg = precision - scale
    return intg // 9 * 4 + _DIG_BYTES[intg % 9] + scale // 9 * 4 + _DIG_BYTES[scale % 9]


def decimal_text(raw: bytes, precision: int, scale: int) -> str:
    """MySQL's binary DECIMAL as exact text: big-endian groups of 9 digits, the sign in
    the top bit (inverted), negative values stored as the one's complement."""
    data = bytearray(raw[:decimal_size(precision, scale)])
    negative = not data[0] & 0x80
    data[0] ^= 0x80
    mask = 0xFF if negative else 0
    data = bytes(b ^ mask for b in data)
    intg, frac = precision - scale, scale
    parts, at = [], 0
    for digits in ([intg % 9] if intg % 9 else []) + [9] * (intg // 9):
        size = _DIG_BYTES[digits]
        parts.append(f"{int.from_bytes(data[at:at + size], 'big'):0{digits}d}")
        at += size
    fraction = []
    for digits in [9] * (frac // 9) + ([frac % 9] if frac % 9 else []):
        size = _DIG_BYTES[digits]
        fraction.append(f"{int.from_bytes(data[at:at + size], 'big'):0{digits}d}")
        at += size
    whole = "".join(parts).lstrip("0") or "0"
    text = whole + ("." + "".join(fraction) if fraction else "")
    return "-" + text if negative else text
