"""The library's decoded row values made exact, for the tables ``rowimage`` leaves to it
(sql apply mode): BIT as ``BitValue``, SET as a frozenset (an empty one included), YEAR
0000, a zero TIMESTAMP as ``InvalidTemporal``, BINARY(n) padded back to n, an empty
binary value as b''. ``rowimage`` produces the same values straight from the bytes."""

from __future__ import annotations

import datetime as dt

from pymysqlreplication.constants import FIELD_TYPE

from bridge.model import BitValue, InvalidTemporal

_EPOCH = dt.datetime(1970, 1, 1)


def image(values: dict, none_sources: dict, columns: tuple, convert: tuple) -> tuple:
    out = []
    for name, conv in zip(columns, convert):
        v = values[name]
        if v is None:
            out.append(frozenset() if none_sources.get(name) == "empty set" else None)
        else:
            out.append(conv(v) if conv else v)
    return tuple(out)


def converter(column):
    t = column.type
    if t == FIELD_TYPE.BIT:
        return lambda v, w=column.bits: BitValue(int(v, 2) if v else 0, w)
    if t == FIELD_TYPE.SET:
        return frozenset
    if t == FIELD_TYPE.YEAR:  # the library reads YEAR 0000 as 1900, which YEAR cannot hold
        return lambda v: 0 if v == 1900 else v
    if t in (FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2):
        return timestamp
    if t == FIELD_TYPE.STRING and getattr(column, "character_set_name", None) in (None, "binary"):
        width = column.max_length
        binary = column.character_set_name == "binary"  # the library decodes an empty binary value to ''
        return lambda v, n=width: v.ljust(n, b"\0") if isinstance(v, bytes) else \
            b"".ljust(n, b"\0") if binary and v == "" else v
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB) and getattr(column, "character_set_name", None) == "binary":
        return lambda v: b"" if v == "" else v  # the library decodes an empty binary value to ''
    return None


def timestamp(v):
    if isinstance(v, dt.datetime) and v.replace(microsecond=0) == _EPOCH and not v.microsecond:
        return InvalidTemporal("0000-00-00 00:00:00")
    return v
