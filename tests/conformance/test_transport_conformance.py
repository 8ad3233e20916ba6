"""One conformance suite for every one-sided transport: the replica's ring as
remote memory, and the hooks the compiled lanes use it through (bridge.transport.base).
Real shared memory and real sockets; no database needed."""

import random
import select
import socket
import threading
import time

import pytest

from bridge.apply.binlog import build
from bridge.apply.lane import lane as lane_twin
from bridge.config import MysqlUrl, PrimaryConfig
from bridge.errors import RingFull, TransportError
from bridge.model import HEARTBEAT_TABLE, GtidSet
from bridge.node.link import Link
from bridge.node.member import Member
from bridge.ring.consumer import RingConsumer
from bridge.ring.layout import WRITE_SEQ_AT, consumer_waiting, read_u64, set_waiting
from bridge.ring.producer import RingProducer
from bridge.source import ship as ship_twin
from bridge.transport import make_host, open_remote, rdma_available, receiver
from bridge.transport.base import LaneTarget
from bridge.transport.doorbell import drain, wait_for_doorbell
from bridge.transport.sockets import ControlConnection
from bridge.wire import control
from bridge.wire.codec import decode_transaction
from bridge.wire.frame import FrameKind, frame_bytes
from tests.binlog_packets import binlog_transaction, dump_packets
from tests.unit.test_lane import fmt, make, tcp_pair

try:
    from bridge.source import _ship as ship_compiled
except ImportError:
    ship_compiled = None
try:
    from bridge.apply.lane import _lane as lane_compiled
except ImportError:
    lane_compiled = None
try:
    from bridge.wire import _frames as frames_compiled
except ImportError:
    frames_compiled = None

RING = 1 << 16


class HostedRing:
    """The replica side of a transport, with a listener for tcp data connections."""

    def __init__(self, transport):
        self.transport = transport
        self.host = make_host(transport, RING)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = self.listener.getsockname()[:2]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            conn = ControlConnection(sock)
            conn.send(control.challenge())
            hello = conn.recv()  # the data hello (rdma: with the primary's queue pair)
            threading.Thread(target=self.host.accept, args=(conn, "", hello), daemon=True).start()

    def remote(self):
        return open_remote(self.transport, self.host.params(), self.addr, RING)

    def close(self):
        self.listener.close()
        self.host.close()


# rdma joins where a verbs device exists: `make test-rdma` runs this suite in a Soft-RoCE guest
TRANSPORTS = ["shm", "tcp"] + (["rdma"] if rdma_available() else [])


@pytest.fixture(params=TRANSPORTS)
def hosted(request):
    ring = HostedRing(request.param)
    yield ring
    ring.close()


def ship(producer, remote, payload, confirm=False):
    for p in producer.append(FrameKind.TXN, payload):
        remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
    remote.publish(producer.write_seq, producer.head, confirm)


def test_frames_written_remotely_arrive_in_order_across_wraps(hosted):
    remote, producer = hosted.remote(), RingProducer(RING)
    consumer = RingConsumer(hosted.host.region)
    payloads = [bytes([i % 256]) * (i * 37 % 9000) for i in range(200)]
    got = []
    for payload in payloads:
        while True:
            try:
                ship(producer, remote, payload)
                break
            except RingFull:  # let the consumer catch up
                remote.flush()
                while (f := consumer.poll()) is not None:
                    got.append(f.payload)
                    consumer.acknowledge(f.seq)
                producer.acknowledge(remote.read_ack())
    remote.flush()
    while (f := consumer.poll()) is not None:
        got.append(f.payload)
        consumer.acknowledge(f.seq)
    assert got == payloads
    assert remote.read_ack() == len(payloads)
    remote.close()


def test_flush_means_placed(hosted):
    remote, producer = hosted.remote(), RingProducer(RING)
    ship(producer, remote, b"placed")
    remote.flush()
    assert RingConsumer(hosted.host.region).poll().payload == b"placed"
    remote.close()


def _ship_a_lap(producer, remote, consumer):
    """Frames of random bytes until the ring has gone round once (the replica takes and
    acknowledges each): its whole data area then holds stale bytes of this session."""
    rng, placed = random.Random(7), 0
    while placed < RING + 4096:
        payload = rng.randbytes(rng.randrange(200, 3000))
        placed += frame_bytes(len(payload))
        ship(producer, remote, payload)
        remote.flush()
        frame = consumer.poll()
        assert frame is not None and frame.payload == payload
        consumer.acknowledge(frame.seq)
        producer.acknowledge(remote.read_ack())


@pytest.mark.parametrize("order", ["in order", "shuffled"])
def test_a_frame_placed_in_64_byte_pieces_is_taken_only_once_its_last_byte_landed(hosted, order):
    """Over stale bytes of an earlier lap, a frame written piece by piece is never taken
    early (its commit word is looked at first, its crc second) by either consumer twin,
    and is late, not corrupt, while write_seq covers it before its last piece lands (a
    NIC that places out of order)."""
    remote, producer = hosted.remote(), RingProducer(RING, epoch=3)
    consumer = RingConsumer(hosted.host.region, epoch=3, corrupt_grace_s=30)
    _ship_a_lap(producer, remote, consumer)
    payload = random.Random(8).randbytes(5000)
    (placed,) = producer.append(FrameKind.TXN, payload)
    pieces = [(at, min(64, placed.offset + placed.length - at))
              for at in range(placed.offset, placed.offset + placed.length, 64)]
    if order == "shuffled":
        random.Random(9).shuffle(pieces)
    seq, tail = producer.write_seq, consumer.tail
    for i, (at, n) in enumerate(pieces):
        if i == len(pieces) - 1:  # write_seq ahead of the last piece: the frame is late, not corrupt
            remote.publish(seq, producer.head)
            remote.flush()
            assert consumer.poll() is None
            assert _compiled_take(hosted.host.region, tail, seq) in (None, (None, True))
        remote.write(at, producer.region[at:at + n])
        remote.flush()
        if i < len(pieces) - 1:
            assert consumer.poll() is None, f"taken with {len(pieces) - 1 - i} of {len(pieces)} pieces missing"
            assert _compiled_take(hosted.host.region, tail, seq) in (None, (None, False))
    assert _compiled_take(hosted.host.region, tail, seq) in (None, ((tail, placed.length), True))
    assert consumer.poll().payload == payload
    remote.close()


def _compiled_take(region, tail, seq, epoch=3):
    """The compiled consumer's look (``ring_frame``, ``ring_ready``), None where it is not built."""
    return None if frames_compiled is None else frames_compiled.ring_take(region, tail, seq, epoch)


def test_ack_is_read_back_from_the_replica(hosted):
    remote, producer = hosted.remote(), RingProducer(RING)
    consumer = RingConsumer(hosted.host.region)
    for _ in range(3):
        ship(producer, remote, b"x")
    remote.flush()
    assert remote.read_ack() == 0
    acknowledge_all(consumer)
    assert remote.read_ack() == 3
    remote.close()


def acknowledge_all(consumer) -> None:
    """Every frame in the replica's ring read and acknowledged."""
    while (f := consumer.poll()) is not None:
        consumer.acknowledge(f.seq)


def wait_held(remote, seq, timeout_s=30.0):
    """Ask ``held`` until it covers ``seq`` (tcp: the answer travels back)."""
    deadline = time.monotonic() + timeout_s
    while (held := remote.held(seq)) < seq:
        assert time.monotonic() < deadline, f"held {held}, never {seq}"
        if remote.answers_fd is not None:
            select.select([remote.answers_fd], [], [], 0.1)
    return held


def test_held_never_claims_more_than_the_replica_ring_holds(hosted):
    """What the semi-sync ``received`` ACK relies on: every frame ``held`` covers is in the
    replica's ring for its consumer to take (over rdma before the header says so), and
    ``held`` covers each publish that asked for it."""
    remote, producer = hosted.remote(), RingProducer(RING)
    consumer = RingConsumer(hosted.host.region)
    for i in range(1, 41):
        ship(producer, remote, bytes(i * 50), confirm=i % 4 == 0)
        held = remote.held(i)
        if i % 4 == 0:
            held = wait_held(remote, i)
            assert held == i
        acknowledge_all(consumer)
        assert consumer.expected_seq - 1 >= held
    assert wait_held(remote, 40) == 40
    remote.close()


def test_last_ack_never_waits_and_catches_up(hosted):
    remote, producer = hosted.remote(), RingProducer(RING)
    consumer = RingConsumer(hosted.host.region)
    for _ in range(5):
        ship(producer, remote, b"x")
    remote.flush()
    acknowledge_all(consumer)
    deadline = time.monotonic() + 30
    while remote.last_ack() < 5:  # tcp: asks, and sees the answer on a later call
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert remote.read_ack() == 5
    remote.close()


def test_a_receiver_that_does_not_run_confirms_nothing():
    """tcp: placements sent while the replica side's receiver is stopped (a frozen
    process) are in socket buffers only: no answer, so ``held`` stays where it was;
    once the receiver runs, the answer covers them."""
    ring = HostedRing("tcp")
    running = threading.Event()
    serve = ring.host.serve
    ring.host.serve = lambda sock: (running.wait(), serve(sock))
    try:
        remote, producer = ring.remote(), RingProducer(RING)
        for _ in range(3):
            ship(producer, remote, b"waits in a socket buffer", confirm=True)
        time.sleep(0.2)
        assert remote.held(3) == 0
        assert read_u64(ring.host.region, WRITE_SEQ_AT) == 0
        running.set()
        assert wait_held(remote, 3) == 3
        remote.close()
    finally:
        running.set()
        ring.close()


def test_a_member_whose_data_connection_closed_covers_nothing_and_its_link_goes_down():
    """tcp, semi-sync `received`: the replica side closes the data connection (killed)
    with an answer asked for. The member then covers only its session's floor and its
    link is down with the reason, so the ACK wait that serves the other members of a
    fan-out goes on (the fan-out detaches this one alone); nothing raises into it."""
    ring, listener = HostedRing("tcp"), socket.create_server(("127.0.0.1", 0))
    control_end = socket.create_connection(listener.getsockname())  # the control connection, idle here
    peer = listener.accept()[0]
    listener.close()
    member = Member(ring.addr, PrimaryConfig(source=MysqlUrl.parse("mysql://u@127.0.0.1:1"), replica=ring.addr),
                    None, threading.Event())
    member.link = Link(ControlConnection(control_end), member.name, lambda state: None)
    try:
        remote, producer = ring.remote(), RingProducer(RING)
        member.link.remote = remote
        ship(producer, remote, b"held", confirm=True)
        assert wait_held(remote, 1) == 1 and member.covered(True, 1) == 1
        ring.host.fence()  # the replica side's end of the data connection shut, as a killed process's
        assert select.select([remote.answers_fd], [], [], 10)[0]
        ship(producer, remote, b"never answered")  # the first send after the peer closed still goes
        covered = [member.covered(True, 2) for _ in range(3)]  # asks for the answer, then reads the end
        assert member.link.down and "tcp transport" in member.link.reason
        assert covered[-1] == member.ack_floor == 0 and max(covered) <= 1
    finally:
        member.link.close()
        peer.close()
        ring.close()


def test_a_fenced_writer_never_reaches_the_new_sessions_ring(hosted):
    """A new session gets fresh memory: what the writer of the earlier one still sends
    (it may not even know it was fenced: one-sided writes) lands nowhere the consumer reads."""
    stale = hosted.remote()
    ship(RingProducer(RING), stale, b"old", confirm=True)
    assert wait_held(stale, 1) == 1
    hosted.host.fence()
    consumer = RingConsumer(hosted.host.region)
    assert consumer.poll() is None
    try:
        producer = RingProducer(RING, next_seq=2)
        for _ in range(3):
            ship(producer, stale, b"stale", confirm=True)
        stale.flush()
        held_after = stale.held(producer.write_seq)
    except TransportError:
        held_after = None  # tcp and rdma cut the stale writer off; shm finds its ring retired
    assert held_after is None or held_after < 2, "a fenced writer was told a ring holds its later frames"
    assert consumer.poll() is None
    fresh, producer = hosted.remote(), RingProducer(RING)
    ship(producer, fresh, b"new")
    fresh.flush()
    assert consumer.poll().payload == b"new"
    for remote in (stale, fresh):
        try:
            remote.close()
        except TransportError:
            pass


def test_unreachable_replica_is_a_transport_error_naming_it():
    with pytest.raises(TransportError, match="does-not-exist|127.0.0.1:1"):
        open_remote("tcp", {}, ("127.0.0.1", 1), RING)
    with pytest.raises(TransportError, match="unexpected path"):
        open_remote("shm", {"path": "/etc/passwd"}, ("127.0.0.1", 1), RING)



# --- doorbell: an idle replica sleeps until the primary rings (shm: FIFO, tcp: eventfd) ---

DOORBELL_TRANSPORTS = ["shm", "tcp"]  # rdma has none: a one-sided write wakes nobody


@pytest.fixture(params=DOORBELL_TRANSPORTS)
def belled(request):
    ring = HostedRing(request.param)
    yield ring
    ring.close()


def _rung(fd) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_publish_rings_only_while_the_consumer_waits(belled):
    remote, producer = belled.remote(), RingProducer(RING)
    region, fd = belled.host.region, belled.host.doorbell_fd
    ship(producer, remote, b"busy consumer")
    remote.flush()  # tcp: the receiver thread has carried out the publish
    assert not _rung(fd), "rang although nobody waited: a syscall per frame during bursts"
    set_waiting(region, True)
    ship(producer, remote, b"sleeping consumer")
    remote.flush()
    assert _rung(fd)
    drain(fd)
    assert not _rung(fd)
    set_waiting(region, False)
    remote.close()


def test_a_sleeping_consumer_is_woken_by_the_next_frame(belled):
    remote, producer = belled.remote(), RingProducer(RING)
    consumer = RingConsumer(belled.host.region)
    woke = threading.Event()

    def sleeper():
        wait_for_doorbell(belled.host.region, belled.host.doorbell_fd, lambda: consumer.published, timeout_s=60)
        woke.set()

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    while not consumer_waiting(belled.host.region):
        time.sleep(0.001)
    ship(producer, remote, b"wake up")
    assert woke.wait(30), "the consumer slept through the doorbell"
    assert not consumer_waiting(belled.host.region)
    assert consumer.poll().payload == b"wake up"
    remote.close()


def test_wait_returns_at_once_when_a_frame_came_while_the_flag_went_up(belled):
    remote, producer = belled.remote(), RingProducer(RING)
    consumer = RingConsumer(belled.host.region)
    ship(producer, remote, b"already there")  # published before the consumer raised its flag: no ring
    remote.flush()
    assert not _rung(belled.host.doorbell_fd)
    done = threading.Event()
    threading.Thread(target=lambda: (wait_for_doorbell(belled.host.region, belled.host.doorbell_fd,
                                                       lambda: consumer.published, timeout_s=600), done.set()),
                     daemon=True).start()
    assert done.wait(30), "waited for a doorbell although a frame was published"
    remote.close()


def test_shm_without_its_doorbell_or_with_a_foreign_one_is_refused():
    ring = HostedRing("shm")
    try:
        params = {k: v for k, v in ring.host.params().items() if k != "doorbell"}
        with pytest.raises(TransportError, match="unexpected doorbell ''"):
            open_remote("shm", params, ring.addr, RING)
        with pytest.raises(TransportError, match="unexpected doorbell"):
            open_remote("shm", {**params, "doorbell": "/tmp/some-fifo"}, ring.addr, RING)
        remote = open_remote("shm", ring.host.params(), ring.addr, RING)  # the ring's own: it places and rings
        set_waiting(ring.host.region, True)
        ship(RingProducer(RING), remote, b"rung")
        assert RingConsumer(ring.host.region).poll().payload == b"rung"
        assert _rung(ring.host.doorbell_fd)
        remote.close()
    finally:
        ring.close()


def test_a_doorbell_whose_replica_is_gone_is_a_transport_error():
    """kill -9 of a sleeping replica: the next publish must take the usual resume
    path (TransportError), not crash the primary side."""
    ring = HostedRing("shm")
    remote = ring.remote()
    set_waiting(ring.host.region, True)  # it died asleep
    ring.host.doorbell.close()  # its end of the FIFO goes with it
    with pytest.raises(TransportError, match="doorbell"):
        ship(RingProducer(RING), remote, b"nobody reads this")
    remote.close()
    ring.close()


# --- rdma: an idle replica side sleeps on its queue pair's completion channel -------------


@pytest.fixture
def sleeping_rdma():
    if "rdma" not in TRANSPORTS:
        pytest.skip("no RDMA device here: `make test-rdma` runs this in a Soft-RoCE guest")
    from bridge.transport import rdma

    if not rdma.COMPILED:
        pytest.skip("pyverbs' queue pair gives no completion channel to sleep on: the replica side polls")
    ring = HostedRing("rdma")
    yield ring
    ring.close()


LANE_MODULES = [lane_twin] + ([lane_compiled] if lane_compiled is not None else [])


def _sleep_in_thread(host, consumer, timeout_s=60.0) -> threading.Event:
    woke = threading.Event()
    threading.Thread(target=lambda: (host.sleep(lambda: consumer.published, timeout_s), woke.set()),
                     daemon=True).start()
    return woke


def test_an_idle_rdma_replica_sleeps_until_a_publish_wakes_it_and_a_busy_one_sees_plain_writes(sleeping_rdma):
    host = sleeping_rdma.host
    remote, producer, consumer = sleeping_rdma.remote(), RingProducer(RING), RingConsumer(host.region)
    for n in range(20):  # nobody sleeps: plain writes, no receive consumed
        ship(producer, remote, b"busy %d" % n)
    assert [f.payload for f in iter(consumer.poll, None)] == [b"busy %d" % n for n in range(20)]
    woke = _sleep_in_thread(host, consumer)
    deadline = time.monotonic() + 30
    while not consumer_waiting(remote.mirror) and time.monotonic() < deadline:
        time.sleep(0.001)  # its waiting word reaches the primary side's mirror
    assert consumer_waiting(remote.mirror) and not woke.is_set()
    ship(producer, remote, b"wake up")
    assert woke.wait(30), "the replica side slept through the write with immediate data"
    assert not consumer_waiting(remote.mirror)  # cleared by the primary side as it woke it
    assert consumer.poll().payload == b"wake up"
    for n in range(5):  # busy again before it says it sleeps: no wakeup for these
        ship(producer, remote, b"after %d" % n)
    assert host.sleep(lambda: True)  # work waits: it takes what arrived and returns
    assert host.wakeups == 1  # the one publish made while it slept, not the twenty before nor the five after
    remote.close()


def test_an_rdma_replica_does_not_sleep_past_a_frame_published_while_its_flag_went_up(sleeping_rdma):
    host = sleeping_rdma.host
    remote, producer, consumer = sleeping_rdma.remote(), RingProducer(RING), RingConsumer(host.region)
    ship(producer, remote, b"already there")
    assert _sleep_in_thread(host, consumer, timeout_s=600).wait(30), "slept although a frame was published"
    assert host.wakeups == 0
    remote.close()


def test_an_rdma_replica_asleep_wakes_at_once_when_interrupted(sleeping_rdma):
    """A stop, a new session or a close cut the sleep short (``interrupt``): the node's stop
    is seen at once, not at the end of the sleep."""
    host = sleeping_rdma.host
    remote, consumer = sleeping_rdma.remote(), RingConsumer(host.region)
    woke = _sleep_in_thread(host, consumer, timeout_s=600)
    deadline = time.monotonic() + 30
    while not consumer_waiting(remote.mirror) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert consumer_waiting(remote.mirror) and not woke.is_set()
    host.interrupt()
    assert woke.wait(30), "an interrupt did not cut the sleep short"
    assert host.wakeups == 0  # no write with immediate data woke it
    remote.close()


@pytest.mark.parametrize("lane_module", LANE_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_an_idle_apply_lane_sleeps_on_the_rdma_queue_pair_until_a_publish_wakes_it(sleeping_rdma, lane_module):
    """The apply lane (both twins) sleeps through the session's queue pair, as it does on the
    doorbell over shm and tcp: it announces itself in the primary side's mirror, and the
    next publish wakes it with one write with immediate data; a frame that is not the
    lane's ends its run (the general path takes it)."""
    host = sleeping_rdma.host
    remote, producer = sleeping_rdma.remote(), RingProducer(RING)
    lane = make(lane_module.Lane, build.PositionTable(255, 6), fmt(False))
    lane.set_position(0, GtidSet.parse("0-1-5"))
    client, server = tcp_pair()
    ran: list[int] = []
    sleeper = host.lane_sleeper()
    assert sleeper is not None, "the compiled queue pair of a session whose mirror is known can sleep"
    thread = threading.Thread(target=lambda: ran.append(lane.run(
        host.region, 0, 1, 0, client, 100, 100, 1 << 20, 1 << 20, -1, 600_000, None, sleeper)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not consumer_waiting(remote.mirror) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert consumer_waiting(remote.mirror) and thread.is_alive()
    ship(producer, remote, b"not the lane's")  # wakes it; not a transaction the lane applies
    thread.join(30)
    assert ran == [0], "the lane slept through the write with immediate data"
    assert host.wakeups == 1 and not consumer_waiting(remote.mirror)
    assert RingConsumer(host.region).poll().payload == b"not the lane's"  # left to the general path
    for s in (client, server):
        s.close()
    remote.close()


# --- the compiled lanes' hooks (bridge.transport.base): every transport declares them -----

SHIP_MODULES = [ship_twin] + ([ship_compiled] if ship_compiled is not None else [])


def test_each_transport_names_its_lane_target_or_none(hosted):
    remote = hosted.remote()
    target = remote.lane_target()
    assert isinstance(target, LaneTarget) and target.confirms
    assert (target.remote is not None, target.sock is not None, target.verbs is not None) == \
        (hosted.transport in ("shm", "rdma"), hosted.transport == "tcp", hosted.transport == "rdma")
    assert (target.doorbell >= 0) == (hosted.transport == "shm")
    if hosted.transport == "rdma":  # the registered mirror, with the replica's ring's layout
        assert len(target.remote) == len(hosted.host.region)
    remote.close()


@pytest.mark.parametrize("module", SHIP_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_a_ship_lane_writing_through_the_lane_target_places_what_the_consumer_reads(hosted, module):
    remote, producer = hosted.remote(), RingProducer(RING)
    target = remote.lane_target()
    if target.verbs is not None and module is ship_compiled and target.verbs.lane_path is None:
        remote.close()
        pytest.skip("pyverbs' queue pair (RDMA_BRIDGE_PURE_PYTHON): the compiled lane posts on the compiled one only")
    dump, primary = socket.socketpair()
    packets, _ = dump_packets([binlog_transaction(seq) for seq in range(1, 31)])
    primary.sendall(packets)
    lane = module.ShipLane(module.DumpReader(dump), producer, target.remote, target.doorbell, HEARTBEAT_TABLE,
                           1 << 20, target.sock, verbs=target.verbs)
    placed, deadline = 0, time.monotonic() + 30
    while placed < 30 and time.monotonic() < deadline:
        placed += lane.run(lane.seq_id, 50)
    remote.lane_published(producer.write_seq)
    consumer, got = RingConsumer(hosted.host.region), []
    while len(got) < 30 and time.monotonic() < deadline:  # tcp: the receiver thread carries the messages out
        got += [decode_transaction(f.payload).gtid for f in iter(consumer.poll, None)]
    assert placed == 30 and got == [f"0-1-{seq}" for seq in range(1, 31)]
    assert wait_held(remote, 30) == 30  # the general path goes on from where the lane left the ring
    for s in (dump, primary):
        s.close()
    remote.close()


def test_answers_asked_for_are_handed_to_a_lane_and_back_whole(hosted):
    """The answers a publish asked for travel to a ship lane for its run and back, so none
    is lost or read twice (tcp; the replica side's receiver held back until they are handed
    over, so the answer cannot be read here first); the others have none to hand over."""
    if hosted.transport == "tcp":
        running = threading.Event()
        serve = hosted.host.serve
        hosted.host.serve = lambda sock: (running.wait(), serve(sock))
    remote, producer = hosted.remote(), RingProducer(RING)
    try:
        ship(producer, remote, b"asks", confirm=True)
        handed = remote.answers_to_lane()
        if hosted.transport == "tcp":
            assert handed == (1, b"", 1)
            running.set()
        else:
            assert handed == (0, b"", 0)
        remote.answers_from_lane(*handed, 0, 0)  # the lane read none of them
        assert wait_held(remote, 1) == 1  # read here, once
    finally:
        if hosted.transport == "tcp":
            running.set()
    remote.close()


def test_only_a_tcp_host_lends_its_data_connection_to_an_apply_lane(hosted):
    remote, producer = hosted.remote(), RingProducer(RING)
    ship(producer, remote, b"connected")
    remote.flush()
    lent = hosted.host.lane_receiver(hosted.host.region)
    if hosted.transport == "tcp" and receiver.COMPILED:
        assert lent is not None and lent.region is hosted.host.region and not lent.ended
        assert hosted.host.lane_receiver(memoryview(bytearray(RING))) is None  # another session's ring
    else:
        assert lent is None  # shm and rdma writes land by themselves; the twin receiver lends nothing
    remote.close()
