"""--realtime-priority on both bridge ends, started as users start them, the primary
side a semi-sync replica of the primary: every thread of each process (those started
after the option took effect too: the links, the receiver, the apply threads) runs under
SCHED_FIFO (their `status` says so), the primary's commits are acknowledged, and the
databases compare equal."""

import os

import pytest

from bridge.check.compare import compare_databases
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, start_pair
from bridge.lab.workload import connect
from bridge.ops.report import fetch_status
from tests.conftest import primary_position
from tests.helpers import semi_sync_status, table_rows, wait_for

PRIORITY = 5
ROWS = 200


def policies(pid: int) -> set[tuple[int, int]]:
    """(policy, priority) of every thread of ``pid``."""
    out = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            out.add((os.sched_getscheduler(int(task)), os.sched_getparam(int(task)).sched_priority))
        except ProcessLookupError:
            pass  # a thread that ended meanwhile
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root or CAP_SYS_NICE")
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_both_ends_under_sched_fifo_acknowledge_and_replicate(sandbox, urls, tmp_path, semi_sync_primary, transport):
    _, info = sandbox
    schema = channel = f"realtime_{transport}"
    pconn, rconn = connect(urls["primary_admin"]), connect(urls["replica_admin"])
    port = free_port()
    rt = ("--realtime-priority", str(PRIORITY))
    replica = replica_process(info["replica"], port, transport, channel, str(tmp_path), extra=rt)
    primary = primary_process(info["primary"], port, transport, primary_position(pconn), str(tmp_path),
                              extra=("--semi-sync", "received", *rt))

    try:
        alive = start_pair(replica, primary, port)
        wait_for(lambda: semi_sync_status(semi_sync_primary)["clients"] == "1", "the bridge as semi-sync client",
                 alive=alive)
        with pconn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {schema}")
            cur.execute(f"CREATE DATABASE {schema}")
            cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        acked = int(semi_sync_status(semi_sync_primary)["yes_tx"])
        with pconn.cursor() as cur:
            for i in range(1, ROWS + 1):  # autocommit: each returns on its ACK (or the primary's timeout)
                cur.execute(f"INSERT INTO {schema}.t VALUES (%s, %s)", (i, f"row {i}"))
        wait_for(lambda: table_rows(rconn, schema) == ROWS, f"{ROWS} rows on the replica", alive=alive)
        assert int(semi_sync_status(semi_sync_primary)["yes_tx"]) > acked  # ACKs from the SCHED_FIFO primary side
        for proc in (primary, replica):
            assert policies(proc.proc.pid) == {(os.SCHED_FIFO, PRIORITY)}, proc.name
            assert len(os.listdir(f"/proc/{proc.proc.pid}/task")) > 1  # threads started after the option too
            assert f"realtime: every thread under SCHED_FIFO priority {PRIORITY}" in proc.log_tail(100_000)
            assert "objects of the start frozen" in proc.log_tail(100_000)  # out of the collector's walks
        nodes = fetch_status({"primary": primary.metrics_address, "replica": replica.metrics_address})["nodes"]
        assert [nodes[role]["scheduling"] for role in ("primary", "replica")] == [f"SCHED_FIFO {PRIORITY}"] * 2
    finally:
        primary.stop()
        replica.stop()
    result = compare_databases(urls["primary_admin"], urls["replica_admin"], [schema])
    assert result.ok, [(d.table, d.missing, d.extra) for d in result.diffs]
    assert result.digests[f"{schema}.t"][0].rows == ROWS
