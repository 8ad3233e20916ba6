"""End-to-end replication over the rdma transport (RDMA WRITE/READ through pyverbs),
run by `make test-rdma` inside the Soft-RoCE guest, with MariaDB in the guest. On a
host without a verbs device the module is skipped (the guest run is the real one)."""

import ctypes
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from bridge.config import RdmaOptions, TlsFiles
from bridge.lab.ports import free_port
from bridge.lab.procs import replica_process, wait_port
from bridge.lab.workload import MixedWorkload, create_schema
from bridge.ops.certs import make_set
from bridge.ring.consumer import RingConsumer
from bridge.ring.layout import ACK_SEQ_AT, DATA_OFFSET, SIZE_AT, TAIL_AT, read_u32, read_u64
from bridge.transport import rdma_available
from tests.conftest import BridgePair
from tests.faults.test_semisync_truth import acked_and_not
from tests.helpers import semi_sync_on, semi_sync_status, wait_for

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
        assert pair.primary_node.counts.lane_runs > 0  # the ship lane placed over rdma itself
    finally:
        pair.stop()


def test_the_producer_frames_into_the_registered_mirror_and_a_resend_reads_the_last_sessions(urls):
    """One copy fewer on the primary side: the ring producer's memory is the registered mirror
    its queue pair writes from (no copy between them). After a lost session the frames the
    replica had not applied are sent again from the last session's producer, whose memory
    stays mapped though its remote is closed; both databases end equal."""
    pair = BridgePair(urls, "rdma", ring_bytes=1 << 16).start()
    try:
        create_schema(pair.primary, "rdma_framed_here")
        MixedWorkload(pair.primary, "rdma_framed_here", seed=13).run(100)
        pair.sync()
        member = pair.primary_node.member
        mirror = member.remote.lane_target().remote
        assert ctypes.addressof(ctypes.c_char.from_buffer(member.producer.region)) == \
            ctypes.addressof(ctypes.c_char.from_buffer(mirror))
        before = pair.primary_node.counts.reconnects
        pair.primary_node.link.control.sock.shutdown(socket.SHUT_RDWR)
        MixedWorkload(pair.primary, "rdma_framed_here", seed=14).run(200)
        pair.assert_same("rdma_framed_here")
        assert pair.primary_node.counts.reconnects > before
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


def test_a_queue_pair_in_the_error_state_resumes_with_nothing_lost_or_applied_twice(urls):
    """The primary side's queue pair moved to the error state under load (what a broken link
    or a reset adapter does): its next publish meets an error completion, the session ends,
    and a new one resumes from the ring; both sides equal row by row."""
    pair = BridgePair(urls, "rdma").start()
    try:
        create_schema(pair.primary, "rdma_qp_error")
        MixedWorkload(pair.primary, "rdma_qp_error", seed=9).run(200)
        pair.sync()
        pair.primary_node.remote.qp.break_link()
        MixedWorkload(pair.primary, "rdma_qp_error", seed=10).run(300)
        pair.assert_same("rdma_qp_error")
        assert pair.primary_node.counts.reconnects >= 1
    finally:
        pair.stop()


def test_an_idle_replica_side_whose_queue_pair_fails_ends_the_session_once_without_a_busy_loop(urls):
    """The replica side's queue pair moved to the error state while it sleeps on it: its
    posted receives complete in error (flushed). Before, every later sleep returned at once
    (a core burnt) and nothing ended the session until the primary side wrote again. Now the
    replica side ends the session, the primary side starts a new one with no write of its
    own, the process idles on little CPU, and replication goes on equal."""
    pair = BridgePair(urls, "rdma").start()
    try:
        create_schema(pair.primary, "rdma_recv_error")
        MixedWorkload(pair.primary, "rdma_recv_error", seed=11).run(50)
        pair.sync()
        before = pair.primary_node.counts.reconnects
        waker = pair.replica_node.host.lane_sleeper()
        if waker is None:
            pytest.skip("the pure-Python queue pair does not sleep on a completion channel")
        waker.break_link()
        wait_for(lambda: pair.primary_node.counts.reconnects > before and pair.replica_node.current is not None
                 and pair.replica_node.host.lane_sleeper() not in (None, waker),
                 timeout_s=30, what="a new session after the replica side's queue pair failed")
        time.sleep(0.5)  # the new session settles
        cpu = time.process_time()
        time.sleep(2)
        assert time.process_time() - cpu < 0.5, "both sides idle, yet the process burnt CPU"
        MixedWorkload(pair.primary, "rdma_recv_error", seed=12).run(100)
        pair.assert_same("rdma_recv_error")
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


def _address_on_the_rxe_netdev(address: str) -> None:
    """A second address on the guest's rxe netdev (dummy0), and its GID in rxe0's table."""
    subprocess.run(["ip", "addr", "replace", f"{address}/24", "dev", "dummy0"], check=True)
    wait_for(lambda: any(address in _read(p) or _mapped(address) in _read(p)
                         for p in Path("/sys/class/infiniband").glob("*/ports/1/gids/*")),
             timeout_s=10, what=f"rxe's GID of {address}")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _mapped(address: str) -> str:
    """An IPv4 address as the tail of its GID in sysfs ("0a0c:0001" for 10.12.0.1)."""
    a, b, c, d = (int(x) for x in address.split("."))
    return f"{a << 8 | b:04x}:{c << 8 | d:04x}"


def test_the_gid_of_the_address_the_pair_connects_through_is_chosen_and_named(urls):
    """A second address on the rxe netdev, and the pair connected through it: both queue
    pairs use its IPv4-mapped RoCE v2 GID (before, the primary side took GID index 0, the
    link-local fe80:: one), mark their packets as asked, and say so in status; replication
    is equal."""
    _address_on_the_rxe_netdev("10.12.0.1")
    marking = RdmaOptions(traffic_class=104, service_level=3)
    pair = BridgePair(urls, "rdma", secret="s3cret", insecure_transport=True)
    try:
        pair.start_replica(host="10.12.0.1")
        pair.start_primary(rdma=marking)
        create_schema(pair.primary, "rdma_gid")
        MixedWorkload(pair.primary, "rdma_gid", seed=9).run(150)
        pair.assert_same("rdma_gid")
        for route in (pair.primary_node.status()["rdma"], pair.replica_node.status()["rdma"]):
            assert (route["gid"], route["roce_v2"], route["traffic_class"], route["service_level"]) == \
                ("10.12.0.1", True, 104, 3), route  # the replica side takes the primary side's marking
            assert route["chosen_by"].startswith("the GID of 10.12.0.1"), route
        # what the device holds for each queue pair: the traffic class and GID reach the address
        # vector (rdma_rxe puts that traffic class in each packet's IP header: the DSCP a switch
        # classifies by). The service level is not kept by rdma_rxe (a RoCE NIC maps it to the VLAN
        # priority): it is checked in status above only.
        replica_qp = pair.replica_node.host.lane_sleeper()  # the compiled queue pair's (pyverbs': none)
        for qp, route in ((pair.primary_node.remote.qp, pair.primary_node.status()["rdma"]),
                          (replica_qp, pair.replica_node.status()["rdma"])):
            if qp is not None:
                tc, _, sgid_index, port = qp.address()
                assert (tc, sgid_index, port) == (104, route["gid_index"], route["port"])
    finally:
        pair.stop()


def test_doctor_passes_the_device_checks_on_a_real_verbs_device():
    from bridge.ops import doctor

    checks = doctor.rdma_checks("rdma", 1 << 20)
    found = {c.name: c.status for c in checks}
    port = next(name for name in found if name.endswith("port 1"))
    assert found[port] == "PASS", doctor.render(checks)
    assert found[port.replace("port 1", "GID type")] == "PASS", doctor.render(checks)  # a RoCE v2 GID
    assert found["memlock limit"] == "PASS", doctor.render(checks)
    assert not any(c.status == "FAIL" for c in checks), doctor.render(checks)
    routed = {c.name: c for c in doctor.rdma_checks("rdma", 1 << 20, local_address="10.11.0.1")}["rdma route"]
    assert routed.status == "PASS" and "GID index 1 (10.11.0.1, RoCE v2)" in routed.detail, routed


def taken_from_frozen_ring(pid: int, node) -> int:
    """The last seq a consumer takes from a copy of process ``pid``'s ring (read from its
    memory), starting where that ring's own consumer acknowledged: what it holds."""
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(node.remote.remote_addr)
        size = read_u32(mem.read(DATA_OFFSET), SIZE_AT)
        mem.seek(node.remote.remote_addr)
        ring = bytearray(mem.read(DATA_OFFSET + size))
    consumer = RingConsumer(memoryview(ring), expected_seq=read_u64(ring, ACK_SEQ_AT) + 1,
                            tail=read_u32(ring, TAIL_AT), epoch=node.producer.epoch)
    while consumer.poll() is not None:
        pass
    return consumer.expected_seq - 1


def test_semi_sync_received_over_rdma_is_the_write_completion(sandbox, urls, tmp_path, fresh_schema,
                                                              semi_sync_primary):
    """A frozen replica side (SIGSTOP) still has its memory: the WRITE completes, the ACK
    goes, and the frozen process's ring holds the transaction for its consumer. A killed one (its
    control connection closed) is acknowledged nothing: the commit waits for the primary's
    timeout. Restarted, it gets everything; both sides equal."""
    _, info = sandbox
    s = fresh_schema("rdma_semi")
    pair, port = BridgePair(urls, "rdma"), free_port()

    def replica():
        side = replica_process(info["replica"], port, "rdma", pair.channel, str(tmp_path)).start()
        wait_port(port, alive=side.check_alive)
        return side

    side = replica()
    try:
        pair.start_primary(replica_addr=("127.0.0.1", port), semi_sync="received")
        node = pair.primary_node
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1)")
        semi_sync_on(semi_sync_primary, pair, s)
        pair.sync()
        yes, no = acked_and_not(semi_sync_primary)
        side.proc.send_signal(signal.SIGSTOP)
        try:
            pair.sql(f"INSERT INTO {s}.t VALUES (2)")
            assert acked_and_not(semi_sync_primary) == (yes + 1, no)
            assert taken_from_frozen_ring(side.proc.pid, node) >= node.producer.write_seq
        finally:
            side.proc.send_signal(signal.SIGCONT)
        pair.sync()
        wait_for(lambda: semi_sync_status(semi_sync_primary)["status"] == "ON", "semi-sync on before the kill")
        yes, no = acked_and_not(semi_sync_primary)
        side.stop(signal.SIGKILL)
        wait_for(lambda: node.link.down, "the primary side to see its link closed")
        started = time.monotonic()
        pair.sql(f"INSERT INTO {s}.t VALUES (3)")
        assert time.monotonic() - started >= 0.9  # the primary's 1 s timeout passed without an ACK
        assert acked_and_not(semi_sync_primary) == (yes, no + 1)
        side = replica()
        pair.sql(f"INSERT INTO {s}.t VALUES (4)")
        pair.assert_same(s)
    finally:
        pair.stop()
        side.stop()
