"""A semi-sync ACK says only what is true, tested by breaking what it depends on: the
replica side frozen (SIGSTOP) while the primary commits, and the link cut after the
replica side placed a transaction but before its answer reached the primary side.
Each ends with both databases compared row by row."""

import signal
import threading
import time

import pytest

from bridge.lab.ports import free_port
from bridge.lab.procs import replica_process, wait_port
from bridge.lab.workload import connect
from bridge.ops.metrics import prometheus_text
from bridge.ring.layout import WRITE_SEQ_AT, read_u64
from tests.conftest import BridgePair
from tests.faults.proxy import FaultProxy
from tests.helpers import applied_seq, semi_sync_on, semi_sync_status, set_semi_sync, wait_for

TIMEOUT_S = 1.0  # the semi_sync_primary fixture's rpl_semi_sync_master_timeout (MySQL: _source_)


def acked_and_not(admin) -> tuple[int, int]:
    """The primary's count of commits a replica acknowledged, and of those that timed out."""
    status = semi_sync_status(admin)
    return int(status["yes_tx"]), int(status["no_tx"])


def ring_file_write_seq(path: str) -> int:
    """write_seq in the header of a shm ring, read from its file (not through the bridge)."""
    with open(path, "rb") as f:
        return int.from_bytes(f.read(WRITE_SEQ_AT + 8)[WRITE_SEQ_AT:], "little")


@pytest.mark.parametrize("transport,mode,holds", [
    ("tcp", "received", False),  # the frames wait in socket buffers: only the receiver's answer says held
    ("shm", "received", True),  # the placement is in the frozen side's ring itself
    ("tcp", "applied", False),
    ("shm", "applied", False),
])
def test_a_frozen_replica_side_is_acknowledged_only_what_it_holds(sandbox, urls, tmp_path, fresh_schema,
                                                                   semi_sync_primary, transport, mode, holds):
    _, info = sandbox
    s = fresh_schema("frozen")
    pair, port = BridgePair(urls, transport), free_port()
    replica = replica_process(info["replica"], port, transport, pair.channel, str(tmp_path)).start()
    try:
        wait_port(port, alive=replica.check_alive)
        pair.start_primary(replica_addr=("127.0.0.1", port), semi_sync=mode)
        node = pair.primary_node
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1)")
        semi_sync_on(semi_sync_primary, pair, s)
        pair.sync()
        yes, no = acked_and_not(semi_sync_primary)
        skipped = node.counts.acks_skipped
        replica.proc.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            pair.sql(f"INSERT INTO {s}.t VALUES (2)")  # autocommit: returns on the ACK or the timeout
            waited = time.monotonic() - started
            if holds:
                assert acked_and_not(semi_sync_primary) == (yes + 1, no)
                assert ring_file_write_seq(node.remote._path) >= node.producer.write_seq  # the frozen ring holds it
            else:
                assert acked_and_not(semi_sync_primary) == (yes, no + 1)
                assert waited >= TIMEOUT_S * 0.9  # the commit waited for an ACK that never came
                wait_for(lambda: node.counts.acks_skipped > skipped, "the skipped ACK counted")
                assert f'rdma_bridge_semi_sync_acks_skipped_total{{role="primary"}} {node.counts.acks_skipped}.0' \
                    in prometheus_text("primary", node.status())
        finally:
            replica.proc.send_signal(signal.SIGCONT)
        pair.sql(f"INSERT INTO {s}.t VALUES (3)")
        wait_for(lambda: semi_sync_status(semi_sync_primary)["status"] == "ON", "semi-sync back on after the thaw")
        pair.assert_same(s)
    finally:
        pair.stop()
        replica.stop()


def test_a_cut_between_placement_and_answer_acks_only_once_the_resend_is_confirmed(urls, fresh_schema,
                                                                                   semi_sync_primary):
    """tcp through a proxy that holds the replica side's answers: the transaction is in
    the replica's ring but the primary side has not heard so, and sends no ACK; the cut
    loses the answer and the ring (a new session gets fresh memory); the ACK comes once
    the resent frame is confirmed, before the primary's timeout. The replica applies 3 s
    late (--delay), so it is the resend's answer, not the replica's commit, that covers it."""
    s = fresh_schema("unanswered")
    set_semi_sync(semi_sync_primary, timeout=20000)
    pair = BridgePair(urls, "tcp", delay_s=3.0)
    pair.start_replica()
    proxy = FaultProxy(tuple(pair.replica_node.address))
    pair.start_primary(replica_addr=proxy.address, semi_sync="received")
    client = connect(urls["primary_admin"])
    committed = threading.Event()
    try:
        node, replica = pair.primary_node, pair.replica_node
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
        semi_sync_on(semi_sync_primary, pair, s)
        pair.sync()
        yes, no = acked_and_not(semi_sync_primary)
        placed_before, acks_before = read_u64(replica.host.region, WRITE_SEQ_AT), node.counts.acks_sent
        proxy.stall(None, "down")  # the replica side's answers (and control messages) are held in the proxy

        def commit():
            with client.cursor() as cur:
                cur.execute(f"INSERT INTO {s}.t VALUES (1)")
            committed.set()
        threading.Thread(target=commit, daemon=True).start()
        wait_for(lambda: read_u64(replica.host.region, WRITE_SEQ_AT) > placed_before, "the frame in the replica's ring")
        seq = read_u64(replica.host.region, WRITE_SEQ_AT)
        time.sleep(0.3)  # an answer let through would have come back long ago
        assert not committed.is_set()
        assert acked_and_not(semi_sync_primary) == (yes, no) and node.counts.acks_sent == acks_before
        proxy.cut()
        proxy.flow()
        assert committed.wait(30), "the commit never returned"
        assert acked_and_not(semi_sync_primary) == (yes + 1, no)  # acknowledged, within the primary's timeout
        assert node.counts.frames_resent >= 1
        assert applied_seq(pair.replica, pair.channel) < seq  # the resend's answer made the ACK, not a commit
        pair.assert_same(s)
    finally:
        client.close()
        proxy.close()
        pair.stop()
