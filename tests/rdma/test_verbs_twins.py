"""The rdma transport's two queue pairs (bridge.transport.verbs over pyverbs, and the
compiled bridge.transport._verbs) place the same bytes: the same frames, a wrap of the
ring and a fan of publishes through each leave the replica's ring byte for byte equal;
an error completion (the queue pair moved to the error state) is the same RdmaError.
Run by `make test-rdma` in the Soft-RoCE guest; skipped where there is no verbs device."""

import pytest

from bridge.errors import RdmaError
from bridge.ring.consumer import RingConsumer
from bridge.ring.layout import WRITE_SEQ_AT, read_u64
from bridge.ring.producer import RingProducer
from bridge.transport import rdma_available
from bridge.wire.frame import FrameKind
from tests.conformance.test_transport_conformance import HostedRing

if not rdma_available():
    pytest.skip("no RDMA device here: `make test-rdma` runs this in a Soft-RoCE guest", allow_module_level=True)

from bridge.transport import rdma, verbs  # noqa: E402  (pyverbs: only where a device exists)

try:
    from bridge.transport import _verbs
except ImportError:
    _verbs = None

RING = 1 << 12  # small: the payloads below wrap it several times
TWINS = [verbs] + ([_verbs] if _verbs is not None else [])


def _placed_through(monkeypatch, twin) -> bytes:
    monkeypatch.setattr(rdma, "VERBS", twin)
    hosted = HostedRing("rdma")
    remote, producer = rdma.RdmaRemoteRing(hosted.host.params(), hosted.addr, RING), RingProducer(RING)
    try:
        assert type(remote.qp) is twin.QueuePair
        for n in range(120):
            for p in producer.append(FrameKind.TXN, bytes([n]) * (17 + 29 * (n % 11))):
                remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
            if n % 3 == 2:
                remote.publish(producer.write_seq, producer.head)
                assert remote.held() == producer.write_seq
            producer.acknowledge(remote.read_ack() if n % 7 else producer.write_seq)  # nobody consumes here
        remote.publish(producer.write_seq, producer.head)
        remote.flush()
        return bytes(hosted.host.region)
    finally:
        remote.close()
        hosted.close()


@pytest.mark.skipif(_verbs is None, reason="the compiled queue pair is not built (no libibverbs-dev at build time)")
def test_both_queue_pairs_leave_the_replica_ring_byte_for_byte_equal(monkeypatch):
    twin, compiled = (_placed_through(monkeypatch, module) for module in TWINS)
    assert twin == compiled
    assert twin.count(b"\x00") < len(twin)  # something was placed


@pytest.mark.parametrize("twin", TWINS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_an_error_completion_is_a_transport_error_and_the_ring_keeps_what_was_placed(monkeypatch, twin):
    monkeypatch.setattr(rdma, "VERBS", twin)
    hosted = HostedRing("rdma")
    remote, producer = rdma.RdmaRemoteRing(hosted.host.params(), hosted.addr, RING), RingProducer(RING)
    try:
        for p in producer.append(FrameKind.TXN, b"placed"):
            remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
        remote.publish(producer.write_seq, producer.head)
        remote.qp.break_link()
        for p in producer.append(FrameKind.TXN, b"lost with the link"):
            remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
        with pytest.raises(RdmaError, match="rdma transport: "):  # an error completion, or a refused post
            remote.publish(producer.write_seq, producer.head)
        assert remote.held() == 1  # what the general path resends from: the first frame only
    finally:
        remote.close()
        hosted.close()


@pytest.mark.parametrize("twin", TWINS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_a_placement_is_one_write_and_the_header_follows_now_and_then(monkeypatch, twin):
    """A publish waits for its frames' write alone: the replica side takes them by their own
    check before its header says so; the header is written with every HEADER_EVERY-th
    publish and at a flush (then exact)."""
    monkeypatch.setattr(rdma, "VERBS", twin)
    hosted = HostedRing("rdma")
    remote, producer = rdma.RdmaRemoteRing(hosted.host.params(), hosted.addr, RING), RingProducer(RING)
    consumer = RingConsumer(hosted.host.region)
    try:
        for n in range(1, verbs.HEADER_EVERY + 3):
            for p in producer.append(FrameKind.TXN, b"one write %d" % n):
                remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
            remote.publish(producer.write_seq, producer.head)
            assert remote.held() == n
            got = consumer.poll()  # there as the publish returned: no wait, whatever the header says
            assert (got.seq, got.payload) == (n, b"one write %d" % n)
            consumer.acknowledge(got.seq)
            producer.acknowledge(got.seq)
        remote.flush()  # the header exact, after every write before it
        assert read_u64(hosted.host.region, WRITE_SEQ_AT) == producer.write_seq
        seen = [read_u64(hosted.host.region, WRITE_SEQ_AT)]
        for _ in range(verbs.HEADER_EVERY):
            for p in producer.append(FrameKind.TXN, b"more"):
                remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
            remote.publish(producer.write_seq, producer.head)
            seen.append(read_u64(hosted.host.region, WRITE_SEQ_AT))
        # not with every publish: the last one written was the flush's or the 2*HEADER_EVERY-th publish's
        assert seen[-1] <= producer.write_seq - 2 and len(set(seen)) <= 3
    finally:
        remote.close()
        hosted.close()


@pytest.mark.parametrize("twin", TWINS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_without_inline_writes_the_header_goes_with_every_publish(monkeypatch, twin):
    """A device that writes nothing inline reads the mirror's header by DMA when it sends
    it: unsignaled, that could be after the next publish changed it (write_seq ahead of
    its frames). There the header goes with every publish, signaled: exact when it returns."""
    monkeypatch.setattr(rdma, "VERBS", twin)
    hosted = HostedRing("rdma")
    remote, producer = rdma.RdmaRemoteRing(hosted.host.params(), hosted.addr, RING), RingProducer(RING)
    consumer = RingConsumer(hosted.host.region)
    try:
        remote.qp.max_inline = 0  # Soft-RoCE gives 16 bytes at least, even where none are asked for
        assert remote.qp.max_inline == 0
        for n in range(1, verbs.HEADER_EVERY + 5):
            for p in producer.append(FrameKind.TXN, b"by DMA %d" % n):
                remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
            remote.publish(producer.write_seq, producer.head)
            assert read_u64(hosted.host.region, WRITE_SEQ_AT) == producer.write_seq == n
            got = consumer.poll()
            assert (got.seq, got.payload) == (n, b"by DMA %d" % n)
            consumer.acknowledge(got.seq)
            producer.acknowledge(got.seq)
    finally:
        remote.close()
        hosted.close()


@pytest.mark.parametrize("twin", TWINS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_writes_longer_than_the_port_takes_go_as_several_and_merges_stop_short(monkeypatch, twin):
    """A port's max_msg_sz bounds one RDMA WRITE (Soft-RoCE's is 8 MiB, a large chunk or a
    long merge of contiguous frames could pass it): held to 256 bytes here, every frame
    still arrives whole."""
    monkeypatch.setattr(rdma, "VERBS", twin)
    hosted = HostedRing("rdma")
    remote, producer = rdma.RdmaRemoteRing(hosted.host.params(), hosted.addr, RING), RingProducer(RING)
    consumer = RingConsumer(hosted.host.region)
    try:
        assert remote.qp.max_msg >= 1 << 20  # the port's (rxe: 8 MiB)
        remote.qp.max_msg = 256
        sent = []
        for n in range(12):
            payload = bytes([n + 1]) * (100 + 90 * n)
            sent.append(payload)
            for p in producer.append(FrameKind.TXN, payload):
                remote.write(p.offset, producer.region[p.offset:p.offset + p.length])
            remote.publish(producer.write_seq, producer.head)
            frame = consumer.poll()
            assert frame is not None and frame.payload == payload
            consumer.acknowledge(frame.seq)
            producer.acknowledge(remote.read_ack())
    finally:
        remote.close()
        hosted.close()
