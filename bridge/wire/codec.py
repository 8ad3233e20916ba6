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
from bridge.model import BitValue, Chunk, InvalidTemporal, RowChange, RowEvents, Statement, Transaction, Verbatim
from bridge.wire.hotpath import COMPACT_TAG, PAYLOAD_HEAD, VERBATIM_TAG
from bridge.wire.native import hot

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
        _encode_blob(b"b", value, out)
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


def _encode_blob(tag: bytes, data, out: bytearray) -> None:
    out += tag
    out += _U32.pack(len(data))
    out += data  # no temporary: a blob may be a megabyte of row events


def _encode_sequence(value, out: bytearray, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise LocalProtocolError("encode value: nesting deeper than %d" % MAX_DEPTH)
    is_set = isinstance(value, (set, frozenset))
    items = sorted(value) if is_set else value
    out += (b"S" if is_set else b"l") + _U32.pack(len(items))
    for item in items:
        t = type(item)
        if is_set and t is not str:
            raise LocalProtocolError("encode value: a SET holds only str members")
        # the common scalars inline (the primary's hot path); the rest by encode_value
        if t is str:
            data = item.encode("utf-8", "surrogatepass")
            out += b"s" + _U32.pack(len(data)) + data
        elif t is int and -(1 << 63) <= item < (1 << 63):
            out += b"i" + _I64.pack(item)
        elif item is None:
            out += b"N"
        else:
            encode_value(item, out, depth + 1)


_TAG_I, _TAG_S, _TAG_L, _TAG_N, _TAG_B, _TAG_U, _TAG_F = b"i"[0], b"s"[0], b"l"[0], b"N"[0], b"b"[0], b"u"[0], b"f"[0]


def _decode(buf: bytes, pos: int, depth: int):
    """(value, next position). One call per value, the common tags first: decode is
    on the replica's hot path. Every read is bounds-checked; the callers turn
    IndexError/struct.error into RemoteProtocolError."""
    tag = buf[pos]
    pos += 1
    if tag == _TAG_I:
        return _I64.unpack_from(buf, pos)[0], pos + 8
    if tag == _TAG_S or tag == _TAG_B:
        n = _U32.unpack_from(buf, pos)[0]
        start, pos = pos + 4, pos + 4 + n
        if pos > len(buf):
            raise RemoteProtocolError(f"decode payload: truncated at byte {start} (need {n})")
        return (buf[start:pos].decode("utf-8", "surrogatepass") if tag == _TAG_S else buf[start:pos]), pos
    if tag == _TAG_L or tag == _TAG_SET:
        if depth >= MAX_DEPTH:
            raise RemoteProtocolError("decode payload: nesting deeper than %d" % MAX_DEPTH)
        count = _U32.unpack_from(buf, pos)[0]
        pos += 4
        if count > len(buf) - pos:
            raise RemoteProtocolError(f"decode payload: sequence of {count} items in {len(buf) - pos} bytes")
        items = []
        append = items.append
        for _ in range(count):
            t = buf[pos]
            if t == _TAG_I:  # the common scalars inline; the rest by a call
                append(_I64.unpack_from(buf, pos + 1)[0])
                pos += 9
            elif t == _TAG_N:
                append(None)
                pos += 1
            elif t == _TAG_S:
                n = _U32.unpack_from(buf, pos + 1)[0]
                start, pos = pos + 5, pos + 5 + n
                if pos > len(buf):
                    raise RemoteProtocolError(f"decode payload: truncated at byte {start} (need {n})")
                append(buf[start:pos].decode("utf-8", "surrogatepass"))
            else:
                item, pos = _decode(buf, pos, depth + 1)
                append(item)
        if tag == _TAG_L:
            return tuple(items), pos
        if not all(type(i) is str for i in items):
            raise RemoteProtocolError("decode payload: a SET holds only str members")
        return frozenset(items), pos
    if tag == _TAG_N:
        return None, pos
    if tag == _TAG_U:
        return _U64.unpack_from(buf, pos)[0], pos + 8
    if tag == _TAG_F:
        return _F64.unpack_from(buf, pos)[0], pos + 8
    fixed = _FIXED.get(tag)
    if fixed is not None:
        st, make = fixed
        return make(*st.unpack_from(buf, pos)), pos + st.size
    text = _TEXT.get(tag)
    if text is not None:
        n = _U32.unpack_from(buf, pos)[0]
        start, pos = pos + 4, pos + 4 + n
        if pos > len(buf):
            raise RemoteProtocolError(f"decode payload: truncated at byte {start} (need {n})")
        return text(buf[start:pos].decode("ascii")), pos
    raise RemoteProtocolError(f"decode payload: unknown value tag {bytes([tag])!r} at byte {pos - 1}")


def _finite_decimal(text: str) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise ValueError("decimal is not finite")
    return value


_TAG_SET = b"S"[0]
_FIXED = {b"d"[0]: (_DATE, dt.date), b"t"[0]: (_DATETIME, dt.datetime),
          b"T"[0]: (_I64, lambda us: dt.timedelta(microseconds=us)), b"B"[0]: (_BIT, BitValue)}
_TEXT = {b"D"[0]: _finite_decimal, b"Z"[0]: InvalidTemporal}




def encode_transaction(txn: Transaction, stamps: tuple[int, int] = (0, 0)) -> bytearray:
    """``stamps``: (commit read, ship start) in wall-clock ns, for the replica's stage times.
    A transaction of raw row events only (the common case in binlog apply mode) takes
    the compact layout, one of events as the primary wrote them (relay apply mode) the
    verbatim one; anything else the tagged one."""
    if len(txn.changes) == 1 and len(txn.gtid) < 256:
        kind = type(txn.changes[0])
        if kind is RowEvents:
            return _encode_compact(txn, stamps)
        if kind is Verbatim and txn.gtid.isascii():
            file = txn.changes[0].file.encode("utf-8", "surrogatepass")
            if len(file) < 256:
                change = txn.changes[0]
                return hot.encode_verbatim(txn.gtid, stamps[0], stamps[1], txn.format_event, file, change.events,
                                           change.data)
    out = bytearray()
    tables, changes = _tables_and_changes(txn.changes)
    encode_value((txn.gtid, tables, changes, stamps, txn.format_event), out)
    return out


def _encode_compact(txn: Transaction, stamps: tuple[int, int]) -> bytearray:
    rows = txn.changes[0]
    try:
        return hot.encode_compact(txn.gtid, stamps[0], stamps[1], txn.format_event, rows.events, rows.tables,
                                  rows.data)
    except ValueError as exc:
        raise LocalProtocolError(f"encode transaction {txn.gtid}: {exc}") from exc


def _decode_verbatim(buf) -> Transaction:
    at = 2 + buf[1]
    gtid = bytes(buf[2:at]).decode()
    read_ns, ship_ns, fmt_len = PAYLOAD_HEAD.unpack_from(buf, at)
    at += PAYLOAD_HEAD.size
    fmt = bytes(buf[at:at + fmt_len])
    at += fmt_len
    n = buf[at]
    file = bytes(buf[at + 1:at + 1 + n])
    at += 1 + n
    events = _U32.unpack_from(buf, at)[0]
    if len(fmt) != fmt_len or len(file) != n or len(gtid) != buf[1]:
        raise ValueError("truncated")
    return Transaction(gtid, (Verbatim(file.decode("utf-8", "surrogatepass"), bytes(buf[at + 4:]), events),),
                       (read_ns, ship_ns), fmt)


def _decode_compact(buf) -> Transaction:
    gtid, read_ns, ship_ns, fmt, events, tables, data = hot.decode_compact(buf)
    return Transaction(gtid, (RowEvents(data, tables, events),), (read_ns, ship_ns), fmt)


def encode_chunk(chunk: Chunk) -> bytearray:
    out = bytearray()
    tables, changes = _tables_and_changes(chunk.changes)
    encode_value((chunk.gtid, chunk.index, int(chunk.last), tables, changes, chunk.format_event), out)
    return out


def _tables_and_changes(changes) -> tuple[tuple, tuple]:
    """Each table's names (schema, table, columns, key, row event flags) once per payload; a row change
    refers to them by index: ("r", kind, table index, before, after). A statement is
    ("q", schema, sql, raw event); raw row events are ("e", events, tables, count); a
    transaction's events verbatim (relay mode) ("v", binlog file, events, count)."""
    index: dict[tuple, int] = {}
    out = []
    for c in changes:
        if isinstance(c, RowEvents):
            out.append(("e", c.data, c.tables, c.events))
        elif isinstance(c, Statement):
            out.append(("q", c.schema, c.sql, c.raw))
        elif isinstance(c, Verbatim):
            out.append(("v", c.file, c.data, c.events))
        else:
            meta = (c.schema, c.table, c.columns, c.key, c.flags)
            i = index.setdefault(meta, len(index))
            out.append(("r", c.kind, i, c.before, c.after))
    return tuple(index), tuple(out)


def decode_transaction(payload) -> Transaction:
    if payload and payload[0] in (COMPACT_TAG, VERBATIM_TAG):
        try:
            return _decode_compact(payload) if payload[0] == COMPACT_TAG else _decode_verbatim(payload)
        except (IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
            raise RemoteProtocolError(f"decode transaction: malformed compact payload: {exc}") from exc
    try:
        gtid, tables, changes, stamps, fmt = _decode_whole(payload, "transaction")
        if type(stamps) is not tuple or len(stamps) != 2 or not all(type(t) is int for t in stamps):
            raise ValueError(f"bad stamps {stamps!r}")
        return Transaction(gtid=_text(gtid), changes=_changes_from(tables, changes), stamps=stamps,
                           format_event=_bytes(fmt))
    except (TypeError, ValueError) as exc:
        raise RemoteProtocolError(f"decode transaction: malformed structure: {exc}") from exc


def decode_chunk(payload) -> Chunk:
    try:
        gtid, index, last, tables, changes, fmt = _decode_whole(payload, "chunk")
        if type(index) is not int or index < 0 or last not in (0, 1):
            raise ValueError(f"bad chunk index {index!r} or last flag {last!r}")
        return Chunk(_text(gtid), index, bool(last), _changes_from(tables, changes), _bytes(fmt))
    except (TypeError, ValueError) as exc:
        raise RemoteProtocolError(f"decode chunk: malformed structure: {exc}") from exc


def _decode_whole(payload, what: str):
    buf = bytes(payload)
    try:
        value, pos = _decode(buf, 0, 0)
    except (IndexError, struct.error) as exc:
        raise RemoteProtocolError(f"decode {what}: truncated payload ({exc})") from None
    except (ValueError, UnicodeDecodeError, InvalidOperation, OverflowError) as exc:
        raise RemoteProtocolError(f"decode {what}: bad value: {exc}") from exc
    if pos != len(buf):
        raise RemoteProtocolError(f"decode {what}: {len(buf) - pos} trailing bytes")
    return value


_KINDS = ("insert", "update", "delete")


def _changes_from(tables, changes) -> tuple:
    metas = tuple(_table_from(t) for t in tables)
    if type(changes) is not tuple:
        raise TypeError(f"changes must be a tuple, got {type(changes).__name__}")
    return tuple(_change_from(c, metas) for c in changes)


def _table_from(t) -> tuple:
    if type(t) is not tuple or len(t) != 5 or type(t[4]) is not int:
        raise ValueError("a table entry must be (schema, table, columns, key, flags)")
    schema, table, columns, key, flags = t
    return _text(schema), _text(table), tuple(_text(n) for n in columns), tuple(_text(k) for k in key), flags


def _change_from(c, metas: tuple):
    if type(c) is not tuple or not c:
        raise ValueError(f"a change must be a non-empty tuple, got {type(c).__name__}")
    if c[0] == "r" and len(c) == 5 and c[1] in _KINDS:
        _, kind, i, before, after = c
        if type(i) is not int or not 0 <= i < len(metas):
            raise ValueError(f"row change refers to table {i!r} of {len(metas)}")
        schema, table, names, key, flags = metas[i]
        for image in (before, after):
            if image is not None and (type(image) is not tuple or len(image) != len(names)):
                raise ValueError(f"row image does not match {len(names)} columns")
        return RowChange(kind, schema, table, names, key, before, after, flags)
    if c[0] == "e" and len(c) == 4 and type(c[3]) is int and c[3] >= 0:
        names = tuple((_text(t[0]), _text(t[1])) for t in c[2] if type(t) is tuple and len(t) == 2)
        if type(c[2]) is not tuple or len(names) != len(c[2]):
            raise ValueError("raw row events must name their tables as (schema, table) pairs")
        return RowEvents(_bytes(c[1]), names, c[3])
    if c[0] == "q" and len(c) == 4:
        return Statement(schema=_text(c[1]), sql=_text(c[2]), raw=_bytes(c[3]))
    if c[0] == "v" and len(c) == 4 and type(c[3]) is int and c[3] >= 0:
        return Verbatim(_text(c[1]), _bytes(c[2]), c[3])
    raise ValueError(f"unknown change {c[:2]!r}")


def _text(v) -> str:
    if type(v) is not str:
        raise TypeError(f"expected text, got {type(v).__name__}")
    return v


def _bytes(v) -> bytes:
    if type(v) is not bytes:
        raise TypeError(f"expected bytes, got {type(v).__name__}")
    return v
