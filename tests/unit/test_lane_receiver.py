"""The compiled apply lane holding the tcp data connection (bridge/transport/_placements.pxi):
while a run holds it, the lane carries out the placements itself (no doorbell rung, the
receiver thread parked), answers an ANSWER while the replica server is still busy, gives
the connection back when it returns (the thread serves it again), hands over only between
messages, and never holds a connection that ended. Real TCP sockets, a real ring, a peer
that answers like the replica server."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from bridge.apply.binlog import build
from bridge.model import GtidSet, RowEvents, Transaction
from bridge.ring.layout import ACK_SEQ_AT, WAITING_AT, WRITE_SEQ_AT, init_region, read_u64, region_bytes
from bridge.ring.producer import RingProducer
from bridge.transport import receiver
from bridge.transport.doorbell import Doorbell
from bridge.wire import placement
from bridge.wire.codec import encode_transaction
from bridge.wire.frame import FrameKind
from tests.unit.test_lane import OK, fmt, make, tcp_pair

try:
    from bridge.apply.lane import _lane
    from bridge.transport import _receiver
except ImportError:
    _lane = _receiver = None

pytestmark = pytest.mark.skipif(_lane is None or _receiver is None, reason="the compiled modules are not built")
RING = 1 << 16
ROWS = RowEvents(b"\x01" * 40, (("app", "t"),), 1)


class Setup:
    """A ring host's side (region, doorbell, a Receiver serving the data connection in
    its thread), the primary side's end of that connection, and a lane with a replica
    server peer on a connection of its own."""

    def __init__(self, ring: int = RING):
        self.region = memoryview(bytearray(region_bytes(ring)))
        init_region(self.region, ring)
        self.bell = Doorbell.eventfd()
        self.primary, conn = tcp_pair()
        self.conn = conn
        self.receiver = _receiver.Receiver(conn.fileno(), self.region, self.bell.fd)
        self.ended = []
        self.thread = threading.Thread(target=lambda: self.ended.append(self.receiver.serve()), daemon=True)
        self.thread.start()
        self.producer = RingProducer(ring, epoch=3)
        self.lane = make(_lane.Lane, build.PositionTable(255, 6), fmt(False))
        self.lane.set_position(0, GtidSet.parse("0-1-5"))
        self.client, self.server = tcp_pair()
        self.queries = 0

    def messages(self, n: int, answer: bool = False, rows: RowEvents = ROWS) -> bytes:
        """One transaction's placement messages, as the primary side's tcp transport sends them."""
        placed = self.producer.append(FrameKind.TXN, encode_transaction(Transaction(f"0-1-{n}", (rows,), (1, 2))))
        messages = b"".join(placement.encode_write(p.offset, self.producer.region[p.offset:p.offset + p.length])
                            for p in placed)
        return messages + placement.encode_publish(self.producer.write_seq, self.producer.head, answer)

    def send_txn(self, n: int, answer: bool = False) -> None:
        self.primary.sendall(self.messages(n, answer))

    def answer_queries(self, count: int, delay_s: float = 0.0) -> threading.Thread:
        """The replica server: reads ``count`` COM_QUERYs, answers each with two OKs after ``delay_s``."""
        def serve():
            for _ in range(count):
                header = self.server.recv(4, socket.MSG_WAITALL)
                length = int.from_bytes(header[:3], "little")
                self.server.recv(length, socket.MSG_WAITALL)
                time.sleep(delay_s)
                self.server.sendall(len(OK).to_bytes(3, "little") + b"\x01" + OK +
                                    len(OK).to_bytes(3, "little") + b"\x02" + OK)
                self.queries += 1
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        return thread

    def run(self, wait_ms: int, expected_seq: int = 1, tail: int = 0, doorbell: int = -1):
        return self.lane.run(self.region, tail, expected_seq, 3, self.client, 100, 100, 1 << 20, 1 << 20, doorbell,
                             wait_ms, self.receiver)

    def rung(self) -> int:
        try:
            return int.from_bytes(os.read(self.bell.fd, 8), "little")
        except BlockingIOError:
            return 0

    def close(self):
        self.primary.close()
        self.thread.join(5)
        for sock in (self.conn, self.client, self.server):
            sock.close()
        self.bell.close()


@pytest.fixture
def setup():
    s = Setup()
    yield s
    s.close()


def later(delay_s: float, fn, *args):
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), fn(*args)), daemon=True)
    thread.start()
    return thread


def test_while_the_lane_runs_it_carries_out_the_placements_itself(setup):
    peer = setup.answer_queries(2)
    later(0.05, setup.send_txn, 6)
    later(0.15, setup.send_txn, 7)
    assert setup.run(wait_ms=400) == 2
    peer.join(5)
    assert setup.lane.seq == 2 and setup.lane.gtids == "0-1-7" and read_u64(setup.region, ACK_SEQ_AT) == 2
    assert setup.rung() == 0  # the lane read them: nobody rang the doorbell, though the ring's consumer slept
    assert not setup.ended  # the receiver thread goes on


def test_an_answer_is_sent_while_the_replica_server_is_still_busy(setup):
    peer = setup.answer_queries(1, delay_s=0.5)
    later(0.02, setup.send_txn, 6)
    answered = []

    def ask():
        time.sleep(0.15)  # the lane waits on the replica server by now
        asked = time.monotonic()
        setup.primary.sendall(placement.ANSWER)
        reply = setup.primary.recv(16, socket.MSG_WAITALL)
        answered.append((time.monotonic() - asked, placement.REPLY.unpack(reply)))
    asker = threading.Thread(target=ask)
    asker.start()
    assert setup.run(wait_ms=300) == 1
    asker.join(5)
    peer.join(5)
    took, (placed, applied) = answered[0]
    assert (placed, applied) == (1, 0)  # held, not yet applied: the server had not answered
    assert took < 0.3, f"the answer waited {took:.3f}s for the replica server"


def test_the_connection_goes_back_to_the_receiver_thread_when_the_run_returns(setup):
    assert setup.run(wait_ms=50) == 0  # held it while it slept, gave it back
    setup.region[WAITING_AT:WAITING_AT + 4] = (1).to_bytes(4, "little")  # the general path sleeps on the doorbell
    setup.send_txn(6)
    deadline = time.monotonic() + 5
    while read_u64(setup.region, WRITE_SEQ_AT) < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert read_u64(setup.region, WRITE_SEQ_AT) == 1
    time.sleep(0.02)
    assert setup.rung() == 1  # the thread published it and rang


def test_the_thread_hands_over_only_between_messages(setup):
    message = setup.messages(6)
    setup.primary.sendall(message[:20])  # the thread is inside the first message, waiting for its rest
    time.sleep(0.05)
    started = time.monotonic()
    assert setup.run(wait_ms=100) == 0  # could not take it: slept on nothing, returned at its deadline
    assert time.monotonic() - started < 1
    peer = setup.answer_queries(1)
    setup.primary.sendall(message[20:])
    deadline = time.monotonic() + 5
    while read_u64(setup.region, WRITE_SEQ_AT) < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert setup.run(wait_ms=50) == 1  # the thread finished the message; the lane applies it
    peer.join(5)


def test_a_connection_that_ends_while_the_lane_holds_it_ends_the_thread_with_the_reason(setup):
    later(0.05, setup.primary.shutdown, socket.SHUT_WR)
    assert setup.run(wait_ms=200) == 0
    setup.thread.join(5)
    code, a, b, _ = setup.ended[0]
    assert code == receiver.ENDED_CLOSED and (a, b) == (0, placement.HEAD.size)
    assert setup.receiver.ended
    assert setup.run(wait_ms=20) == 0  # an ended connection is not taken again


def test_messages_cut_short_wait_in_the_buffer_while_the_lane_holds_the_connection(setup):
    message = setup.messages(6) + setup.messages(7)
    peer = setup.answer_queries(2)

    def dribble():
        time.sleep(0.05)
        for at in range(0, len(message), 7):  # a few bytes at a time: every message cut somewhere
            setup.primary.sendall(message[at:at + 7])
            time.sleep(0.001)
    threading.Thread(target=dribble, daemon=True).start()
    assert setup.run(wait_ms=600) == 2
    peer.join(5)
    assert setup.lane.gtids == "0-1-7" and setup.rung() == 0


def test_a_message_bigger_than_the_buffer_goes_to_the_receiver_thread():
    setup = Setup(ring=1 << 18)
    try:
        big = RowEvents(b"\x01" * 100_000, (("app", "t"),), 1)
        peer = setup.answer_queries(1)
        later(0.05, setup.primary.sendall, setup.messages(6, rows=big))
        started = time.monotonic()
        assert setup.run(wait_ms=2000) in (0, 1)  # gave the connection back at the big WRITE's head
        assert time.monotonic() - started < 1.5
        deadline = time.monotonic() + 5
        while read_u64(setup.region, WRITE_SEQ_AT) < 1 and time.monotonic() < deadline:
            time.sleep(0.005)  # the thread carries it out
        if setup.lane.seq == 0:
            assert setup.run(wait_ms=50) == 1
        peer.join(5)
        assert setup.lane.gtids == "0-1-6" and read_u64(setup.region, ACK_SEQ_AT) == 1
    finally:
        setup.close()


@pytest.mark.skipif(not receiver.COMPILED, reason="the twin was asked for (RDMA_BRIDGE_PURE_PYTHON)")
def test_a_plain_tcp_connection_is_served_by_the_compiled_loop_and_lent_while_it_runs():
    region = memoryview(bytearray(region_bytes(RING)))
    init_region(region, RING)
    bell = Doorbell.eventfd()
    primary, conn = tcp_pair()
    lent = []
    thread = threading.Thread(target=lambda: pytest.raises(Exception, receiver.serve, conn, region, bell, lent.append))
    thread.start()
    primary.sendall(placement.ANSWER)
    assert placement.REPLY.unpack(primary.recv(16, socket.MSG_WAITALL)) == (0, 0)
    primary.close()
    thread.join(5)
    assert type(lent[0]) is _receiver.Receiver and lent[0].region is region and lent[-1] is None
    conn.close()
    bell.close()
