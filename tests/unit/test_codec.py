import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import LocalProtocolError, RemoteProtocolError
from bridge.model import BitValue, InvalidTemporal, RowChange, Statement, Transaction
from bridge.wire.codec import decode_transaction, encode_transaction

scalars = st.one_of(
    st.none(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False, places=None),
    st.text(),
    st.binary(),
    st.dates(),
    st.datetimes(),
    st.timedeltas(min_value=dt.timedelta(hours=-838, minutes=-59, seconds=-59),
                  max_value=dt.timedelta(hours=838, minutes=59, seconds=59)),
    st.frozensets(st.text(alphabet="abcxyz", min_size=1, max_size=4), max_size=4),
    st.sampled_from([InvalidTemporal("0000-00-00"), InvalidTemporal("2020-00-10 10:00:00.123456")]),
    st.builds(BitValue, st.integers(0, (1 << 64) - 1), st.integers(1, 64)),
)
names = st.text(min_size=1, max_size=12)


@st.composite
def row_changes(draw):
    columns = tuple(draw(st.lists(names, min_size=1, max_size=6)))
    image = st.tuples(*[scalars for _ in columns])
    kind = draw(st.sampled_from(["insert", "update", "delete"]))
    before = None if kind == "insert" else draw(image)
    after = None if kind == "delete" else draw(image)
    key = tuple(draw(st.lists(st.sampled_from(columns), max_size=2, unique=True)))
    return RowChange(kind, draw(names), draw(names), columns, key, before, after)


transactions = st.builds(
    Transaction,
    gtid=st.builds(lambda d, s, n: f"{d}-{s}-{n}", st.integers(0, 9), st.integers(1, 99), st.integers(1, 10**9)),
    changes=st.lists(st.one_of(row_changes(), st.builds(Statement, st.text(), st.text())), max_size=5).map(tuple))


@given(transactions)
@settings(max_examples=300)
def test_transaction_round_trips_bit_for_bit(txn):
    decoded = decode_transaction(encode_transaction(txn))
    assert decoded == txn
    # types too: 1 and 1.0 and True compare equal, the wire must not mix them up
    for a, b in zip(decoded.changes, txn.changes):
        if isinstance(a, RowChange):
            for img_a, img_b in ((a.before, b.before), (a.after, b.after)):
                assert [type(v) for v in img_a or ()] == [type(v) for v in img_b or ()]


def test_decimal_keeps_its_exponent_and_scale():
    txn = Transaction("0-1-1", (RowChange("insert", "s", "t", ("d",), (), None, (Decimal("0E-10"),)),))
    assert str(decode_transaction(encode_transaction(txn)).changes[0].after[0]) == "0E-10"


def test_unknown_type_is_refused_when_encoding():
    txn = Transaction("0-1-1", (RowChange("insert", "s", "t", ("a",), (), None, (object(),)),))
    with pytest.raises(LocalProtocolError, match="object"):
        encode_transaction(txn)


@given(st.binary(max_size=200))
@settings(max_examples=500)
def test_garbage_yields_protocol_error_never_a_crash(data):
    try:
        decode_transaction(data)
    except RemoteProtocolError:
        pass


@given(transactions, st.data())
@settings(max_examples=200)
def test_truncated_or_flipped_payload_is_refused_or_decodes(txn, data):
    payload = bytearray(encode_transaction(txn))
    cut = data.draw(st.integers(0, len(payload) - 1))
    try:
        decode_transaction(bytes(payload[:cut]))
        raise AssertionError("a truncated payload decoded")
    except RemoteProtocolError:
        pass
    payload[data.draw(st.integers(0, len(payload) - 1))] ^= 0xFF
    try:
        decode_transaction(bytes(payload))
    except RemoteProtocolError:
        pass  # a flip may still decode to another valid value: the frame crc catches that


@given(transactions, st.integers(0, 1000), st.booleans())
@settings(max_examples=100)
def test_chunk_round_trips(txn, index, last):
    from bridge.model import Chunk
    from bridge.wire.codec import decode_chunk, encode_chunk

    chunk = Chunk(txn.gtid, index, last, txn.changes)
    assert decode_chunk(encode_chunk(chunk)) == chunk


@pytest.mark.parametrize("payload", [
    # found by `make fuzz`: a transaction whose change is an empty tuple
    b"l\x02\x00\x00\x00s\x05\x00\x00\x000-1-7l\x03\x00\x00\x00l\x00\x00\x00\x00s\x01\x00\x00\x00rs"
    b"\x06\x00\x00\x00update",
])
def test_fuzz_findings_are_protocol_errors(payload):
    with pytest.raises(RemoteProtocolError):
        decode_transaction(payload)


def test_raw_row_events_take_the_compact_layout_and_round_trip():
    from bridge.model import RowEvents, Statement
    from tests.unit.test_binlog_events import FDE, QUERY, TABLE_MAP, WRITE

    raw = Transaction("0-1-77", (RowEvents(TABLE_MAP + WRITE, (("cap", "t"), ("é", "t2")), 1),), format_event=FDE)
    payload = encode_transaction(raw, (11, 22))
    assert payload[:1] == b"E"
    back = decode_transaction(payload)
    assert back == raw and back.stamps == (11, 22) and back.format_event == FDE
    mixed = Transaction("0-1-78", (RowEvents(WRITE, (("s", "t"),), 1), Statement("s", "UPDATE t", QUERY)))
    assert encode_transaction(mixed)[:1] != b"E" and decode_transaction(encode_transaction(mixed)) == mixed
    for cut in range(1, len(payload) - len(TABLE_MAP + WRITE)):
        with pytest.raises(RemoteProtocolError):
            decode_transaction(payload[:cut])


@settings(max_examples=200)
@given(st.text(max_size=60), st.text(max_size=40), st.binary(max_size=300), st.integers(0, (1 << 32) - 1),
       st.binary(max_size=120), st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1))
def test_verbatim_events_take_their_layout_and_round_trip_cut_or_not(gtid, file, data, events, fmt, read, ship):
    """Relay apply mode's transactions (events as the primary wrote them): the verbatim
    layout where the GTID is ASCII and both names fit a byte's length, the tagged one
    otherwise; either way back as they were, stamps and format event too. Cut anywhere
    before the events: an error, never a crash."""
    from bridge.model import Verbatim

    txn = Transaction(gtid, (Verbatim(file, data, events),), format_event=fmt)
    payload = encode_transaction(txn, (read, ship))
    compact = gtid.isascii() and len(gtid) < 256 and len(file.encode("utf-8", "surrogatepass")) < 256
    assert (payload[:1] == b"V") is compact
    back = decode_transaction(payload)
    assert back == txn and back.stamps == (read, ship) and back.format_event == fmt
    if compact:
        for cut in range(1, len(payload) - len(data) - 4):
            with pytest.raises(RemoteProtocolError):
                decode_transaction(payload[:cut])
