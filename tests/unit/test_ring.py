"""Ring producer/consumer over plain buffers: order, wraparound, torn and corrupt frames."""

import time

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import CorruptFrame, LocalProtocolError, RingFull, VersionSkew
from bridge.ring.consumer import RingConsumer
from bridge.ring.layout import ACK_SEQ_AT, DATA_OFFSET, WRITE_SEQ_AT, init_region, read_u64, region_bytes, write_publish
from bridge.ring.producer import RingProducer
from bridge.wire.frame import HEADER_BYTES, Frame, FrameKind, encode_frame, frame_bytes
from bridge.wire.native import hot

try:
    from bridge.wire import _frames as frames_compiled
except ImportError:
    frames_compiled = None

SIZE = 4096


class Link:
    """A producer and a consumer joined by copying placements, as a transport would."""

    def __init__(self, size=SIZE, next_seq=1):
        self.producer = RingProducer(size, next_seq=next_seq)
        self.remote = bytearray(region_bytes(size))
        init_region(self.remote, size)
        self.consumer = RingConsumer(memoryview(self.remote), expected_seq=next_seq)

    def send(self, payload, publish=True):
        placements = self.producer.append(FrameKind.TXN, payload)
        for p in placements:
            self.remote[p.offset:p.offset + p.length] = self.producer.region[p.offset:p.offset + p.length]
        if publish:
            write_publish(self.remote, self.producer.write_seq, self.producer.head)
        return placements

    def drain(self):
        got = []
        while (frame := self.consumer.poll()) is not None:
            got.append(frame)
            self.consumer.acknowledge(frame.seq)
        self.producer.acknowledge(read_u64(self.remote, ACK_SEQ_AT))
        return got


def test_frame_crc_covers_header_and_payload():
    data = bytearray(encode_frame(Frame(FrameKind.TXN, 9, b"hello")))
    assert hot.frame_at(data, 0, len(data), 9, 0) == (FrameKind.TXN, 0, b"hello", len(data))
    for at in (0, 4, 8, HEADER_BYTES):  # kind, length, seq, payload: each covered
        damaged = bytearray(data)
        damaged[at] ^= 1
        assert hot.frame_at(damaged, 0, len(damaged), 9, 0) is None


@given(st.lists(st.integers(0, 1500), min_size=1, max_size=120), st.integers(1, 6))
@settings(max_examples=150)
def test_every_frame_arrives_once_in_order_across_wraps(sizes, drain_every):
    link = Link()
    sent, got = [], []
    for i, n in enumerate(sizes):
        payload = bytes([i % 251]) * n
        while True:
            try:
                link.send(payload)
                break
            except RingFull:
                drained = link.drain()
                assert drained, "ring full with nothing to drain"
                got += drained
        sent.append(payload)
        if i % drain_every == 0:
            got += link.drain()
    got += link.drain()
    assert [f.payload for f in got] == sent
    assert [f.seq for f in got] == list(range(1, len(sent) + 1))
    assert link.producer.used == 0


def test_pad_frame_carries_the_next_seq_and_is_skipped():
    link = Link()
    link.send(b"a" * 1900)
    link.send(b"b" * 1900)
    link.drain()
    placements = link.send(b"c" * 1000)  # does not fit before the end: PAD + wrap
    assert len(placements) == 2 and placements[1].offset == DATA_OFFSET
    frames = link.drain()
    assert [(f.seq, f.payload[:1]) for f in frames] == [(3, b"c")]


def test_torn_frame_waits_until_complete():
    link = Link()
    placements = link.producer.append(FrameKind.TXN, b"x" * 500)
    p = placements[0]
    half = p.length // 2
    link.remote[p.offset:p.offset + half] = link.producer.region[p.offset:p.offset + half]
    assert link.consumer.poll() is None  # not published yet, not complete: just not there
    link.remote[p.offset:p.offset + p.length] = link.producer.region[p.offset:p.offset + p.length]
    write_publish(link.remote, 1, link.producer.head)
    assert link.consumer.poll().payload == b"x" * 500


def test_a_whole_frame_is_taken_before_write_seq_reaches_it():
    """Over rdma a placement is one write of the frames; the header's write_seq follows
    only now and then. A frame whole at the tail (seq, epoch, crc) is there."""
    link = Link()
    link.send(b"a" * 300, publish=False)
    link.send(b"b" * 200, publish=False)
    assert read_u64(link.remote, WRITE_SEQ_AT) == 0 and link.consumer.published
    assert link.consumer.backlog_frames == 0  # nothing taken, nothing published: none known
    first = link.consumer.poll()
    assert (first.seq, first.payload) == (1, b"a" * 300)
    assert link.consumer.backlog_frames == 1 and link.consumer.backlog_bytes > 300  # taken, not acknowledged
    assert [f.payload for f in link.drain()] == [b"b" * 200]
    assert link.consumer.poll() is None and not link.consumer.published


def test_a_pad_whose_frame_has_not_arrived_leaves_the_tail_where_it_was():
    link = Link()
    link.send(b"a" * 1900)
    link.send(b"b" * 1900)
    link.drain()
    placements = link.producer.append(FrameKind.TXN, b"c" * 1000)  # PAD at the end, the frame at 0
    pad, frame = placements
    link.remote[pad.offset:pad.offset + pad.length] = link.producer.region[pad.offset:pad.offset + pad.length]
    tail = link.consumer.tail
    assert link.consumer.poll() is None and link.consumer.tail == tail and not link.consumer.published
    link.remote[frame.offset:frame.offset + frame.length] = link.producer.region[frame.offset:frame.offset + frame.length]
    assert link.consumer.poll().payload == b"c" * 1000


def test_a_torn_frame_beyond_write_seq_is_not_there_and_one_within_it_is_corrupt_after_the_grace():
    link = Link()
    link.consumer.corrupt_grace_s = 0.05
    p = link.producer.append(FrameKind.TXN, b"x" * 500)[0]
    link.remote[p.offset:p.offset + p.length] = link.producer.region[p.offset:p.offset + p.length]
    link.remote[p.offset + HEADER_BYTES + 499] ^= 0x01  # a payload byte that will never be right
    assert link.consumer.poll() is None and not link.consumer.published
    write_publish(link.remote, 1, link.producer.head)
    assert link.consumer.poll() is None  # late, for all it knows: looked at again
    time.sleep(0.06)
    with pytest.raises(CorruptFrame, match="seq 1 .* for 0.0[5-9]"):
        link.consumer.poll()


def test_a_published_frame_whose_last_bytes_land_within_the_grace_is_taken():
    """write_seq can land before the frame's last bytes where a NIC places a write's packets
    out of order: the frame is late, not corrupt."""
    link = Link()
    p = link.producer.append(FrameKind.TXN, b"z" * 300)[0]
    link.remote[p.offset:p.offset + p.length - 8] = link.producer.region[p.offset:p.offset + p.length - 8]
    write_publish(link.remote, 1, link.producer.head)
    assert link.consumer.poll() is None and link.consumer.published
    end = p.offset + p.length
    link.remote[end - 8:end] = link.producer.region[end - 8:end]
    assert link.consumer.poll().payload == b"z" * 300


def _crc_forged(head: bytes, wanted: bytes, stale: bytearray, at: int) -> bytearray:
    """``stale`` with its 4 bytes at ``at`` set so that the crc32c of ``head`` + it equals
    that of ``head`` + ``wanted`` (same length): crc32c is linear over GF(2), and the 32
    bits of any 4 consecutive bytes move it independently."""
    def crc(body):
        return crc32c.crc32c(bytes(body), crc32c.crc32c(head))

    base = bytearray(stale)
    base[at:at + 4] = bytes(4)
    need = crc(wanted) ^ crc(base)
    zero = crc(bytearray(len(base)))
    columns = []  # (effect on the crc, the bit that has it) for each of the 32 bits
    for bit in range(32):
        probe = bytearray(len(base))
        probe[at + bit // 8] = 1 << (bit % 8)
        columns.append((crc(probe) ^ zero, 1 << bit))
    pivots = []
    for effect, bits in columns:  # Gaussian elimination, one pivot bit per kept column
        for pivot_effect, pivot_bits in pivots:
            if effect & (pivot_effect & -pivot_effect):
                effect, bits = effect ^ pivot_effect, bits ^ pivot_bits
        if effect:
            pivots.append((effect, bits))
    chosen = 0
    for pivot_effect, pivot_bits in pivots:
        if need & (pivot_effect & -pivot_effect):
            need, chosen = need ^ pivot_effect, chosen ^ pivot_bits
    assert need == 0
    base[at:at + 4] = chosen.to_bytes(4, "little")
    return base


def test_a_torn_frame_whose_stale_bytes_match_its_crc_is_not_taken_without_its_commit_word():
    """The 1-in-2^32 accident the commit word rules out: the header of seq 1 has landed, the
    payload area still holds stale bytes that happen to give the same crc32c, and the commit
    word at the frame's end is not there yet. Neither consumer twin takes it."""
    payload = bytes(range(256)) * 2
    region = bytearray(region_bytes(SIZE))
    init_region(region, SIZE)
    hot.place_frame(region, DATA_OFFSET, FrameKind.TXN, 0, 1, 0, payload)
    head = bytes(region[DATA_OFFSET:DATA_OFFSET + HEADER_BYTES])
    unchecked = head[:16] + bytes(4) + head[20:]
    stale = _crc_forged(unchecked, payload, bytearray(b"stale bytes of an earlier lap!!!" * 16), 100)
    region[DATA_OFFSET + HEADER_BYTES:DATA_OFFSET + HEADER_BYTES + len(payload)] = stale
    end = DATA_OFFSET + frame_bytes(len(payload))
    region[end - 8:end] = bytes(8)  # the commit word not written yet
    assert crc32c.crc32c(bytes(stale), crc32c.crc32c(unchecked)) == int.from_bytes(head[16:20], "little")
    assert RingConsumer(memoryview(region)).poll() is None
    assert frames_compiled is None or frames_compiled.ring_take(region, 0, 1, 0) == (None, False)
    region[end - 8:end] = (1).to_bytes(4, "little") + bytes(4)  # the commit word of seq 1, epoch 0
    region[DATA_OFFSET + HEADER_BYTES:DATA_OFFSET + HEADER_BYTES + len(payload)] = payload
    assert RingConsumer(memoryview(region)).poll().payload == payload


def test_published_frame_with_bad_crc_is_corruption_never_applied():
    link = Link()
    link.consumer.corrupt_grace_s = 0
    link.send(b"y" * 100)
    link.remote[DATA_OFFSET + HEADER_BYTES + 10] ^= 0x40
    with pytest.raises(CorruptFrame) as err:
        link.consumer.poll()
    assert err.value.seq == 1 and "seq 1" in str(err.value)


def test_stale_frame_from_an_earlier_lap_is_not_taken():
    link = Link(next_seq=5)
    stale = encode_frame(Frame(FrameKind.TXN, 4, b"old"))
    link.remote[DATA_OFFSET:DATA_OFFSET + len(stale)] = stale
    assert link.consumer.poll() is None


def test_ring_full_names_the_seq_and_nothing_is_overwritten():
    link = Link()
    link.send(b"z" * 1500)
    link.send(b"z" * 1500)
    with pytest.raises(RingFull, match="seq 3"):
        link.send(b"z" * 1500)
    assert [f.seq for f in link.drain()] == [1, 2]


def test_frame_over_half_the_ring_is_refused():
    with pytest.raises(LocalProtocolError, match="--ring-bytes"):
        Link().send(b"q" * (SIZE // 2))


def test_wrong_magic_is_version_skew():
    region = bytearray(region_bytes(SIZE))
    with pytest.raises(VersionSkew, match="magic"):
        RingConsumer(memoryview(region))


def test_unacked_frames_can_be_resent_only_when_contiguous():
    link = Link()
    for i in range(5):
        link.send(bytes([i]) * 10)
    link.producer.acknowledge(2)
    assert [f.seq for f in link.producer.unacked(2)] == [3, 4, 5]
    assert [f.seq for f in link.producer.unacked(3)] == [4, 5]  # the replica got further than our last ack
    assert link.producer.unacked(1) is None  # frame 2 is gone from the ring: re-read the binlog
    assert link.producer.unacked(5) == []
    assert link.producer.unacked(9) is None  # a replica ahead of us: another history


def _run_packets(count: int, first: int, rows: int = 1) -> bytes:
    """``count`` common transactions as a binlog dump sends them (packets numbered from 0)."""
    import struct
    import zlib

    def event(kind, body, next_position=0, server=1):
        head = struct.pack("<IBIIIH", 0, kind, server, 19 + len(body) + 4, next_position, 0)
        return head + body + struct.pack("<I", zlib.crc32(head + body))

    out, number = bytearray(), 0
    for seq in range(first, first + count):
        table_map = event(19, bytes(8) + b"\x02db\x00\x01t\x00\x01\x03\x00\x00")
        events = [event(162, struct.pack("<QIB", seq, 0, 0) + bytes(6)), table_map,
                  *[event(30, bytes(8) + seq.to_bytes(4, "little")) for _ in range(rows)],
                  event(16, bytes(8), 500 + seq)]
        for e in events:
            out += (len(e) + 1).to_bytes(3, "little") + bytes([number]) + b"\0" + e
            number = (number + 1) % 256
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 12)), min_size=1, max_size=12))
def test_a_run_places_what_appends_would_and_the_consumer_takes_it_across_wraps(runs):
    """place_run against append one frame at a time: the same frames (payloads decode to
    the scanned transactions), the same ring bookkeeping, every frame taken once, in order,
    through the placements a transport copies; unacked() resends them."""
    from bridge.wire.codec import decode_transaction
    from bridge.wire.hotpath import scan_transaction

    link, by_append, first = Link(), RingProducer(SIZE), 1  # drained after each run: the next one fits
    for count, rows in runs:
        packets = _run_packets(count, first, rows)
        run = link.producer.place_run(packets, 0, False, 1 << 20, ("rdma_bridge", "heartbeat"), 64)
        at = number = 0
        while True:  # the same transactions appended one by one
            scanned = scan_transaction(packets[at:], number, False, 1 << 20, True)
            if scanned is None or at >= run.taken:
                break
            taken, number, gtid, data, tables, events, _, _ = scanned
            by_append.append(FrameKind.TXN, hot.encode_compact(gtid, 0, 0, b"", events, tables, data))
            at += taken
        assert run is not None and run.frames >= 1 and run.taken == at and run.gtid == f"0-1-{first + run.frames - 1}"
        assert run.commit_position == 500 + first + run.frames - 1 and run.ack == -1
        for p in run.placements:  # as a transport copies them
            link.remote[p.offset:p.offset + p.length] = link.producer.region[p.offset:p.offset + p.length]
        write_publish(link.remote, link.producer.write_seq, link.producer.head)
        assert (link.producer.head, link.producer.used, link.producer.next_seq) == \
            (by_append.head, by_append.used, by_append.next_seq)
        assert [e[:4] for e in link.producer._inflight] == [e[:4] for e in by_append._inflight]
        resent = link.producer.unacked(link.producer._acked_through())
        assert resent is not None and [f.seq for f in resent] == [e[0] for e in link.producer._inflight]
        got = link.drain()
        by_append.acknowledge(got[-1].seq)
        assert [f.seq for f in got] == list(range(got[0].seq, got[0].seq + run.frames))
        for frame, seq in zip(got, range(first, first + run.frames)):
            txn = decode_transaction(frame.payload)
            assert txn.gtid == f"0-1-{seq}" and txn.changes[0].tables == (("db", "t"),)
        first += run.frames
