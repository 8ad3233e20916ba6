"""Row images decoded straight from the event bytes, for tables whose columns are
all of the common types. Decode is the bridge's bottleneck (the library's generic
reader goes through a wrapper call per value and an if-chain per column); here each
table gets one list of small readers, built once per table map, that produce the
exact values ``libraryvalues.image`` would (BINARY padding, zero dates as
``InvalidTemporal``, TIMESTAMP zero, big-endian UTF-16/32). A table with any other
column type (BIT, SET, JSON, GEOMETRY, old temporal types, ...), a MINIMAL row image
or a partial JSON update returns ``None`` and the library decodes it.
The equivalence is tested value by value against the library path
(tests/integration/test_types.py).
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

from pymysqlreplication.constants import FIELD_TYPE

from bridge.model import InvalidTemporal

_FLOAT, _DOUBLE = struct.Struct("<f"), struct.Struct("<d")
_EPOCH = dt.datetime(1970, 1, 1)
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def compile_table(columns, encoding_of) -> tuple | None:
    """Per-column readers ``(data, pos) -> (value, pos)`` for a table, or None when a
    column type is not covered. ``encoding_of(charset_name)`` maps a MySQL charset."""
    readers = []
    for column in columns:
        reader = _reader(column, encoding_of)
        if reader is None:
            return None
        readers.append(reader)
    return tuple(readers)


def decode_images(readers: tuple, data: bytes, images_per_row: int) -> list[tuple]:
    """All rows of an event body: each row is ``images_per_row`` images (1, or 2 for
    UPDATE: before then after), each a null bitmap then the non-NULL values."""
    n = len(readers)
    null_bytes = (n + 7) // 8
    pos, end, rows = 0, len(data), []
    while pos < end:
        images = []
        for _ in range(images_per_row):
            nulls = int.from_bytes(data[pos:pos + null_bytes], "little")
            pos += null_bytes
            values = []
            append = values.append
            for i, read in enumerate(readers):
                if nulls >> i & 1:
                    append(None)
                else:
                    v, pos = read(data, pos)
                    append(v)
            images.append(tuple(values))
        rows.append(images)
    if pos != end:
        raise ValueError(f"row image decode overran the event by {pos - end} bytes")
    return rows


def _int(size: int, signed: bool):
    def read(d, p):
        return int.from_bytes(d[p:p + size], "little", signed=signed), p + size
    return read


def _text(length_bytes: int, column, encoding_of, pad_to: int = 0):
    name = column.character_set_name
    encoding = encoding_of(name) if name is not None else "utf-8"
    try:
        "".encode(encoding)
    except LookupError:
        encoding = None  # the library keeps bytes it cannot decode (binary and unknown charsets)

    def read(d, p):
        length = int.from_bytes(d[p:p + length_bytes], "little")
        p += length_bytes
        raw = d[p:p + length]
        if encoding is None:
            return (raw.ljust(pad_to, b"\0") if pad_to else raw), p + length
        return raw.decode(encoding), p + length
    return read


def temporal(year: int, month: int, day: int, time: tuple | None = None, micro: int = 0, fsp: int = 0):
    try:
        if time is None:
            return dt.date(year, month, day)
        return dt.datetime(year, month, day, *time, micro)
    except ValueError:
        text = f"{year:04d}-{month:02d}-{day:02d}"
        if time is not None:
            text += " %02d:%02d:%02d" % time
            if fsp:
                text += "." + f"{micro:06d}"[:fsp]
        return InvalidTemporal(text)


def _fsp_reader(fsp: int):
    size = (fsp + 1) // 2

    def micro(d, p):
        if not size:
            return 0, p
        v = int.from_bytes(d[p:p + size], "big", signed=True)
        if fsp % 2:
            v //= 10
        return v * 10 ** (6 - fsp), p + size
    return micro


def read_date(d, p):
    v = int.from_bytes(d[p:p + 3], "little")
    return temporal((v >> 9) & 0x7FFF, (v >> 5) & 0xF, v & 0x1F), p + 3


def datetime2_reader(fsp: int):
    """DATETIME2: 1 sign bit, 17 bits year*13+month, 5 day, 5 hour, 6 minute, 6 second
    (MySQL internals, 'date and time data type representation'), then fsp bytes."""
    micro = _fsp_reader(fsp)

    def read(d, p):
        data = int.from_bytes(d[p:p + 5], "big")
        us, p = micro(d, p + 5)
        year_month = (data >> 22) & 0x1FFFF
        time = ((data >> 12) & 0x1F, (data >> 6) & 0x3F, data & 0x3F)
        return temporal(year_month // 13, year_month % 13, (data >> 17) & 0x1F, time, us, fsp), p
    return read


def _timestamp2(column):
    micro = _fsp_reader(column.fsp or 0)

    def read(d, p):
        seconds = int.from_bytes(d[p:p + 4], "big", signed=True)
        us, p = micro(d, p + 4)
        if seconds == 0 and us == 0:
            return InvalidTemporal("0000-00-00 00:00:00"), p
        value = _EPOCH + dt.timedelta(seconds=seconds)
        return (value.replace(microsecond=us) if us > 0 else value), p
    return read


def time2_reader(fsp: int):
    """TIME2 as MySQL's my_time_packed_from_binary (sql-common/my_time.c): the integer
    part is offset by 0x800000 and, when negative, borrows from the fraction."""
    frac_bytes = (fsp + 1) // 2

    def read(d, p):
        raw = int.from_bytes(d[p:p + 3 + frac_bytes], "big")
        p += 3 + frac_bytes
        if frac_bytes == 3:
            packed = raw - 0x800000000000
        else:
            intpart = (raw >> (8 * frac_bytes)) - 0x800000
            frac = raw & ((1 << (8 * frac_bytes)) - 1)
            if intpart < 0 and frac:
                intpart += 1
                frac -= 1 << (8 * frac_bytes)
            packed = (intpart << 24) + frac * (10000, 100)[frac_bytes - 1] if frac_bytes else intpart << 24
        sign, packed = (-1, -packed) if packed < 0 else (1, packed)
        hms, us = packed >> 24, packed & 0xFFFFFF
        return sign * dt.timedelta(hours=(hms >> 12) & 0x3FF, minutes=(hms >> 6) & 0x3F, seconds=hms & 0x3F,
                                   microseconds=us), p
    return read


def _decimal(column):
    """MySQL's packed DECIMAL (as the library reads it, without its byte pushback)."""
    integral, decimals = column.precision - column.decimals, column.decimals
    uncomp_int, comp_int = divmod(integral, 9)
    uncomp_frac, comp_frac = divmod(decimals, 9)
    int_size, frac_size = _DECIMAL_BYTES[comp_int], _DECIMAL_BYTES[comp_frac]
    total = int_size + 4 * uncomp_int + 4 * uncomp_frac + frac_size

    def read(d, p):
        raw = bytearray(d[p:p + total])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        mask = -1 if negative else 0
        parts, q = ["-" if negative else ""], 0
        if int_size:
            parts.append(str(int.from_bytes(raw[q:q + int_size], "big", signed=True) ^ mask))
            q += int_size
        for _ in range(uncomp_int):
            parts.append(f"{int.from_bytes(raw[q:q + 4], 'big', signed=True) ^ mask:09d}")
            q += 4
        parts.append(".")
        for _ in range(uncomp_frac):
            parts.append(f"{int.from_bytes(raw[q:q + 4], 'big', signed=True) ^ mask:09d}")
            q += 4
        if frac_size:
            parts.append(f"{int.from_bytes(raw[q:q + frac_size], 'big', signed=True) ^ mask:0{comp_frac}d}")
        return Decimal("".join(parts)), p + total
    return read


def _enum(column):
    size, values = column.size, column.enum_values

    def read(d, p):
        index = int.from_bytes(d[p:p + size], "little")
        return (values[index] if values else None), p + size
    return read


def _reader(column, encoding_of):
    t, unsigned = column.type, bool(getattr(column, "unsigned", False))
    if t == FIELD_TYPE.TINY:
        return _int(1, not unsigned)
    if t == FIELD_TYPE.SHORT:
        return _int(2, not unsigned)
    if t == FIELD_TYPE.INT24:
        return _int(3, not unsigned)
    if t == FIELD_TYPE.LONG:
        return _int(4, not unsigned)
    if t == FIELD_TYPE.LONGLONG:
        return _int(8, not unsigned)
    if t == FIELD_TYPE.FLOAT:
        return lambda d, p: (_FLOAT.unpack_from(d, p)[0], p + 4)
    if t == FIELD_TYPE.DOUBLE:
        return lambda d, p: (_DOUBLE.unpack_from(d, p)[0], p + 8)
    if t == FIELD_TYPE.YEAR:
        return lambda d, p: (d[p] + 1900 if d[p] else 0, p + 1)
    if t == FIELD_TYPE.VARCHAR:
        return _text(2 if column.max_length > 255 else 1, column, encoding_of)
    if t == FIELD_TYPE.STRING:
        binary = column.character_set_name in (None, "binary")
        return _text(2 if column.max_length > 255 else 1, column, encoding_of,
                     pad_to=column.max_length if binary else 0)
    if t == FIELD_TYPE.BLOB:
        return _text(column.length_size, column, encoding_of)
    if t == FIELD_TYPE.NEWDECIMAL:
        return _decimal(column)
    if t == FIELD_TYPE.DATE:
        return read_date
    if t == FIELD_TYPE.DATETIME2:
        return datetime2_reader(column.fsp or 0)
    if t == FIELD_TYPE.TIMESTAMP2:
        return _timestamp2(column)
    if t == FIELD_TYPE.TIME2:
        return time2_reader(column.fsp or 0)
    if t == FIELD_TYPE.ENUM:
        return _enum(column)
    return None
