"""Stopping (SIGTERM) or killing (SIGKILL) either bridge process in the middle of a
workload, then starting it again: the replica ends with exactly the primary's rows,
nothing lost, nothing applied twice (the keyless ledger table would show a
doubled or missing transaction as a row-count difference)."""

import signal
import threading
import time

import pytest

from bridge.check.compare import compare_databases
from bridge.procs import primary_process, replica_process, wait_port
from bridge.sandbox import free_port
from bridge.workload import MixedWorkload, connect, create_schema
from tests.conftest import primary_position

TRANSACTIONS = 1500


def applied_seq(rconn, channel):
    with rconn.cursor() as cur:
        cur.execute("SELECT applied_seq FROM rdma_bridge.bridge_meta WHERE channel=%s", (channel,))
        row = cur.fetchone()
    return row[0] if row else 0


def wait_for(predicate, what, timeout_s=60.0, alive=lambda: None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        alive()
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("victim,sig", [("replica", signal.SIGTERM), ("replica", signal.SIGKILL),
                                        ("primary", signal.SIGTERM), ("primary", signal.SIGKILL)])
def test_restart_mid_workload_loses_and_doubles_nothing(sandbox, urls, tmp_path, transport, victim, sig):
    _, info = sandbox
    schema, channel = f"restart_{transport}_{victim}_{sig}", f"restart_{transport}_{victim}_{sig}"
    pconn, rconn = connect(urls["primary_admin"]), connect(urls["replica_admin"])
    port = free_port()
    procs = {"replica": replica_process(info["replica"], port, transport, channel, str(tmp_path)),
             "primary": primary_process(info["primary"], port, transport, primary_position(pconn), str(tmp_path))}

    def alive():
        for p in procs.values():
            p.check_alive()

    procs["replica"].start()
    wait_port(port, alive=alive)
    procs["primary"].start()
    create_schema(pconn, schema)
    workload = threading.Thread(target=MixedWorkload(connect(urls["primary_admin"]), schema).run,
                                args=(TRANSACTIONS,))
    workload.start()
    try:
        wait_for(lambda: applied_seq(rconn, channel) > 300, "the first 300 transactions", alive=alive)
        assert workload.is_alive(), "the workload ended before the fault: raise TRANSACTIONS"
        code = procs[victim].stop(sig)
        assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL), procs[victim].log_tail()
        procs[victim].start()
        workload.join()
        target = primary_position(pconn)
        wait_for(lambda: _gtid_set(rconn, channel) == target, f"replica to reach {target}", alive=alive)
    finally:
        workload.join()
        for p in procs.values():
            p.stop()
    result = compare_databases(urls["primary_admin"], urls["replica_admin"], [schema])
    assert result.ok, [(d.table, d.missing, d.extra) for d in result.diffs]
    assert result.digests[f"{schema}.ledger"][0].rows > 0
    if victim == "replica":
        assert "reconnect attempt 1/" in procs["primary"].log_tail(20000)


def _gtid_set(rconn, channel):
    with rconn.cursor() as cur:
        cur.execute("SELECT gtid_set FROM rdma_bridge.bridge_meta WHERE channel=%s", (channel,))
        row = cur.fetchone()
    return row[0] if row else ""
