"""The ship lane (bridge.source.ship) and its compiled twin (bridge.source._ship) over real
sockets: the dump's packets written into one end of a socket pair, the frames read back
from a shared-memory-like ring or from the tcp transport's messages. Both twins must leave
the same bytes (stamps aside), the same producer bookkeeping, and stop at the same place."""

from __future__ import annotations

import ctypes
import os
import select
import socket
import struct
import sys
import threading
import time

import pytest

from bridge.errors import TransportError
from bridge.node.counters import PrimaryCounts
from bridge.ops.metrics import STAGES, Stages
from bridge.ring.consumer import RingConsumer
from bridge.ring.layout import WAITING_AT, init_region, region_bytes
from bridge.ring.producer import RingProducer
from bridge.source import lanes, ship
from bridge.wire import placement
from bridge.wire.codec import decode_transaction
from bridge.wire.frame import HEADER_BYTES
from tests.binlog_packets import MYSQL_UUID
from tests.binlog_packets import binlog_transaction as _txn
from tests.binlog_packets import dump_packets as _packets

try:
    from bridge.source import _ship as compiled
except ImportError:
    compiled = None
MODULES = [ship] + ([compiled] if compiled is not None else [])
HEARTBEAT = ("rdma_bridge", "heartbeat")
SIZE = 4096


def test_the_build_made_the_compiled_lane_with_the_twins_names():
    assert compiled is not None, "pip install did not build bridge/source/_ship.pyx"
    assert lanes.COMPILED is not (os.environ.get("RDMA_BRIDGE_PURE_PYTHON", "") not in ("", "0"))
    for name in ("DumpReader", "ShipLane", "DUMP_BUFFER", "RUN_TXNS", "IDLE", "NOT_MINE"):
        assert hasattr(compiled, name) and hasattr(ship, name), name
    assert (compiled.DUMP_BUFFER, compiled.RUN_TXNS, compiled.IDLE, compiled.NOT_MINE) == \
        (ship.DUMP_BUFFER, ship.RUN_TXNS, ship.IDLE, ship.NOT_MINE)


class Setup:
    """One lane of ``module`` over a socket pair: ``feed`` writes dump packets; the ring is
    a bytearray (shm) or, with ``tcp``, is built from the messages the lane sends."""

    def __init__(self, module, tcp: bool = False, head: int = 0, used: int = 0, doorbell: int = -1, rings=()):
        self.dump, self.server = socket.socketpair()
        self.reader = module.DumpReader(self.dump)
        self.producer = RingProducer(SIZE, next_seq=10, head=head, epoch=3)
        self.producer.used = used
        self.tail = head  # where the consumer starts
        self.ring = bytearray(region_bytes(SIZE))
        init_region(self.ring, SIZE)
        self.data = socket.socketpair() if tcp else None
        self.counts = PrimaryCounts()
        self.lane = module.ShipLane(self.reader, self.producer, None if tcp else self.ring, doorbell, HEARTBEAT,
                                    1 << 20, self.data[0] if tcp else None, self.counts, rings)

    def feed(self, data: bytes) -> None:
        self.server.sendall(data)

    def run(self, seq_id: int = 0, wait_ms: int = 20, file: bytes | None = None) -> int:
        got = self.lane.run(seq_id, wait_ms, None, 0, file)
        if self.data is not None:
            self._carry_out()
        return got

    def _carry_out(self) -> None:
        """What the tcp receiver does with the messages (bridge.transport.receiver)."""
        self.data[1].setblocking(False)
        buf = bytearray()
        try:
            while chunk := self.data[1].recv(1 << 16):
                buf += chunk
        except BlockingIOError:
            pass
        at = 0
        while at < len(buf):
            op, offset, length, body = placement.parse_head(bytes(buf[at:at + placement.HEAD.size]), len(self.ring))
            at += placement.HEAD.size
            if op == placement.Op.WRITE:
                self.ring[offset:offset + length] = buf[at:at + length]
            else:
                assert op == placement.Op.PUBLISH
                self.ring[24:28] = offset.to_bytes(4, "little")
                self.ring[8:16] = buf[at:at + 8]
            at += body

    def frames(self, first: int = 10):
        consumer = RingConsumer(memoryview(self.ring), expected_seq=first, tail=self.tail, epoch=3)
        got = []
        while (frame := consumer.poll()) is not None:
            got.append(frame)
        return got

    def close(self):
        for s in (self.dump, self.server, *(self.data or ())):
            s.close()


def _stamps_zeroed(ring: bytearray, producer: RingProducer) -> bytes:
    out = bytearray(ring)
    for _, _, offset, _, _, _ in producer._inflight:
        stamps = offset + HEADER_BYTES + 2 + out[offset + HEADER_BYTES + 1]
        out[stamps:stamps + 16] = bytes(16)
        out[offset + 16:offset + 20] = bytes(4)
    return bytes(out)


@pytest.mark.parametrize("relay", [False, True], ids=["compact", "verbatim"])
@pytest.mark.parametrize("mysql", [False, True], ids=["mariadb", "mysql"])
@pytest.mark.parametrize("tcp", [False, True], ids=["shm", "tcp"])
@pytest.mark.parametrize("head", [0, SIZE - 200, SIZE - 16], ids=["start", "pad", "implicit-wrap"])
def test_both_lanes_place_publish_and_stop_alike(tcp, head, mysql, relay):
    """Common transactions (one a heartbeat), then a DDL: both twins place the same frames,
    publish them, and stop at the DDL's first byte with its packet number (MariaDB's events
    and MySQL's). Relay apply mode (``file``): each frame the verbatim payload, the file and
    every event of the transaction byte for byte (its GTID event, MySQL's BEGIN, the XID)."""
    txns = [_txn(1, mysql=mysql), _txn(2, b"heartbeat", mysql=mysql), _txn(3, rows=5, mysql=mysql),
            _txn(4, flags=1, mysql=mysql), _txn(5, mysql=mysql)]
    gtids = [f"{MYSQL_UUID}:{i}" if mysql else f"0-1-{i}" for i in (1, 2, 3)]
    data, _ = _packets(txns)
    common, number = _packets(txns[:3])
    results = []
    for module in MODULES:
        setup = Setup(module, tcp=tcp, head=head)
        try:
            setup.feed(data)
            time.sleep(0.01)
            placed = setup.run(file=b"binlog.000042" if relay else None)
            frames = setup.frames()
            assert placed == 3 and setup.lane.why == ship.NOT_MINE
            assert setup.lane.seq_id == number and setup.reader.start == len(common)
            if relay:
                assert [(c.file, c.data, c.events) for c in (decode_transaction(f.payload).changes[0] for f in frames)] \
                    == [("binlog.000042", b"".join(txn), len(txn)) for txn in txns[:3]]
                with pytest.raises(ValueError, match="255 bytes at most"):
                    setup.run(file=bytes(256))
            assert setup.reader.read(len(data) - len(common)) == data[len(common):]  # the DDL on, for the event path
            assert [decode_transaction(f.payload).gtid for f in frames] == gtids
            assert (setup.lane.gtid, setup.lane.heartbeats, setup.lane.commit_position) == (gtids[-1], 1, 503)
            counts = setup.counts  # learnt as each publish happened
            assert (counts.transactions_shipped, counts.heartbeats_shipped, counts.taken_whole) == (2, 1, 3)
            assert setup.producer.next_seq == 13 and setup.producer.backlog_frames == 3
            assert [f.seq for f in setup.producer.unacked(9)] == [10, 11, 12]
            results.append((_stamps_zeroed(setup.ring, setup.producer), setup.producer.head, setup.producer.used,
                            [e[:4] for e in setup.producer._inflight]))
        finally:
            setup.close()
    assert all(r == results[0] for r in results)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_a_transaction_cut_between_reads_waits_then_ships_and_a_quiet_dump_returns_idle(module):
    setup = Setup(module)
    try:
        data, number = _packets([_txn(1, rows=3)])
        assert setup.run(wait_ms=30) == 0 and setup.lane.why == ship.IDLE
        setup.feed(data[:50])
        timer = threading.Timer(0.05, setup.feed, (data[50:],))
        timer.start()
        assert setup.run(wait_ms=2000) == 1  # waits in the lane for the rest, then returns idle after it
        timer.join()
        assert setup.lane.why == ship.IDLE and setup.lane.seq_id == number
        assert [decode_transaction(f.payload).gtid for f in setup.frames()] == ["0-1-1"]
    finally:
        setup.close()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_compiled_lane_counts_wakeups_that_waited_for_the_interpreter_lock(module):
    """The dump turns readable while another thread runs Python: the compiled lane, woken
    without the lock, waits for it (the switch interval, 20 ms here) and counts that. The
    bytes go out by a write that keeps the lock (ctypes.PyDLL), so the lane cannot take it
    in between."""
    setup, old = Setup(module), sys.getswitchinterval()
    try:
        data, _ = _packets([_txn(1)])
        write = ctypes.PyDLL(None).write

        def busy():
            assert write(setup.server.fileno(), data, len(data)) == len(data)
            end = time.perf_counter() + 0.06
            while time.perf_counter() < end:
                pass
        sys.setswitchinterval(0.02)
        timer = threading.Timer(0.2, busy)
        timer.start()
        assert setup.run(wait_ms=2000) == 1
        timer.join()
        if module is ship:  # the twin holds the lock throughout: nothing to count
            assert (setup.lane.gil_waits, setup.lane.gil_wait_max_ns) == (0, 0)
        else:
            assert setup.lane.gil_waits >= 1 and setup.lane.gil_wait_max_ns > 1_000_000
    finally:
        sys.setswitchinterval(old)
        setup.close()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_a_full_ring_and_the_end_of_the_stream_are_left_to_the_general_path(module):
    data, _ = _packets([_txn(1)])
    setup = Setup(module, used=SIZE - 64)  # no room: the general path waits for space
    try:
        setup.feed(data)
        assert setup.run() == 0 and setup.lane.why == ship.NOT_MINE and setup.reader.start == 0
    finally:
        setup.close()
    setup = Setup(module)
    try:
        setup.feed(data[:30])
        setup.server.close()
        assert setup.run(wait_ms=500) == 0 and setup.lane.why == ship.NOT_MINE
        assert setup.reader.read(100) == data[:30]  # what the general path then reads, short: the end
    finally:
        setup.close()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_doorbell_rings_only_for_a_sleeping_replica_and_a_gone_one_is_a_transport_error(module):
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    setup = Setup(module, doorbell=write_end)
    try:
        setup.feed(_packets([_txn(1)])[0])
        assert setup.run() == 1
        with pytest.raises(BlockingIOError):
            os.read(read_end, 10)  # awake: not rung
        setup.ring[WAITING_AT:WAITING_AT + 4] = (1).to_bytes(4, "little")
        setup.feed(_packets([_txn(2)], 4)[0])
        assert setup.run(seq_id=4) == 1 and os.read(read_end, 10) == b"\x01"
        os.close(read_end)
        setup.feed(_packets([_txn(3)], 8)[0])
        with pytest.raises(TransportError, match="doorbell"):
            setup.run(seq_id=8)
        assert setup.producer.next_seq == 13  # placed before the bell failed: kept for a resend
    finally:
        os.close(write_end)
        setup.close()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_dump_reader_reads_as_a_buffered_socket_file(module):
    a, b = socket.socketpair()
    try:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 50_000))
        reader = module.DumpReader(a, 64)
        quiet_since = reader.data_ns  # what the node's stall check reads: when bytes last came
        time.sleep(0.01)
        b.sendall(b"0123456789")
        assert reader.peek(1) == b"0123456789" and reader.read(4) == b"0123"
        assert reader.data_ns > quiet_since
        assert reader.read(3) == b"456" and reader.buffered == 3
        assert reader.read(5) == b"789"  # the receive timeout passed after these: what there is
        assert reader.read(5) is None and reader.peek() == b""  # nothing, after the timeout
        big = bytes(range(256)) * 2
        threading.Thread(target=b.sendall, args=(big,)).start()
        assert reader.read(len(big)) == big  # longer than the buffer
        b.sendall(b"xy")
        b.close()
        assert reader.read(5) == b"xy" and reader.read(5) == b""  # the end of the stream
    finally:
        a.close()


def test_without_the_compiled_lane_the_twin_runs_and_one_line_says_why():
    import subprocess
    import sys
    script = ("import sys, logging\n"
              "sys.modules['bridge.source._ship'] = None\n"
              "logging.basicConfig(format='%(levelname)s %(message)s')\n"
              "from bridge.source import lanes, ship\n"
              "assert lanes.ShipLane is ship.ShipLane and lanes.DumpReader is ship.DumpReader\n"
              "from bridge.wire import native\n"
              "native.announce(logging.getLogger('t'), [lanes.PART])\n")
    env = {k: v for k, v in os.environ.items() if k != "RDMA_BRIDGE_PURE_PYTHON"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("WARNING compiled core: ship lane in pure Python, slower (the "
                                                   "compiled module is not built"), out.stderr


def _semi_sync_packets(txns: list[list[bytes]], asks: set[int]) -> tuple[bytes, int]:
    """Dump packets with semi-sync headers; the last event of each transaction in ``asks``
    asks for an ACK (the packet numbers restart after it, as the primary's do)."""
    data, number = bytearray(), 0
    for i, events in enumerate(txns):
        for j, e in enumerate(events):
            flag = 1 if i in asks and j == len(events) - 1 else 0
            data += (len(e) + 3).to_bytes(3, "little") + bytes([number]) + b"\0\xef" + bytes([flag]) + e
            number = 1 if flag else (number + 1) % 256
    return bytes(data), number


ACK_502 = b"\xef" + (502).to_bytes(8, "little") + b"mariadb-bin.000007"  # the ACK of txn 2's XID (its end)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_semi_sync_a_transaction_that_asks_is_published_then_acknowledged_on_the_dump_connection(module):
    data, number = _semi_sync_packets([_txn(1), _txn(2), _txn(3)], {1})
    setup = Setup(module)
    try:
        setup.feed(data)
        assert setup.lane.run(0, 20, b"mariadb-bin.000007") == 3
        assert setup.lane.acks == 1 and setup.lane.ack_error == 0 and setup.lane.seq_id == number
        assert (setup.counts.acks_sent, setup.counts.transactions_shipped) == (1, 3)
        setup.server.settimeout(2)
        assert setup.server.recv(100) == len(ACK_502).to_bytes(3, "little") + b"\0" + ACK_502
        assert [decode_transaction(f.payload).gtid for f in setup.frames()] == ["0-1-1", "0-1-2", "0-1-3"]
        stages = Stages(STAGES["primary"])
        setup.lane.record_stages(stages)
        assert stages.summary(False)["place"]["count"] == 3  # one sample per transaction, by publish
        assert stages.summary(False)["ack"]["count"] == 1  # one per ACK sent
    finally:
        setup.close()


def _further_ring(next_seq: int, head: int, used: int, epoch: int):
    producer = RingProducer(SIZE, next_seq=next_seq, head=head, epoch=epoch)
    producer.used = used
    ring = bytearray(region_bytes(SIZE))
    init_region(ring, SIZE)
    return producer, ring


@pytest.mark.parametrize("head", [0, SIZE - 200], ids=["start", "pad"])
def test_both_lanes_feed_further_rings_alike_and_owe_what_one_has_no_space_for(head):
    """Fan-out: two further rings, each with its own seqs, head and epoch, get the same
    transactions; the second has space for two of them: the third is placed everywhere
    else, handed back as owed (its packets, their first number) and the call ends. Both
    twins leave the same bytes in every ring."""
    txns = [_txn(1), _txn(2, b"heartbeat"), _txn(3, rows=5), _txn(4)]
    data, _ = _packets(txns)
    two, number = _packets(txns[:2])
    three, _ = _packets(txns[:3])
    results = []
    for module in MODULES:
        first = _further_ring(100, head, 0, 7)
        second = _further_ring(5, 0, SIZE - 2 * 224, 9)
        setup = Setup(module, head=head, rings=[(*first, -1, None, None), (*second, -1, None, None)])
        try:
            setup.feed(data)
            time.sleep(0.01)
            assert setup.run() == 3 and setup.lane.why == ship.NOT_MINE
            assert [(i, packets, n) for i, packets, n in setup.lane.owed] == [(1, three[len(two):], number)]
            assert setup.reader.start == len(three) and setup.lane.gone == []
            assert [f.seq for f in setup.frames()] == [10, 11, 12]
            got = []
            for (producer, ring), seqs, tail in ((first, [100, 101, 102], head), (second, [5, 6], 0)):
                consumer = RingConsumer(memoryview(ring), expected_seq=seqs[0], tail=tail, epoch=producer.epoch)
                frames = []
                while (frame := consumer.poll()) is not None:
                    frames.append(frame)
                assert [f.seq for f in frames] == seqs
                assert [decode_transaction(f.payload).gtid for f in frames] == \
                    [decode_transaction(f.payload).gtid for f in setup.frames()][:len(seqs)]
                assert [f.seq for f in producer.unacked(seqs[0] - 1)] == seqs
                got.append((_stamps_zeroed(ring, producer), producer.head, producer.used))
            results.append(got)
        finally:
            setup.close()
    assert all(r == results[0] for r in results)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_a_further_ring_whose_doorbell_fails_is_named_gone_and_the_others_are_fed(module):
    read_end, write_end = os.pipe()
    other = _further_ring(1, 0, 0, 2)
    other[1][WAITING_AT:WAITING_AT + 4] = (1).to_bytes(4, "little")  # its replica side sleeps on the bell
    os.close(read_end)  # and is gone
    setup = Setup(module, rings=[(*other, write_end, None, None)])
    try:
        setup.feed(_packets([_txn(1), _txn(2)])[0])
        time.sleep(0.01)
        assert setup.run() == 2 and setup.lane.gone == [0]  # no exception: the first ring's side is fine
        assert [f.seq for f in setup.frames()] == [10, 11] and other[0].next_seq == 3
    finally:
        os.close(write_end)
        setup.close()


class Receiver(threading.Thread):
    """The tcp receiver's part for a lane that asks for answers: carries the messages out
    into ``setup.ring`` and answers each PUBLISH_ANSWER with ``answer(write_seq)`` (bytes
    sent as they are, after ``delay_s``), noting whether the primary already had an ACK."""

    def __init__(self, setup: Setup, answer, delay_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.setup, self.answer, self.delay_s = setup, answer, delay_s
        self.acked_before_answer: list[bool] = []
        self.start()

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.setup.data[1].recv(n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return bytes(out)

    def run(self) -> None:
        ring = self.setup.ring
        try:
            while True:
                op, offset, length, body = placement.parse_head(self._exact(placement.HEAD.size), len(ring))
                data = self._exact(body)
                if op == placement.Op.WRITE:
                    ring[offset:offset + length] = data
                    continue
                ring[24:28], ring[8:16] = offset.to_bytes(4, "little"), data
                if op == placement.Op.PUBLISH_ANSWER:
                    time.sleep(self.delay_s)
                    self.acked_before_answer.append(bool(select.select([self.setup.server], [], [], 0)[0]))
                    self.setup.data[1].sendall(self.answer(int.from_bytes(data, "little")))
        except (EOFError, OSError):
            return


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_semi_sync_over_tcp_the_ack_goes_once_the_replica_side_answers_that_it_holds_the_transaction(module):
    data, number = _semi_sync_packets([_txn(1), _txn(2), _txn(3)], {1})
    setup = Setup(module, tcp=True)
    receiver = Receiver(setup, lambda seq: placement.REPLY.pack(seq, 7), delay_s=0.05)
    try:
        setup.feed(data)
        assert setup.lane.run(0, 500, b"mariadb-bin.000007", 2_000_000) == 3
        assert setup.lane.acks == 1 and setup.lane.asked is None and setup.lane.seq_id == number
        assert (setup.counts.acks_sent, setup.counts.transactions_shipped) == (1, 3)
        assert (setup.lane.placed, setup.lane.applied) == (11, 7)  # txn 2 is seq 11: the answer read
        setup.server.settimeout(2)
        assert setup.server.recv(100) == len(ACK_502).to_bytes(3, "little") + b"\0" + ACK_502
        wait_until = time.monotonic() + 2
        while [f.seq for f in setup.frames()] != [10, 11, 12] and time.monotonic() < wait_until:
            time.sleep(0.01)
        assert [decode_transaction(f.payload).gtid for f in setup.frames()] == ["0-1-1", "0-1-2", "0-1-3"]
        assert receiver.acked_before_answer == [False]  # never before the replica side holds it
        stages = Stages(STAGES["primary"])
        setup.lane.record_stages(stages)
        ack = stages.summary(False)["ack"]
        assert ack["count"] == 1 and 50_000 <= ack["p50"] < 2_000_000  # the answer's round trip (50 ms late) in it
    finally:
        setup.close()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_semi_sync_over_tcp_an_answer_late_past_the_primarys_wait_is_handed_back_and_no_ack_goes(module):
    data, number = _semi_sync_packets([_txn(1), _txn(2)], {1})
    late = placement.REPLY.pack(11, 0)
    setup = Setup(module, tcp=True)
    receiver = Receiver(setup, lambda seq: late[:5])  # five bytes of it now, the rest never
    try:
        setup.feed(data + _packets([_txn(3)], number)[0])
        started = time.monotonic_ns()
        assert setup.lane.run(0, 500, b"mariadb-bin.000007", 30_000) == 2  # the primary waits 30 ms
        assert time.monotonic_ns() - started < 400_000_000  # it stopped at the primary's wait, not the run's
        seq, position, asked_ns = setup.lane.asked
        assert (seq, position, setup.lane.why, setup.lane.acks) == (11, 502, ship.NOT_MINE, 0)
        assert started <= asked_ns <= time.monotonic_ns() and setup.lane.seq_id == number
        assert bytes(setup.lane.reply) == late[:5] and setup.counts.acks_sent == 0
        assert not select.select([setup.server], [], [], 0.05)[0]  # no ACK: the primary hears nothing
        assert receiver.acked_before_answer == [False]
        stages = Stages(STAGES["primary"])
        setup.lane.record_stages(stages)
        assert stages.summary(False)["ack"]["count"] == 0
    finally:
        setup.close()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_semi_sync_over_tcp_an_answer_short_of_the_published_seq_is_a_transport_error(module):
    data, number = _semi_sync_packets([_txn(1), _txn(2)], {1})
    setup = Setup(module, tcp=True)
    Receiver(setup, lambda seq: placement.REPLY.pack(seq - 1, 0))
    try:
        setup.feed(data)
        with pytest.raises(TransportError, match="holds seq 10, after seq 11 was published"):
            setup.lane.run(0, 500, b"mariadb-bin.000007", 2_000_000)
        assert setup.lane.seq_id == number and setup.counts.acks_sent == 0  # the packets read stay read
        assert not select.select([setup.server], [], [], 0.05)[0]
    finally:
        setup.close()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("quorum", [2, 3])
def test_fan_out_semi_sync_acknowledges_once_the_quorums_rings_hold_the_transaction(module, quorum):
    """Two further rings; the second has no space for the transaction that asks: the first
    ring and the first further one hold it. A quorum of 2 gets the ACK from the lane, one
    of 3 gets the request handed back and no ACK."""
    data, _ = _semi_sync_packets([_txn(1), _txn(2, b"heartbeat"), _txn(3, rows=5)], {2})
    first, second = _further_ring(100, 0, 0, 7), _further_ring(5, 0, SIZE - 2 * 224, 9)
    setup = Setup(module, rings=[(*first, -1, None, None), (*second, -1, None, None)])
    setup.lane.quorum = quorum
    try:
        setup.feed(data)
        assert setup.lane.run(0, 20, b"mariadb-bin.000007") == 3
        assert [i for i, _, _ in setup.lane.owed] == [1] and setup.lane.why == ship.NOT_MINE
        assert (first[0].write_seq, second[0].write_seq) == (102, 6)
        setup.server.settimeout(0.2)
        if quorum == 2:
            ack = b"\xef" + (503).to_bytes(8, "little") + b"mariadb-bin.000007"
            assert setup.lane.asked is None and (setup.lane.acks, setup.counts.acks_sent) == (1, 1)
            assert setup.server.recv(100) == len(ack).to_bytes(3, "little") + b"\0" + ack
        else:
            assert setup.lane.asked[:2] == (12, 503) and (setup.lane.acks, setup.counts.acks_sent) == (0, 0)
            with pytest.raises(socket.timeout):
                setup.server.recv(100)
    finally:
        setup.close()


class TcpRing:
    """A further tcp ring: its producer, the ring its receiver builds from the lane's
    messages (a ``Setup``-like view for ``Receiver``), and the primary's end of the data
    connection the lane sends on."""

    def __init__(self, next_seq: int, epoch: int, head: int = 0) -> None:
        self.producer, self.ring = _further_ring(next_seq, head, 0, epoch)
        self.head = head
        self.data = socket.socketpair()
        self.server = None  # the dump's peer, set by ``attach``

    def entry(self):
        return (self.producer, None, -1, self.data[0], None)

    def attach(self, setup: Setup) -> TcpRing:
        self.server = setup.server
        return self

    def frames(self, first: int):
        consumer = RingConsumer(memoryview(self.ring), expected_seq=first, tail=self.head, epoch=self.producer.epoch)
        got = []
        while (frame := consumer.poll()) is not None:
            got.append(frame)
        return got

    def close(self):
        for s in self.data:
            s.close()


def _wait_frames(source, first: int, n: int) -> list:
    deadline = time.monotonic() + 2
    while len(frames := source.frames(first)) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return frames


@pytest.mark.parametrize("head", [0, SIZE - 200], ids=["start", "pad"])
def test_both_lanes_feed_further_tcp_rings_alike(head):
    """Fan-out over tcp: two further rings, each its own data connection, seqs and epoch,
    get the same transactions as WRITE and PUBLISH messages (wrapped at the ring's end
    too); both twins leave the same bytes in every ring their receivers build."""
    txns = [_txn(1), _txn(2, b"heartbeat"), _txn(3, rows=5), _txn(4)]
    data, number = _packets(txns)
    results = []
    for module in MODULES:
        further = [TcpRing(100, 7, head), TcpRing(5, 9, SIZE - 16)]
        setup = Setup(module, tcp=True, head=head, rings=[f.entry() for f in further])
        receivers = [Receiver(setup, lambda seq: b"")] + [Receiver(f.attach(setup), lambda seq: b"") for f in further]
        try:
            setup.feed(data)
            time.sleep(0.01)
            assert setup.lane.run(0, 20) == 4 and setup.lane.seq_id == number
            assert setup.lane.owed == [] and setup.lane.gone == []
            gtids = [decode_transaction(f.payload).gtid for f in _wait_frames(setup, 10, 4)]
            assert gtids == ["0-1-1", "0-1-2", "0-1-3", "0-1-4"]
            got = [_stamps_zeroed(setup.ring, setup.producer)]
            for f, first in zip(further, (100, 5)):
                frames = _wait_frames(f, first, 4)
                assert [decode_transaction(x.payload).gtid for x in frames] == gtids
                assert [x.seq for x in f.producer.unacked(first - 1)] == list(range(first, first + 4))
                got.append((_stamps_zeroed(f.ring, f.producer), f.producer.head, f.producer.used))
            results.append(got)
            assert all(r.acked_before_answer == [] for r in receivers)  # semi-sync off: no answer asked
        finally:
            setup.close()
            for f in further:
                f.close()
    assert all(r == results[0] for r in results)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("quorum", [2, 3])
def test_fan_out_over_tcp_acknowledges_once_the_quorums_replica_sides_answer(module, quorum):
    """Three tcp rings; the second further ring's replica side never answers. A quorum of
    2 gets the ACK from the lane once the first two answered (the silent one's answer
    stays asked for and is handed out); a quorum of 3 gets the request handed back once
    the primary's wait is over, and no ACK."""
    data, number = _semi_sync_packets([_txn(1), _txn(2), _txn(3)], {1})
    further = [TcpRing(100, 7), TcpRing(5, 9)]
    setup = Setup(module, tcp=True, rings=[f.entry() for f in further])
    setup.lane.quorum = quorum
    receivers = [Receiver(setup, lambda seq: placement.REPLY.pack(seq, 0), delay_s=0.02),
                 Receiver(further[0].attach(setup), lambda seq: placement.REPLY.pack(seq, 0)),
                 Receiver(further[1].attach(setup), lambda seq: b"")]
    try:
        setup.feed(data)
        started = time.monotonic_ns()
        got = setup.lane.run(0, 500, b"mariadb-bin.000007", 50_000)
        setup.server.settimeout(0.2)
        if quorum == 2:
            assert got == 3 and setup.lane.asked is None and (setup.lane.acks, setup.counts.acks_sent) == (1, 1)
            assert setup.server.recv(100) == len(ACK_502).to_bytes(3, "little") + b"\0" + ACK_502
            assert receivers[0].acked_before_answer == [False]  # the first ring answered (20 ms late) first
        else:
            assert got == 2 and setup.lane.why == ship.NOT_MINE
            assert setup.lane.asked[:2] == (11, 502) and (setup.lane.acks, setup.counts.acks_sent) == (0, 0)
            assert time.monotonic_ns() - started < 400_000_000  # it stopped at the primary's 50 ms, not the run's
            with pytest.raises(socket.timeout):
                setup.server.recv(100)
        assert setup.lane.answers_out(0)[0:3:2] == (0, 11) and setup.lane.answers_out(1)[0] == 0
        asked, partial, asked_seq, placed, _ = setup.lane.answers_out(2)
        assert (asked, partial, asked_seq, placed) == (1, b"", 6, 0)  # the silent one's: the caller's now
        assert setup.lane.answers_out(2)[0] == 0  # handed out once
        assert [f.seq for f in _wait_frames(further[1], 5, 2)][:2] == [5, 6]  # it holds them, it just never said
    finally:
        setup.close()
        for f in further:
            f.close()


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_fan_out_over_tcp_a_further_connection_that_fails_is_gone_and_answers_handed_in_are_read(module):
    """The first further ring's replica side closes its connection: named gone, fed no more,
    the others go on; the first ring had an answer asked for before the run (handed in with
    half its bytes read): the lane reads the rest of it and then its own."""
    data, number = _semi_sync_packets([_txn(1), _txn(2)], {1})
    further = [TcpRing(100, 7), TcpRing(5, 9)]
    setup = Setup(module, tcp=True, rings=[f.entry() for f in further])
    setup.lane.quorum = 2
    old = placement.REPLY.pack(9, 4)
    setup.lane.answers_in(0, 1, old[:6], 9)
    setup.data[1].sendall(old[6:])  # the rest of the answer asked for before the run
    further[0].data[1].close()
    Receiver(setup, lambda seq: placement.REPLY.pack(seq, 0))
    Receiver(further[1].attach(setup), lambda seq: placement.REPLY.pack(seq, 0))
    try:
        setup.feed(data)
        assert setup.lane.run(0, 500, b"mariadb-bin.000007", 2_000_000) == 2
        assert setup.lane.gone == [0] and setup.lane.acks == 1 and setup.lane.asked is None
        assert (setup.lane.placed, setup.lane.applied) == (11, 4)  # both answers read: the old one's applied kept
        assert setup.lane.answers_out(0)[:2] == (0, b"")
        assert [f.seq for f in _wait_frames(further[1], 5, 2)] == [5, 6]
    finally:
        setup.close()
        for f in further:
            f.close()
