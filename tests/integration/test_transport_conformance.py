"""One conformance suite for every one-sided transport: the replica's ring as
remote memory. Real shared memory and real sockets; no database needed."""

import socket
import threading

import pytest

from bridge.errors import RingFull, TransportError
from bridge.ring.consumer import RingConsumer
from bridge.ring.producer import RingProducer
from bridge.transport import make_host, open_remote, rdma_available
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


def test_reset_starts_a_new_session_clean(hosted):
    remote = hosted.remote()
    ship(RingProducer(RING), remote, b"old")
    remote.flush()
    hosted.host.reset()
    assert RingConsumer(hosted.host.region).poll() is None
    remote.close()


def test_unreachable_replica_is_a_transport_error_naming_it():
    with pytest.raises(TransportError, match="does-not-exist|127.0.0.1:1"):
        open_remote("tcp", {}, ("127.0.0.1", 1), RING)
    with pytest.raises(TransportError, match="unexpected path"):
        open_remote("shm", {"path": "/etc/passwd"}, ("127.0.0.1", 1), RING)

