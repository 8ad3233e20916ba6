"""End-to-end replication over the rdma transport (RDMA WRITE/READ through pyverbs),
run by `make test-rdma` inside the Soft-RoCE guest, with MariaDB in the guest. On a
host without a verbs device the module is skipped (the guest run is the real one)."""

import socket
import ssl

import pytest

from bridge.certs import make_set
from bridge.config import TlsFiles
from bridge.transport import rdma_available
from bridge.workload import MixedWorkload, create_schema
from tests.conftest import BridgePair

if not rdma_available():
    pytest.skip("no RDMA device here: `make test-rdma` runs this in a Soft-RoCE guest", allow_module_level=True)


def test_mixed_workload_replicates_over_rdma_and_both_sides_match(urls):
    pair = BridgePair(urls, "rdma", ring_bytes=1 << 16).start()  # a small ring: wraps and backpressure
    try:
        create_schema(pair.primary, "over_rdma")
        MixedWorkload(pair.primary, "over_rdma", seed=5).run(1500)
        pair.sql("INSERT INTO over_rdma.ledger (account, amount, note) "
                 "SELECT 1, seq, REPEAT('r', 60) FROM over_rdma.seq_1_to_3000")  # a chunked large transaction
        result = pair.assert_same("over_rdma")
        assert result.digests["over_rdma.ledger"][0].rows > 3000
        assert pair.primary_node.counts.transactions_shipped >= 1000  # some workload steps change no row: no transaction
    finally:
        pair.stop()


def test_a_lost_session_resumes_over_rdma(urls):
    pair = BridgePair(urls, "rdma").start()
    try:
        create_schema(pair.primary, "rdma_resume")
        MixedWorkload(pair.primary, "rdma_resume", seed=6).run(200)
        pair.sync()
        pair.primary_node.link.control.sock.shutdown(socket.SHUT_RDWR)  # the session ends; it resumes over rdma
        MixedWorkload(pair.primary, "rdma_resume", seed=7).run(200)
        pair.assert_same("rdma_resume")
        assert pair.primary_node.counts.reconnects >= 1
    finally:
        pair.stop()


def test_replication_over_rdma_with_its_setup_connection_over_tls(urls, tmp_path):
    """The control channel and the queue-pair exchange go through TLS; the one-sided
    writes into the ring do not (RDMA has no TLS; docs/operations.md says so)."""
    made = make_set(tmp_path, ["localhost", "127.0.0.1"])
    files = TlsFiles(str(made.cert), str(made.key), str(made.ca))
    pair = BridgePair(urls, "rdma", secret="rdma and tls", tls=files)
    pair.start_replica()
    pair.start_primary(tls=files)
    try:
        create_schema(pair.primary, "rdma_tls")
        MixedWorkload(pair.primary, "rdma_tls", seed=8).run(300)
        pair.assert_same("rdma_tls")
        for sock in (pair.primary_node.link.control.sock, pair.primary_node.remote._sock):
            assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        pair.stop()


def test_take_over_over_rdma_fences_the_old_writer(urls):
    """The old primary side's memory region is deregistered: its writes fail, none is applied."""
    from tests.integration.test_fencing import take_over

    take_over(urls, "rdma_takeover", "rdma")


def test_doctor_passes_the_device_checks_on_a_real_verbs_device():
    from bridge import doctor

    checks = doctor.rdma_checks("rdma", 1 << 20)
    found = {c.name: c.status for c in checks}
    port = next(name for name in found if name.endswith("port 1"))
    assert found[port] == "PASS", doctor.render(checks)
    assert found[port.replace("port 1", "GID type")] == "PASS", doctor.render(checks)  # a RoCE v2 GID
    assert found["memlock limit"] == "PASS", doctor.render(checks)
    assert not any(c.status == "FAIL" for c in checks), doctor.render(checks)
