"""One conformance suite for every one-sided transport: the replica's ring as
remote memory. Real shared memory and real sockets; no database needed."""

import select
import socket
import threading
import time

import pytest

from bridge.errors import RingFull, TransportError
from bridge.ring.consumer import RingConsumer
from bridge.ring.layout import consumer_waiting, set_waiting
from bridge.ring.producer import RingProducer
from bridge.transport import make_host, open_remote, rdma_available
from bridge.transport.doorbell import drain, wait_for_doorbell
from bridge.transport.sockets import ControlConnection
from bridge.wire import control
from bridge.wire.frame import FrameKind

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


def ship(producer, remote, payload):
    for p in producer.append(FrameKind.TXN, payload):
        remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
    remote.publish(producer.write_seq, producer.head)


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


def test_ack_is_read_back_from_the_replica(hosted):
    remote, producer = hosted.remote(), RingProducer(RING)
    consumer = RingConsumer(hosted.host.region)
    for _ in range(3):
        ship(producer, remote, b"x")
    remote.flush()
    assert remote.read_ack() == 0
    while (f := consumer.poll()) is not None:
        consumer.acknowledge(f.seq)
    assert remote.read_ack() == 3
    remote.close()


def test_a_fenced_writer_never_reaches_the_new_sessions_ring(hosted):
    """A new session gets fresh memory: what the writer of the earlier one still sends
    (it may not even know it was fenced: one-sided writes) lands nowhere the consumer reads."""
    stale = hosted.remote()
    ship(RingProducer(RING), stale, b"old")
    stale.flush()
    hosted.host.fence()
    consumer = RingConsumer(hosted.host.region)
    assert consumer.poll() is None
    try:
        for _ in range(3):
            ship(RingProducer(RING), stale, b"stale")
            stale.flush()
    except TransportError:
        pass  # tcp and rdma cut the stale writer off; shm lets it write into an unlinked ring
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


def test_shm_without_a_doorbell_still_places_and_a_foreign_doorbell_is_refused():
    ring = HostedRing("shm")
    try:
        params = {k: v for k, v in ring.host.params().items() if k != "doorbell"}  # an older replica
        remote = open_remote("shm", params, ring.addr, RING)
        set_waiting(ring.host.region, True)
        ship(RingProducer(RING), remote, b"no bell")
        assert RingConsumer(ring.host.region).poll().payload == b"no bell"
        assert not _rung(ring.host.doorbell_fd)
        remote.close()
        with pytest.raises(TransportError, match="unexpected doorbell"):
            open_remote("shm", {**params, "doorbell": "/tmp/some-fifo"}, ring.addr, RING)
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
