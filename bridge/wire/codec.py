"""Payload codec for transactions (pure).

A closed set of tagged value types, each carried bit for bit: None, int (signed and
unsigned 64-bit), float (IEEE double), Decimal (exact text), str (utf-8), bytes,
date, datetime (microseconds), timedelta (microseconds), set of str, InvalidTemporal
(zero dates as text), BitValue, and tuples of those. Anything else is refused when
encoding (LocalProtocolError); any malformed input is refused when decoding
(RemoteProtocolError), never a crash.
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal, InvalidOperation

from bridge.errors import LocalProtocolError, RemoteProtocolError
from bridge.model import BitValue, Chunk, InvalidTemporal, RowChange, Statement, Transaction

_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_DATE = struct.Struct("<HBB")
_DATETIME = struct.Struct("<HBBBBBI")
_BIT = struct.Struct("<QH")
MAX_DEPTH = 8


def encode_value(value, out: bytearray, depth: int = 0) -> None:
    t = type(value)
    if value is None:
        out += b"N"
    elif t is int or t is bool:
        _encode_int(int(value), out)
    elif t is str:
        _encode_blob(b"s", value.encode("utf-8", "surrogatepass"), out)
    elif t is bytes or t is bytearray:
        _encode_blob(b"b", bytes(value), out)
    elif t is float:
        out += b"f" + _F64.pack(value)
    elif t is Decimal:
        _encode_blob(b"D", str(value).encode(), out)
    elif t is dt.datetime:
        out += b"t" + _DATETIME.pack(value.year, value.month, value.day, value.hour,
                                     value.minute, value.second, value.microsecond)
    elif t is dt.date:
        out += b"d" + _DATE.pack(value.year, value.month, value.day)
    elif t is dt.timedelta:
        micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
        out += b"T" + _I64.pack(micros)
    elif t is InvalidTemporal:
        _encode_blob(b"Z", value.text.encode(), out)
    elif t is BitValue:
        out += b"B" + _BIT.pack(value.value, value.width)
    elif t is tuple or t is list or t is set or t is frozenset:
        _encode_sequence(value, out, depth)
    else:
        raise LocalProtocolError(f"encode value: type {t.__name__} is not in the wire's closed set")


def _encode_int(v: int, out: bytearray) -> None:
    if -(1 << 63) <= v < (1 << 63):
        out += b"i" + _I64.pack(v)
    elif 0 <= v < (1 << 64):
        out += b"u" + _U64.pack(v)
    else:
        raise LocalProtocolError(f"encode value: integer {v} does not fit 64 bits")


def _encode_blob(tag: bytes, data: bytes, out: bytearray) -> None:
    out += tag + _U32.pack(len(data)) + data


def _encode_sequence(value, out: bytearray, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise LocalProtocolError("encode value: nesting deeper than %d" % MAX_DEPTH)
    is_set = isinstance(value, (set, frozenset))
    items = sorted(value) if is_set else value
    out += (b"S" if is_set else b"l") + _U32.pack(len(items))
    for item in items:
        if is_set and type(item) is not str:
            raise LocalProtocolError("encode value: a SET holds only str members")
        encode_value(item, out, depth + 1)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise RemoteProtocolError(f"decode payload: truncated at byte {self.pos} (need {n})")
        chunk = self.buf[self.pos:end]
        self.pos = end
        return chunk

    def unpack(self, st: struct.Struct) -> tuple:
        return st.unpack(self.take(st.size))

    def blob(self) -> bytes:
        return bytes(self.take(self.unpack(_U32)[0]))


def decode_value(r: _Reader, depth: int = 0):
    tag = bytes(r.take(1))
    try:
        return _DECODERS[tag](r, depth)
    except KeyError:
        raise RemoteProtocolError(f"decode payload: unknown value tag {tag!r} at byte {r.pos - 1}") from None
    except (ValueError, UnicodeDecodeError, InvalidOperation, OverflowError) as exc:
        raise RemoteProtocolError(f"decode payload: bad {tag!r} value at byte {r.pos}: {exc}") from exc


def _decode_sequence(r: _Reader, depth: int, as_set: bool):
    if depth >= MAX_DEPTH:
        raise RemoteProtocolError("decode payload: nesting deeper than %d" % MAX_DEPTH)
    (count,) = r.unpack(_U32)
    if count > len(r.buf) - r.pos:
        raise RemoteProtocolError(f"decode payload: sequence of {count} items in {len(r.buf) - r.pos} bytes")
    items = [decode_value(r, depth + 1) for _ in range(count)]
    if as_set:
        if not all(type(i) is str for i in items):
            raise RemoteProtocolError("decode payload: a SET holds only str members")
        return frozenset(items)
    return tuple(items)


def _decimal(r: _Reader, _d: int) -> Decimal:
    value = Decimal(r.blob().decode("ascii"))
    if not value.is_finite():
        raise ValueError("decimal is not finite")
    return value


_DECODERS = {
    b"N": lambda r, d: None,
    b"i": lambda r, d: r.unpack(_I64)[0],
    b"u": lambda r, d: r.unpack(_U64)[0],
    b"f": lambda r, d: r.unpack(_F64)[0],
    b"s": lambda r, d: r.blob().decode("utf-8", "surrogatepass"),
    b"b": lambda r, d: r.blob(),
    b"D": _decimal,
    b"d": lambda r, d: dt.date(*r.unpack(_DATE)),
    b"t": lambda r, d: dt.datetime(*r.unpack(_DATETIME)),
    b"T": lambda r, d: dt.timedelta(microseconds=r.unpack(_I64)[0]),
    b"Z": lambda r, d: InvalidTemporal(r.blob().decode("ascii")),
    b"B": lambda r, d: BitValue(*r.unpack(_BIT)),
    b"l": lambda r, d: _decode_sequence(r, d, as_set=False),
    b"S": lambda r, d: _decode_sequence(r, d, as_set=True),
}


def encode_transaction(txn: Transaction) -> bytes:
    out = bytearray()
    encode_value((txn.gtid, tuple(_change_tuple(c) for c in txn.changes)), out)
    return bytes(out)


def _change_tuple(c) -> tuple:
    if isinstance(c, Statement):
        return ("q", c.schema, c.sql)
    return ("r", c.kind, c.schema, c.table, c.columns, c.key, c.before, c.after)


def encode_chunk(chunk: Chunk) -> bytes:
    out = bytearray()
    encode_value((chunk.gtid, chunk.index, int(chunk.last), tuple(_change_tuple(c) for c in chunk.changes)), out)
    return bytes(out)


def decode_transaction(payload) -> Transaction:
    try:
        gtid, changes = _decode_whole(payload, "transaction")
        return Transaction(gtid=_text(gtid), changes=tuple(_change_from(c) for c in changes))
    except (TypeError, ValueError) as exc:
        raise RemoteProtocolError(f"decode transaction: malformed structure: {exc}") from exc


def decode_chunk(payload) -> Chunk:
    try:
        gtid, index, last, changes = _decode_whole(payload, "chunk")
        if type(index) is not int or index < 0 or last not in (0, 1):
            raise ValueError(f"bad chunk index {index!r} or last flag {last!r}")
        return Chunk(_text(gtid), index, bool(last), tuple(_change_from(c) for c in changes))
    except (TypeError, ValueError) as exc:
        raise RemoteProtocolError(f"decode chunk: malformed structure: {exc}") from exc


def _decode_whole(payload, what: str):
    r = _Reader(payload)
    value = decode_value(r)
    if r.pos != len(r.buf):
        raise RemoteProtocolError(f"decode {what}: {len(r.buf) - r.pos} trailing bytes")
    return value


_KINDS = ("insert", "update", "delete")


def _change_from(c: tuple):
    if type(c) is not tuple or not c:
        raise ValueError(f"a change must be a non-empty tuple, got {type(c).__name__}")
    if c[0] == "q" and len(c) == 3:
        return Statement(schema=_text(c[1]), sql=_text(c[2]))
    if c[0] == "r" and len(c) == 8 and c[1] in _KINDS:
        _, kind, schema, table, columns, key, before, after = c
        names = tuple(_text(n) for n in columns)
        for image in (before, after):
            if image is not None and (type(image) is not tuple or len(image) != len(names)):
                raise ValueError(f"row image does not match {len(names)} columns")
        return RowChange(kind, _text(schema), _text(table), names, tuple(_text(k) for k in key), before, after)
    raise ValueError(f"unknown change {c[:2]!r}")


def _text(v) -> str:
    if type(v) is not str:
        raise TypeError(f"expected text, got {type(v).__name__}")
    return v
