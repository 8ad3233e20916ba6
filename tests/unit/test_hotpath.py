"""The compiled hot path against its pure-Python twin, byte for byte.

Every function of ``bridge.wire._hotpath`` is called with the same inputs as its
twin in ``bridge.wire.hotpath``: well-formed ones (the common case the compiled
code does itself) and damaged ones (which it hands to the twin): the results must be
equal, bytes included, or both must raise the same error. The rest of the unit suite
runs on whichever ``bridge.wire.native`` picked; ``make test`` runs it on both.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.wire import hotpath, native
from bridge.wire.frame import HEADER_BYTES, frame_bytes

try:
    from bridge.wire import _hotpath as compiled
except ImportError:  # test_the_build_made_the_compiled_module_and_it_is_used fails; the rest is skipped
    compiled = None
PURE = os.environ.get(native.PURE_ENV, "") not in ("", "0")
built = pytest.mark.skipif(compiled is None, reason="the compiled hot path is not built")


def same(name: str, *args, prepare=None):
    """Both implementations of ``name`` on copies of ``args``: equal results (and
    equal mutated first argument when ``prepare`` makes it), or the same error."""
    outcomes = []
    for impl in (hotpath, compiled):
        call_args = (prepare(),) + args if prepare else args
        try:
            result = getattr(impl, name)(*call_args)
            outcomes.append(("ok", result, bytes(call_args[0]) if prepare else None))
        except Exception as exc:  # noqa: BLE001 - the comparison is the point: type and message
            outcomes.append(("raised", type(exc), str(exc)))
    assert outcomes[0] == outcomes[1], name
    return outcomes[0]


def test_the_build_made_the_compiled_module_and_it_is_used():
    assert compiled is not None, "pip install did not build bridge/wire/_hotpath.pyx (a C compiler and Python headers?)"
    assert compiled.__file__.endswith(".so")
    assert native.COMPILED is not PURE
    assert (native.hot is compiled) is not PURE


def test_the_compiled_module_has_every_function_of_the_twin():
    if compiled is None:
        pytest.skip("not built (test_the_build_made_the_compiled_module_and_it_is_used says so)")
    functions = [name for name in dir(hotpath) if not name.startswith("_") and callable(getattr(hotpath, name))
                 and getattr(getattr(hotpath, name), "__module__", None) == hotpath.__name__]
    assert functions and [name for name in functions if not hasattr(compiled, name)] == []


names = st.text(min_size=0, max_size=70)
tables = st.lists(st.tuples(names, names), max_size=4).map(tuple)
u64 = st.integers(0, (1 << 64) - 1)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30), u64, u64, st.binary(max_size=120), st.integers(0, (1 << 32) - 1), tables,
       st.binary(max_size=300))
@built
def test_encode_compact_and_decode_compact_agree(gtid, read_ns, ship_ns, fmt, events, tbls, data):
    kind, payload, _ = same("encode_compact", gtid, read_ns, ship_ns, fmt, events, tbls, data)
    assert kind == "ok"
    assert type(payload) is bytearray
    kind, decoded, _ = same("decode_compact", bytes(payload))
    assert decoded == (gtid, read_ns, ship_ns, fmt, events, tbls, data)
    same("decode_compact", memoryview(payload))  # the ring hands out views too


@built
def test_encode_compact_refusals_are_the_twins():
    long_name = "x" * 256
    assert same("encode_compact", "0-1-1", 0, 0, b"", 0, (("db", long_name),), b"")[0] == "raised"
    assert same("encode_compact", "9" * 300, 0, 0, b"", 0, (), b"")[0] == "raised"
    assert same("encode_compact", "0-1-1", -1, 0, b"", 0, (), b"")[0] == "raised"
    assert same("encode_compact", "0-1-1", 0, 0, b"", 1 << 32, (), b"")[0] == "raised"
    assert same("encode_compact", "0-1-1", 0, 0, b"", 0, [("a", "b")], b"x")[0] == "ok"  # a list: the twin's way
    assert same("encode_compact", "0-1-\udcff", 0, 0, b"", 0, (), b"")[0] == "raised"  # not UTF-8


@built
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_compact_payloads_get_the_same_answer(data):
    payload = bytes(hotpath.encode_compact("0-1-77", 5, 6, b"F" * 30, 2, (("db", "t\u00e9"), ("s", "u")), b"ev" * 20))
    cut = data.draw(st.integers(0, len(payload)))
    damaged = bytearray(payload[:cut])
    for _ in range(data.draw(st.integers(0, 3))):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    same("decode_compact", bytes(damaged))


@built
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.integers(0, (1 << 32) - 1))
def test_crc32c_is_the_crc32c_packages(data, value):
    assert compiled.crc32c(data, value) == crc32c.crc32c(data, value)
    assert compiled.crc32c(data) == crc32c.crc32c(data)


@built
def test_crc32c_over_a_large_buffer_and_every_alignment():
    data = os.urandom(1 << 20)
    assert compiled.crc32c(data) == crc32c.crc32c(data)
    for start in range(9):
        view = memoryview(data)[start:start + 1000 + start]
        assert compiled.crc32c(view) == crc32c.crc32c(bytes(view))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 200), st.sampled_from([1, 2, 3, 4]), st.integers(0, 255), u64, u64, st.binary(max_size=400),
       st.integers(0, 700))
@built
def test_place_frame_writes_the_same_bytes_and_frame_at_reads_them(start, kind, flags, seq, epoch, payload, size):
    kind_, n, region = same("place_frame", start, kind, flags, seq, epoch, payload, prepare=lambda: bytearray(size))
    if kind_ != "ok":
        assert start + frame_bytes(len(payload)) > size
        return
    assert n == frame_bytes(len(payload)) == (HEADER_BYTES + len(payload) + 7) // 8 * 8 + 8
    room = size - start
    got = same("frame_at", region, start, room, seq, epoch & 0xFFFFFFFF)[1]
    assert got == ((kind, flags, payload, n) if n <= room else None)
    assert same("frame_at", region, start, room, seq + 1, epoch & 0xFFFFFFFF)[1] is None  # not the expected seq
    assert same("frame_at", region, start, room, seq, (epoch + 1) & 0xFFFFFFFF)[1] is None  # another session


@built
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_frames_are_refused_alike(data):
    region = bytearray(256)
    payload = b"payload of a transaction"
    hotpath.place_frame(region, 8, 1, 0, 42, 7, payload)
    trailer = 8 + frame_bytes(len(payload)) - 8
    at = data.draw(st.one_of(st.integers(8, 8 + HEADER_BYTES + len(payload) - 1).filter(lambda i: i not in (10, 11)),
                             st.integers(trailer, trailer + 7)))
    region[at] ^= data.draw(st.integers(1, 255))  # any byte the crc covers (not the reserved u16), or the commit word
    assert same("frame_at", bytes(region), 8, 248, 42, 7)[1] is None
    assert same("frame_at", bytes(region), 8, 300, 42, 7)[0] == "raised"  # room beyond the region


@built
def test_frame_kinds_outside_the_four_are_refused_alike():
    region = bytearray(64)
    for kind in (0, 5, 255):
        hotpath.place_frame(region, 0, kind, 0, 1, 0, b"x")
        assert same("frame_at", region, 0, 64, 1, 0)[1] is None


def _gtid_event(seq: int, domain: int, server: int, flags: int) -> bytes:
    body = struct.pack("<QIB", seq, domain, flags) + bytes(6)
    head = struct.pack("<IBIIIH", 0, 162, server, 19 + len(body) + 4, 0, 8)
    return head + body + struct.pack("<I", zlib.crc32(head + body))


@settings(max_examples=300, deadline=None)
@given(u64, st.integers(0, (1 << 32) - 1), st.integers(0, (1 << 32) - 1), st.integers(0, 255),
       st.integers(0, 60))
@built
def test_parse_gtid_agrees_on_whole_and_cut_events(seq, domain, server, flags, cut):
    event = _gtid_event(seq, domain, server, flags)
    assert same("parse_gtid", event)[1] == (f"{domain}-{server}-{seq}", bool(flags & 1))
    same("parse_gtid", event[:cut])


@built
def test_parse_gtid_of_mysql_and_of_other_events_is_the_twins():
    sid = bytes(range(16))
    body = struct.pack("<B16sQ", 1, sid, 99)
    mysql = struct.pack("<IBIIIH", 0, 33, 1, 19 + len(body), 0, 0) + body
    assert same("parse_gtid", mysql)[1] == ("00010203-0405-0607-0809-0a0b0c0d0e0f:99", False)
    assert same("parse_gtid", bytes(40))[0] == "raised"


def _table_map(schema: bytes, table: bytes) -> bytes:
    body = bytes(8) + bytes([len(schema)]) + schema + b"\0" + bytes([len(table)]) + table + b"\0" + b"\x01\x03\x00\x00"
    return struct.pack("<IBIIIH", 0, 19, 1, 19 + len(body), 0, 0) + body


@built
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=64), st.integers(0, 200))
def test_table_map_names_agree_on_whole_and_cut_events(schema, table, cut):
    event = _table_map(schema, table)
    kind, names, _ = same("table_map_names", event)
    if kind == "ok":
        assert names == (schema.decode(), table.decode())
    same("table_map_names", event[:cut])


def test_without_the_compiled_module_the_twin_runs_and_one_line_says_why(tmp_path):
    script = ("import logging, sys; sys.modules['bridge.wire._hotpath'] = None\n"
              "logging.basicConfig(format='%(levelname)s %(message)s')\n"
              "from bridge.wire import native, hotpath\n"
              "assert native.hot is hotpath and not native.COMPILED\n"
              "native.announce(logging.getLogger('t'), ['hot path'])\n")
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("WARNING compiled core: hot path in pure Python, slower (the "
                                                   "compiled module is not built"), out.stderr
    env[native.PURE_ENV] = "1"
    out = subprocess.run([sys.executable, "-c", script.replace("sys.modules['bridge.wire._hotpath'] = None", "")],
                         capture_output=True, text=True, env=env, check=True)
    assert f"{native.PURE_ENV} is set" in out.stderr


# --- scan_transaction: the rest of a transaction from the buffered dump packets -------

def _event(kind: int, body: bytes, next_position: int = 0) -> bytes:
    head = struct.pack("<IBIIIH", 0, kind, 1, 19 + len(body) + 4, next_position, 0)
    return head + body + struct.pack("<I", zlib.crc32(head + body))


def _packets(events: list[bytes], seq_id: int, semi_sync: bool, ack_last: bool) -> bytes:
    out = bytearray()
    for i, event in enumerate(events):
        last = i == len(events) - 1
        payload = b"\0" + ((b"\xef" + bytes([1 if ack_last and last else 0])) if semi_sync else b"") + event
        out += len(payload).to_bytes(3, "little") + bytes([seq_id]) + payload
        seq_id = (seq_id + 1) % 256
    return bytes(out)


def _mysql_gtid_event(sid: bytes, gno: int) -> bytes:
    """MySQL's GTID event: flags, uuid, gno, then what 8.0 adds (logical clock, commit times...)."""
    return _event(33, struct.pack("<B16sQ", 1, sid, gno) + b"\x02" + bytes(16) + bytes(7))


def _begin(schema: bytes = b"", status: bytes = b"\x00\x00\x00\x00\x00") -> bytes:
    """MySQL's BEGIN query event (thread id, exec time, schema length, error code, status length)."""
    return _event(2, struct.pack("<IIBHH", 7, 0, len(schema), 0, len(status)) + status + schema + b"\0BEGIN")


@built
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=8), st.binary(max_size=40), st.integers(0, 40), st.binary(max_size=12))
def test_is_begin_agrees_on_begin_queries_cut_and_others(schema, status, cut, other):
    begin = _begin(schema, status)
    assert same("is_begin", begin)[1] is True and same("is_begin", begin[:-4])[1] is True  # with a CRC32, without
    same("is_begin", begin[:cut])
    same("is_begin", _event(2, struct.pack("<IIBHH", 7, 0, 0, 0, 0) + b"\0" + other))
    assert same("is_begin", _event(3, begin[19:-4]))[1] is False  # not a QUERY event


@st.composite
def transactions(draw):
    events, row_kinds = [], [23, 24, 25, 30, 31, 32]
    for _ in range(draw(st.integers(1, 3))):
        schema, table = draw(st.text(max_size=12)), draw(st.text(max_size=12))
        events.append(_table_map(schema.encode(), table.encode()))
        for i in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(row_kinds))
            events.append(_event(kind, bytes(6) + b"\x01\x00" + draw(st.binary(max_size=40))))
    events.append(_event(16, struct.pack("<Q", draw(st.integers(0, 1 << 40))), draw(st.integers(0, 1 << 31))))
    return events


@built
@settings(max_examples=300, deadline=None)
@given(transactions(), st.integers(0, 255), st.booleans(), st.booleans(), st.binary(max_size=30), st.data())
def test_scan_transaction_agrees_whole_cut_and_damaged(events, seq_id, semi_sync, ack_last, after, data):
    gtid_first, mysql = data.draw(st.booleans()), data.draw(st.booleans())
    if mysql:  # MySQL's GTID, then a BEGIN query (after a GTID read alone, the scan starts at the BEGIN)
        gtid = _mysql_gtid_event(data.draw(st.binary(min_size=16, max_size=16)), data.draw(u64))
        head = [gtid, _begin(data.draw(st.binary(max_size=8)), data.draw(st.binary(max_size=40)))]
    else:
        head = [_gtid_event(data.draw(u64), data.draw(st.integers(0, 9)), data.draw(st.integers(0, 9)), 0)]
    lead = head if gtid_first else head[1:]
    buf = _packets([*lead, *events], seq_id, semi_sync, ack_last) + after  # the next transaction's packets may follow
    kind, got, _ = same("scan_transaction", buf, seq_id, semi_sync, 1 << 20, gtid_first)
    assert kind == "ok" and got is not None
    taken, next_seq, text, joined, tables, rows, commit, ack = got
    assert text == (hotpath.parse_gtid(head[0])[0] if gtid_first else None)
    assert taken == len(buf) - len(after) and joined == b"".join(events[:-1])
    assert rows == sum(1 for e in events if e[4] != 19) - 1 and len(tables) == len(events) - rows - 1
    assert commit == struct.unpack_from("<I", events[-1], 13)[0]
    packets = len(events) + len(lead)
    assert (ack, next_seq) == ((commit, 1) if semi_sync and ack_last else (-1, (seq_id + packets) % 256))
    same("scan_transaction", buf, (seq_id + 1) % 256, semi_sync, 1 << 20, gtid_first)  # not the number expected
    same("scan_transaction", buf, seq_id, semi_sync, data.draw(st.integers(1, 200)), gtid_first)  # to chunk
    same("scan_transaction", buf, seq_id, semi_sync, 1 << 20, not gtid_first)  # a GTID where none is due, or none
    cut = data.draw(st.integers(0, len(buf)))
    assert same("scan_transaction", buf[:cut], seq_id, semi_sync, 1 << 20, gtid_first)[1] is None or cut >= taken
    damaged = bytearray(buf)
    damaged[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    same("scan_transaction", bytes(damaged), seq_id, semi_sync, 1 << 20, gtid_first)


@built
def test_scan_transaction_leaves_everything_else_to_the_event_path():
    table_map, rows, xid = _table_map(b"db", b"t"), _event(30, bytes(8) + b"r"), _event(16, bytes(8), 99)
    query = _event(2, bytes(13) + b"\x00db\x00COMMIT")
    for events in ([xid], [table_map, xid], [table_map, rows, query], [table_map, _event(39, bytes(9)), xid],
                   [table_map, rows, _event(27, b"")]):
        assert same("scan_transaction", _packets(events, 3, False, False), 3, False, 1 << 20)[1] is None
    error = b"\x05\x00\x00\x03\xff\x10\x04#"  # an error packet where an event was due
    assert same("scan_transaction", error, 3, False, 1 << 20)[1] is None
    whole = _packets([table_map, rows, xid], 3, False, False)
    assert same("scan_transaction", whole, 3, False, 1 << 20)[1] is not None
    standalone = _gtid_event(7, 0, 1, 1)  # a DDL's GTID
    for gtid in (standalone, standalone[:30], _event(33, bytes(25))):  # cut; MySQL's GTID
        packets = _packets([gtid, table_map, rows, xid], 3, False, False)
        assert same("scan_transaction", packets, 3, False, 1 << 20, True)[1] is None
    packets = _packets([_gtid_event(7, 0, 1, 0), table_map, rows, xid], 3, False, False)
    assert same("scan_transaction", packets, 3, False, 1 << 20, True)[1][2] == "0-1-7"
    sid = bytes.fromhex("3e11fa47-71ca-11e1-9e33-c80aa9429562".replace("-", ""))
    mysql = _mysql_gtid_event(sid, 23)
    packets = _packets([mysql, _begin(), table_map, rows, xid], 3, False, False)
    assert same("scan_transaction", packets, 3, False, 1 << 20, True)[1][2] == "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
    not_begin = (_event(2, bytes(13) + b"\x00COMMIT"), _event(2, bytes(13) + b"\x00BEGIN WORK"), _begin()[:-6],
                 _event(2, bytes(13) + b"\x00db\x00CREATE TABLE x (i INT)"), _event(42, bytes(40)))
    for events in ([mysql, table_map, rows, xid], *([mysql, q, table_map, rows, xid] for q in not_begin),
                   [mysql, _begin(), _begin(), table_map, rows, xid], [_event(42, bytes(40)), _begin(), rows, xid],
                   [_gtid_event(7, 0, 1, 0), _begin(), table_map, rows, xid]):
        assert same("scan_transaction", _packets(events, 3, False, False), 3, False, 1 << 20, True)[1] is None
    assert same("scan_transaction", _packets([_begin(), table_map, rows, xid], 3, False, False), 3, False,
                1 << 20)[1] is not None  # after a GTID the event path read, the BEGIN may come first


@built
@settings(max_examples=300, deadline=None)
@given(transactions(), st.integers(0, 255), st.booleans(), st.booleans(), st.binary(max_size=30), st.data())
def test_scan_verbatim_agrees_keeps_every_event_and_leaves_the_rest(events, seq_id, semi_sync, ack_last, after, data):
    if data.draw(st.booleans()):  # MySQL's GTID and its BEGIN, kept as they are
        head = [_mysql_gtid_event(data.draw(st.binary(min_size=16, max_size=16)), data.draw(u64)),
                _begin(data.draw(st.binary(max_size=8)), data.draw(st.binary(max_size=40)))]
    else:
        head = [_gtid_event(data.draw(u64), data.draw(st.integers(0, 9)), data.draw(st.integers(0, 9)), 0)]
    buf = _packets([*head, *events], seq_id, semi_sync, ack_last) + after
    kind, got, _ = same("scan_verbatim", buf, seq_id, semi_sync, 1 << 20)
    assert kind == "ok" and got is not None
    taken, next_seq, gtid, joined, count, commit, ack = got
    assert gtid == hotpath.parse_gtid(head[0])[0] and joined == b"".join([*head, *events])
    assert taken == len(buf) - len(after) and count == len(head) + len(events)
    assert commit == struct.unpack_from("<I", events[-1], 13)[0]
    assert (ack, next_seq) == ((commit, 1) if semi_sync and ack_last else (-1, (seq_id + count) % 256))
    same("scan_verbatim", buf, (seq_id + 1) % 256, semi_sync, 1 << 20)  # not the number expected
    same("scan_verbatim", buf, seq_id, semi_sync, data.draw(st.integers(1, 200)))  # to chunk
    assert same("scan_verbatim", _packets(events, seq_id, semi_sync, ack_last), seq_id, semi_sync,
                1 << 20)[1] is None  # no GTID first
    cut = data.draw(st.integers(0, len(buf)))
    assert same("scan_verbatim", buf[:cut], seq_id, semi_sync, 1 << 20)[1] is None or cut >= taken
    damaged = bytearray(buf)
    damaged[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    same("scan_verbatim", bytes(damaged), seq_id, semi_sync, 1 << 20)


@built
@settings(max_examples=100, deadline=None)
@given(transactions(), st.booleans())
def test_scan_verbatim_makes_the_transaction_the_verbatim_grouper_makes(events, mysql):
    from bridge.source.verbatim import VerbatimGrouper

    sid = bytes.fromhex("3e11fa4771ca11e19e33c80aa9429562")
    head = [_mysql_gtid_event(sid, 23), _begin()] if mysql else [_gtid_event(5, 0, 1, 0)]
    grouper, made = VerbatimGrouper(4, file="binlog.000007"), None
    for event in [*head, *events]:
        assert made is None
        made = grouper.feed(event)
    _, _, gtid, joined, count, _, _ = native.hot.scan_verbatim(_packets([*head, *events], 0, False, False), 0, False,
                                                               1 << 20)
    assert (made.gtid, made.changes[0].data, made.changes[0].events) == (gtid, joined, count)


@built
@settings(max_examples=100, deadline=None)
@given(transactions())
def test_scan_transaction_makes_the_transaction_the_assembler_makes(events):
    from bridge.model import RowEvents, Transaction
    from bridge.source.assembler import TransactionAssembler
    from bridge.source.events import CommitRead, GtidStart, RawRowEvent
    from bridge.wire import binlog

    assembler = TransactionAssembler()
    assembler.feed(GtidStart("0-1-5", False))
    for event in events[:-1]:
        names = binlog.table_map_names(event) if event[4] == 19 else None
        assert assembler.feed(RawRowEvent(event, names, bool(binlog.rows_flags(event) & 1))) is None
    expected = assembler.feed(CommitRead())
    _, _, _, joined, tables, rows, _, _ = native.hot.scan_transaction(_packets(events, 0, False, False), 0, False,
                                                                      1 << 20)
    assert Transaction("0-1-5", (RowEvents(joined, tables, rows),)) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=5), st.lists(st.binary(max_size=40), max_size=3),
       st.integers(0, 1500))
@built
def test_one_trip_is_the_binlog_statement_and_the_tail_joined(datas, tail, limit):
    from bridge.wire.binlog import binlog_statement, statement_bytes

    kind, query, _ = same("one_trip", datas, tail, limit)
    assert kind == "ok"
    total = sum(map(len, datas))
    fits = total and statement_bytes(total) + sum(1 + len(t) for t in tail) <= limit
    assert query == (b";".join([binlog_statement(b"".join(datas)), *tail]) if fits else None)
    same("one_trip", tuple(datas), tail, limit)  # not lists: the twin's way
    same("one_trip", [bytearray(d) for d in datas], tail, limit)


# --- place_run: common transactions framed straight into a producer's mirror ---------
BASE = 64  # where the mirror's data area starts in these tests' regions


def _txn(seq: int, schema: bytes = b"db", table: bytes = b"t", rows: int = 1, body: bytes = b"r") -> list[bytes]:
    events = [_gtid_event(seq, 0, 1, 0), _table_map(schema, table)]
    events += [_event(30, bytes(8) + body) for _ in range(rows)]
    return events + [_event(16, bytes(8), 1000 + seq)]


def _stamps_zeroed(region: bytearray, entries) -> bytes:
    """The region with what differs between two runs at different times zeroed: each TXN
    frame's two stamps and so its crc."""
    out = bytearray(region)
    for _, _, offset, _, _, _ in entries:
        stamps = offset + HEADER_BYTES + 2 + out[offset + HEADER_BYTES + 1]
        out[stamps:stamps + 16] = bytes(16)
        out[offset + 16:offset + 20] = bytes(4)
    return bytes(out)


def run_both(buf, seq_id, semi_sync, max_bytes, size, head, free, next_seq, epoch, heartbeat, max_txns, file=None):
    """place_run of both twins on fresh regions: the same result and the same region (stamps
    aside); each placed frame reads back (crc right) as the scanned transaction."""
    outcomes = []
    for impl in (hotpath, compiled):
        region = bytearray(b"\xaa" * (BASE + size))
        got = impl.place_run(buf, seq_id, semi_sync, max_bytes, region, BASE, head, free, next_seq, epoch,
                             heartbeat, max_txns, file)
        outcomes.append((got, _stamps_zeroed(region, got[2] if got else ())))
        for entry in got[2] if got else ():
            seq, _, offset, length, kind, flags = entry
            assert (kind, flags) == (1, 0) and type(kind) is type(hotpath.FrameKind.TXN)
            read = impl.frame_at(region, offset, BASE + size - offset, seq, epoch & 0xFFFFFFFF)
            assert read is not None and read[0] == 1 and len(read[2]) == length
    assert outcomes[0] == outcomes[1]
    return outcomes[0][0]


def _dumped(txns, seq_id: int, semi_sync: bool, mysql: bool, data, heartbeats: bool = False):
    """Each transaction after its GTID event (MySQL's with a BEGIN), some a heartbeat's
    write (``heartbeats``), some asking for a semi-sync ACK: (their events, which asked,
    the dump's packets of them all)."""
    events, acks = [], []
    for i, txn in enumerate(txns):
        if heartbeats and data.draw(st.booleans()):
            txn = [_table_map(b"rdma_bridge", b"heartbeat"), txn[-2], txn[-1]]
        head = [_mysql_gtid_event(bytes(range(16)), i + 1), _begin()] if mysql else [_gtid_event(i + 1, 0, 1, 0)]
        events.append([*head, *txn])
        acks.append(semi_sync and data.draw(st.booleans()))
    buf, number = bytearray(), seq_id
    for txn, ack in zip(events, acks):
        buf += _packets(txn, number, semi_sync, ack)
        number = 1 if ack else (number + len(txn)) % 256
    return events, acks, buf


@built
@settings(max_examples=300, deadline=None)
@given(st.lists(transactions(), min_size=1, max_size=5), st.integers(0, 255), st.booleans(), st.data())
def test_place_run_agrees_and_frames_what_scan_transaction_finds(txns, seq_id, semi_sync, data):
    heartbeat = ("rdma_bridge", "heartbeat")
    mysql = data.draw(st.booleans())  # the primary's flavor: its GTID events (MySQL's with the BEGIN after it)
    events, acks, buf = _dumped(txns, seq_id, semi_sync, mysql, data, heartbeats=True)
    size = data.draw(st.integers(64, 4096)) * 8
    head = data.draw(st.integers(0, size // 8 - 1)) * 8
    free = data.draw(st.integers(0, size // 8)) * 8
    max_txns = data.draw(st.integers(1, 6))
    got = run_both(bytes(buf), seq_id, semi_sync, 1 << 20, size, head, free, 7, 1 << 33 | 5, heartbeat, max_txns)
    # what it placed is what scan_transaction takes one by one, stopping where it says
    at, number, placed, hb = 0, seq_id, 0, 0
    for txn, ack in zip(events, acks):
        scanned = hotpath.scan_transaction(memoryview(buf)[at:], number, semi_sync, 1 << 20, True)
        assert scanned is not None
        if got is None or placed == len(got[2]):
            break
        at, number, scanned_commit = at + scanned[0], scanned[1], scanned[6]
        hb += scanned[4] == (heartbeat,)
        placed += 1
        if ack:
            break
    if got is None:
        assert placed == 0
        return
    taken, next_number, entries, new_head, heartbeats, gtid, commit, ack = got
    last = f"00010203-0405-0607-0809-0a0b0c0d0e0f:{placed}" if mysql else f"0-1-{placed}"
    assert (taken, next_number, heartbeats, gtid) == (at, number, hb, last)
    assert [e[0] for e in entries] == list(range(7, 7 + placed)) and commit == scanned_commit
    assert ack == (scanned[7] if acks[placed - 1] else -1)
    used = sum(e[1] for e in entries)
    assert used <= free and new_head == (head + used) % size or new_head < head


@built
def test_place_run_stops_where_the_per_transaction_path_must_take_over():
    heartbeat = ("rdma_bridge", "heartbeat")

    def placed(txns, size=4096, head=0, free=4096, max_txns=64, max_bytes=1 << 20, semi_sync=False, ack=()):
        buf, number = bytearray(), 3
        for i, txn in enumerate(txns):
            buf += _packets(txn, number, semi_sync, i in ack)
            number = 1 if i in ack else (number + len(txn)) % 256
        got = run_both(bytes(buf), 3, semi_sync, max_bytes, size, head, free, 1, 9, heartbeat, max_txns)
        return 0 if got is None else len(got[2])

    common = [_txn(i) for i in range(1, 4)]
    assert placed(common) == 3
    assert placed(common, max_txns=2) == 2
    ddl = [_gtid_event(9, 0, 1, 1), _event(2, bytes(13) + b"\x00db\x00CREATE TABLE x (i INT)")]
    assert placed([common[0], ddl, common[1]]) == 1  # a standalone GTID (DDL): the event path
    mysql = [[_mysql_gtid_event(bytes(16), i), _begin(), *txn[1:]] for i, txn in enumerate(common, 1)]
    assert placed(mysql) == 3
    assert placed([mysql[0], [_mysql_gtid_event(bytes(16), 9), ddl[1]], mysql[1]]) == 1  # MySQL's DDL
    assert placed([common[0], _txn(2, schema="é".encode())]) == 1  # a non-ASCII name
    assert placed([common[0], _txn(2, rows=64)], size=16384, free=16384) == 1  # more events than a run takes
    assert placed([common[0], _txn(2, rows=63)], size=16384, free=16384) == 2
    assert placed([common[0], _txn(2, body=bytes(300))], max_bytes=300) == 1  # a transaction to chunk
    assert placed(common, semi_sync=True, ack=(1,)) == 2  # stops after the one that asked for an ACK
    assert placed(common, free=8) == 0  # the ring is full: the per-transaction path waits for space
    assert placed(common, free=300) == 2  # the third no longer fits the free space (frames of 136 bytes)
    assert placed([_txn(1, body=bytes(300))], size=512, free=512) == 0  # over half the ring
    assert placed(common, head=4096 - 16, free=4096) == 3  # an implicit wrap (no room for a PAD header)
    assert placed(common, head=4096 - 64, free=4096) == 3  # a PAD, then the frame at the start
    assert placed([common[0]], head=4096 - 64, free=40) == 0  # the PAD's gap counts against the free space


@built
@settings(max_examples=200, deadline=None)
@given(transactions(), st.integers(0, 255), st.booleans(), st.data())
def test_scan_wants_more_on_every_cut_of_a_transaction_a_run_takes_and_nothing_else(txn, seq_id, semi_sync, data):
    events = [_gtid_event(5, 0, 1, 0), *txn]
    buf = _packets(events, seq_id, semi_sync, False)
    placed = run_both(buf, seq_id, semi_sync, 1 << 20, 1 << 16, 0, 1 << 16, 1, 0, ("a", "b"), 1)
    cut = data.draw(st.integers(0, len(buf) - 1))
    wants = same("scan_wants_more", buf[:cut], seq_id, semi_sync, 1 << 20)[1]
    # a cut of one a run takes wants more; of one it does not, only while its first packets say nothing yet
    assert wants or placed is None
    assert same("scan_wants_more", buf, seq_id, semi_sync, 1 << 20)[1] is False  # whole: nothing more wanted
    damaged = bytearray(buf)
    damaged[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    same("scan_wants_more", bytes(damaged[:cut]), seq_id, semi_sync, 1 << 20)
    ddl = _packets([_gtid_event(5, 0, 1, 1)], seq_id, semi_sync, False)
    assert same("scan_wants_more", ddl, seq_id, semi_sync, 1 << 20)[1] is False
    mysql = _packets([_mysql_gtid_event(bytes(16), 5), _begin(), *txn], seq_id, semi_sync, False)
    mysql_placed = run_both(mysql, seq_id, semi_sync, 1 << 20, 1 << 16, 0, 1 << 16, 1, 0, ("a", "b"), 1)
    assert (mysql_placed is None) == (placed is None)  # (a name that is not ASCII: neither)
    cut = data.draw(st.integers(0, len(mysql) - 1))
    assert same("scan_wants_more", mysql[:cut], seq_id, semi_sync, 1 << 20)[1] or placed is None


@built
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), u64, u64, st.binary(max_size=120), st.binary(max_size=40), st.integers(0, (1 << 32) - 1),
       st.binary(max_size=300))
def test_encode_verbatim_agrees_and_decodes_back(gtid, read_ns, ship_ns, fmt, file, events, data):
    from bridge.model import Verbatim
    from bridge.wire.codec import decode_transaction

    kind, payload, _ = same("encode_verbatim", gtid, read_ns, ship_ns, fmt, file, events, data)
    assert kind == "ok" and payload[:1] == b"V"
    if gtid.isascii() and file.isascii():
        txn = decode_transaction(payload)
        assert (txn.gtid, txn.stamps, txn.format_event) == (gtid, (read_ns, ship_ns), fmt)
        assert txn.changes == (Verbatim(file.decode(), data, events),)
    same("encode_verbatim", "x" * 256, read_ns, ship_ns, fmt, file, events, data)  # over 255 bytes: ValueError
    same("encode_verbatim", gtid, read_ns, ship_ns, fmt, bytes(256), events, data)
    same("encode_verbatim", gtid, read_ns, ship_ns, fmt, bytearray(file), events, data)  # the twin's way
    same("encode_verbatim", gtid, read_ns, ship_ns, fmt, file, 1 << 32, data)  # OverflowError


@built
@settings(max_examples=200, deadline=None)
@given(st.lists(transactions(), min_size=1, max_size=5), st.integers(0, 255), st.booleans(), st.booleans(),
       st.text("binlog.0123456789", min_size=1, max_size=30).map(str.encode), st.data())
def test_place_run_with_a_file_frames_each_transaction_as_the_primary_wrote_it(txns, seq_id, semi_sync, mysql, file,
                                                                               data):
    """Relay apply mode: place_run with ``file`` takes the same transactions as without,
    each framed in the verbatim payload: all its events (GTID, BEGIN, XID too), their
    count, the file, as scan_verbatim takes them one by one."""
    from bridge.model import Verbatim
    from bridge.wire.codec import decode_transaction

    buf = _dumped(txns, seq_id, semi_sync, mysql, data)[2]
    size = data.draw(st.integers(64, 4096)) * 8
    head, max_bytes = data.draw(st.integers(0, size // 8 - 1)) * 8, data.draw(st.sampled_from([1 << 20, 150, 400]))
    got = run_both(bytes(buf), seq_id, semi_sync, max_bytes, size, head, size, 7, 5, ("rdma_bridge", "heartbeat"), 6,
                   file=file)
    if got is None:  # the first is over half the ring, or (max_bytes) one to chunk
        return
    region = bytearray(b"\xaa" * (BASE + size))
    hotpath.place_run(bytes(buf), seq_id, semi_sync, max_bytes, region, BASE, head, size, 7, 5,
                      ("rdma_bridge", "heartbeat"), 6, file)
    at, number = 0, seq_id
    for seq, _, offset, length, _, _ in got[2]:
        taken, number, gtid, joined, count, _, _ = hotpath.scan_verbatim(memoryview(buf)[at:], number, semi_sync,
                                                                         max_bytes)
        at += taken
        txn = decode_transaction(bytes(region[offset + HEADER_BYTES:offset + HEADER_BYTES + length]))
        assert txn.gtid == gtid and txn.changes == (Verbatim(file.decode(), joined, count),)
    assert got[0] == at and got[1] == number
