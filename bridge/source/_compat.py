"""Every adaptation of python-mysql-replication (the binlog library) in one place,
checked against the installed version at import: a version not listed in
``TESTED_VERSIONS`` fails loudly here, before a stream is opened, because each
item below reaches into the library's private parts and may silently mean
something else in another release.

What is adapted, and why:
- ``use_checksum`` / ``post_header_lengths`` / ``stream_connection``: state the
  library keeps name-mangled or private (the FORMAT_DESCRIPTION's checksum flag and
  post-header lengths, the dump connection), read by the reader's fast path.
- zero and invalid dates: the library's private readers decode them to None; ours
  keep them as ``InvalidTemporal`` text (bridge.source.rowimage), negative
  fractional TIME included (the library reads -838:59:59.99 as ...59.01).
- UTF-16/UTF-32/UCS-2 are big-endian in MySQL; the library hands Python a codec name
  that assumes little-endian.
- MariaDB 11's uca1400 collations have ids from 2048 up (utf8mb4's default among them),
  which the library's id table lacks: it read every such column as utf8, UCS-2 and
  UTF-16/32 text too. Their character set is in the id (``mariadb_uca1400_charset``).
- MySQL's binary JSON: the library decodes it into dict/list (keys as bytes, dates and
  decimals lost), which neither the wire nor a replica takes; ours gives the text MySQL
  prints for it (bridge.wire.mysqljson), as MariaDB's JSON (LONGTEXT) arrives. A partial
  JSON update (binlog_row_value_options=PARTIAL_JSON) is refused at the preflight.
- MySQL 9's VECTOR columns (type 242), which the library does not know: their metadata
  byte (the length's size, as a BLOB's) is read, and the column is read as a binary
  value (the floats' bytes, which a MySQL replica takes as they are) through the JSON
  column's path, marked by its length size (``VectorLength``), and counted among the
  columns whose character set the table map lists, as MySQL counts it; optional metadata fields
  the library does not know (VECTOR_DIMENSIONALITY, 13) are left out of the table map
  before it reads them (it has no way to skip one).
- TableMap events parsed once: every transaction repeats the TableMap event of each
  table it touches, and parsing it was over half of the decode time; events with the
  same body bytes describe the same table, so the first parse is reused (an ALTER or
  a reused table id changes the bytes and parses anew).
- MySQL 8.4+'s tagged GTIDs in the dump request: the library encodes a GTID set without
  tags; the set a MySQL dump starts from is encoded by ours (``encode_gtid_set``: the
  tagged format when it holds a tag, as the server writes its Previous_gtids event).

Only bridge.source imports this module (import-linter keeps it so).
"""

from __future__ import annotations

from importlib import metadata

from pymysqlreplication import BinLogStreamReader, binlogstream, row_event
from pymysqlreplication.column import Column
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import MetadataFieldType, RowsEvent, TableMapEvent

from bridge.errors import ConfigError, SourceError
from bridge.model import GtidSet
from bridge.source import rowimage
from bridge.wire import mysqlgtid, mysqljson

LIBRARY = "mysql-replication"
TESTED_VERSIONS = ("1.0.17",)  # the reader's tests pass against these; add one only after they do


def check_version(installed: str | None = None) -> str:
    """The installed library version, or ConfigError naming it and the tested ones."""
    try:
        installed = installed or metadata.version(LIBRARY)
    except metadata.PackageNotFoundError as exc:
        raise ConfigError(f"the binlog library {LIBRARY} is not installed (pip install '{LIBRARY}=="
                          f"{TESTED_VERSIONS[-1]}')") from exc
    if installed not in TESTED_VERSIONS:
        raise ConfigError(f"the binlog library {LIBRARY} {installed} is installed, but rdma-bridge reaches into "
                          f"its private parts and was tested only with {', '.join(TESTED_VERSIONS)}: install "
                          f"'{LIBRARY}=={TESTED_VERSIONS[-1]}' (the version setup.cfg pins)")
    return installed


VERSION = check_version()


# --- private state the reader's fast path reads ----------------------------------

def use_checksum(stream: BinLogStreamReader) -> bool:
    return bool(stream._BinLogStreamReader__use_checksum)


def post_header_lengths(stream: BinLogStreamReader) -> bytes | None:
    """The post-header lengths the server declared in its FORMAT_DESCRIPTION."""
    return stream._BinLogStreamReader__post_header_lengths


def stream_connection(stream: BinLogStreamReader):
    """The dump connection (our PyMySQL subclass), None before the stream opens."""
    return getattr(stream, "_stream_connection", None)


# --- zero and invalid dates (the library's private readers replaced) -------------

def _read_date(self):
    return rowimage.read_date(self.packet.read(3), 0)[0]


def _read_datetime(self):
    v = self.packet.read_uint64()
    date, time = divmod(v, 1_000_000)
    return rowimage.temporal(date // 10000, date % 10000 // 100, date % 100,
                             (time // 10000, time % 10000 // 100, time % 100))


def _read_datetime2(self, column):
    fsp = column.fsp or 0
    data = self.packet.read(5 + (fsp + 1) // 2)
    return rowimage.datetime2_reader(fsp)(data, 0)[0]


def _read_time2(self, column):
    """Follows MySQL's my_time_packed_from_binary (negative fractions included)."""
    fsp = column.fsp or 0
    data = self.packet.read(3 + (fsp + 1) // 2)
    return rowimage.time2_reader(fsp)(data, 0)[0]


# --- MySQL's binary JSON as the text MySQL prints -------------------------------------

def _read_binary_json(self, size, is_partial):
    if isinstance(size, VectorLength):
        return self.read(self.read_uint_by_size(size))
    if is_partial:
        raise SourceError("a partial JSON update (binlog_row_value_options=PARTIAL_JSON) reached the reader: set "
                          "binlog_row_value_options='' on the primary")
    length = self.read_uint_by_size(size)
    return mysqljson.to_text(self.read(length))  # zero bytes: JSON null, as MySQL reads it


# --- MySQL 9's VECTOR ----------------------------------------------------------------

VECTOR = 242  # MySQL 9 enum_field_types MYSQL_TYPE_VECTOR


class VectorLength(int):
    """A VECTOR column's length size: read as the JSON column's path reads, but kept binary."""


_parse_column_definition = Column._Column__parse_column_definition


def _column_definition(self, column_type, packet):
    _parse_column_definition(self, column_type, packet)
    if column_type == VECTOR:
        self.length_size = packet.read_uint8()


_KNOWN_METADATA = frozenset(m.value for m in MetadataFieldType)
_read_optional_metadata = TableMapEvent._get_optional_meta_data


def _known_optional_metadata(self):
    """The table map's optional metadata (type, length-coded length, value fields up to
    the checksum) with the fields of types the library does not know taken out, read."""
    raw = self.packet.packet
    data, at = raw._data, raw._position
    end, p, kept = len(data) - BINLOG.BINLOG_CHECKSUM_LEN, raw._position, bytearray()
    while p < end:
        first = data[p + 1]
        size = 1 if first < 251 else 1 + {252: 2, 253: 3, 254: 8}[first]
        length = first if first < 251 else int.from_bytes(data[p + 2:p + 1 + size], "little")
        field_end = p + 1 + size + length
        if data[p] in _KNOWN_METADATA:
            kept += data[p:field_end]
        p = field_end
    raw._data = data[:at] + bytes(kept) + data[end:]
    return _read_optional_metadata(self)


_library_is_character_column = TableMapEvent._is_character_column


def _is_character_column(column_type, dbms="mysql"):
    """MySQL lists a VECTOR column's (binary) character set with the text columns'."""
    return column_type == VECTOR or _library_is_character_column(column_type, dbms=dbms)


def _readable_vectors(columns) -> None:
    """VECTOR columns (after the table map's character-set bookkeeping, which must not
    count them) read through the JSON column's path as binary values."""
    for column in columns:
        if column.type == VECTOR:
            column.type, column.length_size = FIELD_TYPE.JSON, VectorLength(column.length_size)


# --- character sets ----------------------------------------------------------------

_BIG_ENDIAN_CHARSETS = {"utf16": "utf-16-be", "utf32": "utf-32-be", "ucs2": "utf-16-be", "utf16le": "utf-16-le"}
_library_charset_to_encoding = RowsEvent.charset_to_encoding


def charset_to_encoding(name):
    return _BIG_ENDIAN_CHARSETS.get(name) or _library_charset_to_encoding(name)


# MariaDB 11 (strings/ctype-uca.h): a uca1400 collation id is 2048 + (character set << 8)
# + tailoring and flags, the character sets numbered in this order.
_UCA1400_FIRST_ID = 2048
_UCA1400_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")
_library_find_charset = row_event.find_charset


def mariadb_uca1400_charset(collation_id: int) -> str | None:
    """The character set of a MariaDB 11 uca1400 collation id; None for any other id."""
    index = (collation_id - _UCA1400_FIRST_ID) >> 8
    return _UCA1400_CHARSETS[index] if collation_id >= _UCA1400_FIRST_ID and index < len(_UCA1400_CHARSETS) else None


def _find_charset(charset_id, dbms="mysql"):
    """The library's (encoding name, collation, character set) of a column's collation id."""
    charset = mariadb_uca1400_charset(int(charset_id))
    if charset is not None:
        return charset, None, charset
    return _library_find_charset(charset_id, dbms)


# --- TableMap events parsed once -----------------------------------------------------

TABLE_MAP_CACHE: dict[bytes, TableMapEvent] = {}
_TABLE_MAP_CACHE_MAX = 4096
_parse_table_map = TableMapEvent.__init__


def _cached_table_map_init(self, from_packet, event_size, table_map, ctl_connection, **kwargs):
    raw = from_packet.packet  # the pymysql packet, positioned after the event header
    key = bytes(raw._data[raw._position:raw._position + event_size])
    hit = TABLE_MAP_CACHE.get(key)
    if hit is None:
        _parse_table_map(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        _readable_vectors(getattr(self, "columns", ()))
        if self._processed:
            if len(TABLE_MAP_CACHE) >= _TABLE_MAP_CACHE_MAX:
                TABLE_MAP_CACHE.clear()
            TABLE_MAP_CACHE[key] = self
        return
    self.__dict__.update(hit.__dict__)
    self.packet, self.table_map, self.timestamp = from_packet, table_map, from_packet.timestamp
    self._ctl_connection = ctl_connection
    table_map[self.table_id] = self.table_obj


class _DumpGtidSet:
    """What the library's MySQL dump request reads of its start position (the
    ``binlogstream.GtidSet`` it makes of the text): the encoded set and its length."""

    def __init__(self, text: str) -> None:
        self._encoded = mysqlgtid.encode_gtid_set([(key, list(ivs)) for key, ivs in GtidSet.parse(text).mysql])

    @property
    def encoded_length(self) -> int:
        return len(self._encoded)

    def encoded(self) -> bytes:
        return self._encoded


def _install() -> None:
    binlogstream.GtidSet = _DumpGtidSet
    TableMapEvent.__init__ = _cached_table_map_init
    row_event.find_charset = _find_charset
    RowsEvent.charset_to_encoding = staticmethod(charset_to_encoding)
    RowsEvent._RowsEvent__read_date = _read_date
    RowsEvent._RowsEvent__read_time2 = _read_time2
    RowsEvent._RowsEvent__read_datetime = _read_datetime
    RowsEvent._RowsEvent__read_datetime2 = _read_datetime2
    BinLogPacketWrapper.read_binary_json = _read_binary_json
    Column._Column__parse_column_definition = _column_definition
    TableMapEvent._get_optional_meta_data = _known_optional_metadata
    TableMapEvent._is_character_column = staticmethod(_is_character_column)


_install()
