"""MySQL's binary JSON (a JSON column's value in a row event) as the text MySQL prints (pure).

A MySQL primary logs a JSON column in its binary form (sql/json_binary.h: a type byte,
then objects and arrays as counts, sizes and offset tables, scalars inline or at an
offset, keys sorted by length then bytes). The replica side of another flavor, or the
sql apply mode, needs the value as JSON text; MariaDB keeps JSON as text, so the text
must be exactly what MySQL prints for it (``SELECT doc``), or a row-by-row comparison of
both servers differs: ``{"a": 1, "b": [2, 3]}`` (``", "`` and ``": "``), keys in
stored order, strings with MySQL's escapes, doubles as ``my_gcvt`` writes them (``.0``
kept on integral values, exponents without ``+``), and the opaque scalars: a DECIMAL
as its digits, a DATE/TIME/DATETIME/TIMESTAMP as a quoted string with six fractional
digits, anything else as ``"base64:typeN:..."`` in lines of 76 (json_dom.cc,
``Json_wrapper::to_string``).

Malformed input raises ``RemoteProtocolError``.
"""

from __future__ import annotations

import base64
import math
import struct
from decimal import Decimal

from bridge.errors import RemoteProtocolError
from bridge.wire.binlog import decimal_text

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY, LITERAL = 0x0, 0x1, 0x2, 0x3, 0x4
INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = 0x5, 0x6, 0x7, 0x8, 0x9, 0xA, 0xB, 0xC, 0xF
_LITERALS = {0: "null", 1: "true", 2: "false"}
_SCALARS = {INT16: "<h", UINT16: "<H", INT32: "<i", UINT32: "<I", INT64: "<q", UINT64: "<Q"}
# MySQL field types an opaque value may carry (mysql_com.h enum_field_types)
_DECIMAL, _DATE, _TIME, _DATETIME, _TIMESTAMP, _NEWDATE = 246, 10, 11, 12, 7, 14
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def to_text(data: bytes) -> str:
    """The JSON text MySQL prints for the binary value ``data`` (its first byte the type).
    An empty value is JSON null (what MySQL logs for it)."""
    if not data:
        return "null"
    try:
        return _value(data[0], memoryview(data)[1:])
    except (IndexError, KeyError, struct.error, ValueError) as exc:
        raise RemoteProtocolError(f"mysql json: malformed binary value of {len(data)} bytes ({exc})") from exc


def _value(kind: int, data: memoryview) -> str:
    if kind in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
        return _container(data, kind in (SMALL_OBJECT, SMALL_ARRAY), kind in (SMALL_OBJECT, LARGE_OBJECT))
    if kind == LITERAL:
        return _LITERALS[data[0]]
    if kind in _SCALARS:
        return str(struct.unpack_from(_SCALARS[kind], data)[0])
    if kind == DOUBLE:
        return double_text(struct.unpack_from("<d", data)[0])
    if kind == STRING:
        length, at = _varlen(data)
        return quote(_take(data, at, length).decode("utf-8"))
    if kind == OPAQUE:
        return _opaque(data[0], data[1:])
    raise ValueError(f"unknown type {kind:#x}")


def _container(data: memoryview, small: bool, is_object: bool) -> str:
    offset, unpack = (2, "<H") if small else (4, "<I")
    count, size = struct.unpack_from(unpack + unpack[1], data)
    if size > len(data):
        raise ValueError(f"container of {size} bytes in {len(data)}")
    key_entry, value_entry = 2 + offset, 1 + offset
    keys_at = 2 * offset
    values_at = keys_at + (count * key_entry if is_object else 0)
    items = []
    for i in range(count):
        entry = values_at + i * value_entry
        kind = data[entry]
        if kind in (LITERAL, INT16, UINT16) or (not small and kind in (INT32, UINT32)):  # stored in the entry
            value = _value(kind, data[entry + 1:entry + value_entry])
        else:
            value = _value(kind, data[struct.unpack_from(unpack, data, entry + 1)[0]:])
        if is_object:
            key_offset, = struct.unpack_from(unpack, data, keys_at + i * key_entry)
            key_length, = struct.unpack_from("<H", data, keys_at + i * key_entry + offset)
            items.append(f"{quote(bytes(data[key_offset:key_offset + key_length]).decode('utf-8'))}: {value}")
        else:
            items.append(value)
    return ("{%s}" if is_object else "[%s]") % ", ".join(items)


def _varlen(data: memoryview) -> tuple[int, int]:
    """A length in 7-bit groups, low first (high bit: more follow); (length, bytes it took)."""
    length = 0
    for i in range(5):
        length |= (data[i] & 0x7F) << (7 * i)
        if not data[i] & 0x80:
            return length, i + 1
    raise ValueError("variable length longer than 5 bytes")


def _take(data: memoryview, at: int, length: int) -> bytes:
    if at + length > len(data):
        raise ValueError(f"{length} bytes at {at} of {len(data)}")
    return bytes(data[at:at + length])


def quote(text: str) -> str:
    """A JSON string as MySQL prints it: its own escapes, other control characters as
    ``\\u00xx``, everything else (non-ASCII too) as it is."""
    out = ['"']
    for ch in text:
        escaped = _ESCAPES.get(ch)
        out.append(escaped if escaped is not None else f"\\u{ord(ch):04x}" if ord(ch) < 0x20 else ch)
    out.append('"')
    return "".join(out)


def double_text(value: float) -> str:
    """A double as MySQL's JSON prints it (``my_gcvt``, measured on MySQL 9.7): the
    shortest digits that read back the same, in fixed notation unless the point would
    sit more than 14 zeros before them or an integral value needs more than 15 digits
    (then ``1.5e16``, ``1e-16``: no ``+``, no leading zeros), ``.0`` on integral values."""
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"non-finite double {value}")
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    _, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + exponent  # the decimal point sits this many digits from the first one
    if point <= 0 and point >= -14:
        return f"{sign}0.{'0' * -point}{text}"
    if 0 < point < len(text):
        return f"{sign}{text[:point]}.{text[point:]}"
    if len(text) <= point <= 15:
        return f"{sign}{text}{'0' * (point - len(text))}.0"
    return f"{sign}{text[0]}{'.' + text[1:] if len(text) > 1 else ''}e{point - 1}"


def _opaque(field_type: int, data: memoryview) -> str:
    length, at = _varlen(data)
    raw = _take(data, at, length)
    if field_type == _DECIMAL:
        return _decimal(raw)
    if field_type in (_DATE, _NEWDATE, _TIME, _DATETIME, _TIMESTAMP):
        packed, = struct.unpack("<q", raw[:8])
        return '"' + (_time(packed) if field_type == _TIME else _datetime(packed, field_type in (_DATE, _NEWDATE))) \
            + '"'
    encoded = base64.b64encode(raw).decode()  # in lines of 76, as MySQL's base64_encode writes it
    return quote(f"base64:type{field_type}:" + "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76)))


def _decimal(raw: bytes) -> str:
    """Precision, scale, then the DECIMAL's binary form (bridge.wire.binlog reads it)."""
    precision, scale = raw[0], raw[1]
    return decimal_text(raw[2:], precision, scale)


def _time(packed: int) -> str:
    """MySQL's packed TIME (my_time.cc, TIME_to_longlong_time_packed)."""
    sign = "-" if packed < 0 else ""
    packed = abs(packed)
    hms, micro = packed >> 24, packed % (1 << 24)
    return f"{sign}{hms >> 12:02d}:{(hms >> 6) & 0x3F:02d}:{hms & 0x3F:02d}.{micro:06d}"


def _datetime(packed: int, date_only: bool) -> str:
    """MySQL's packed DATETIME (TIME_to_longlong_datetime_packed): ymd << 17 | hms, << 24 | µs."""
    packed = abs(packed)
    micro, ymdhms = packed % (1 << 24), packed >> 24
    ymd, hms = ymdhms >> 17, ymdhms % (1 << 17)
    year_month, day = ymd >> 5, ymd & 0x1F
    year, month = divmod(year_month, 13)
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if date_only:
        return date
    return f"{date} {hms >> 12:02d}:{(hms >> 6) & 0x3F:02d}:{hms & 0x3F:02d}.{micro:06d}"
