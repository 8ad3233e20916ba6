"""An idle replica sleeps on the ring's doorbell instead of spinning, and every
transaction that arrives while it sleeps still wakes it: the two bridge processes
as users start them, single transactions spaced so that each finds the replica
asleep; then a long idle in which the replica side wakes a few times a second at most
(the doorbell's safety timeout, the primary side's control heartbeat), and a transaction
after it that still arrives at once (woken, not found by that timeout); then the
databases compared."""

import os
import time

import pytest

from bridge.check.compare import compare_databases
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, start_pair, wait_port
from bridge.lab.workload import connect
from bridge.transport import rdma_available
from bridge.transport.doorbell import DOORBELL_WAIT_S
from tests.conftest import primary_position
from tests.helpers import table_rows, wait_for

SPACED_TXNS = 20
IDLE_S = 10.0
MAX_IDLE_CPU_SHARE = 0.05  # measured here: doorbell ~1.5%, polling every 200 µs ~8%, a yield-spin ~27%
MAX_WAKEUPS_PER_S = 5  # before: ~100 (a 10 ms bounded doorbell wait); the safety timeout (1 s) and heartbeats remain


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wakeups(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid``: each is a sleep it woke from."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            status = open(f"/proc/{pid}/task/{task}/status").read()
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
        total += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return total


def _quiet_pair(sandbox, urls, tmp_path, transport: str, name: str):
    """(schema, primary and replica connections, port, the replica side's process, the
    primary side's, without heartbeats), not started; the schema and channel named
    ``name``_``transport``."""
    _, info = sandbox
    schema = channel = f"{name}_{transport}"
    pconn, rconn = connect(urls["primary_admin"]), connect(urls["replica_admin"])
    port = free_port()
    replica = replica_process(info["replica"], port, transport, channel, str(tmp_path))
    primary = primary_process(info["primary"], port, transport, primary_position(pconn), str(tmp_path),
                              extra=("--heartbeat-interval", "0"))
    return schema, pconn, rconn, port, replica, primary


@pytest.mark.parametrize("transport", ["shm", "tcp"] + (["rdma"] if rdma_available() else []))  # rdma: the guest
def test_idle_replica_sleeps_and_each_spaced_transaction_wakes_it(sandbox, urls, tmp_path, transport):
    schema, pconn, rconn, port, replica, primary = _quiet_pair(sandbox, urls, tmp_path, transport, "idle")
    alive = start_pair(replica, primary, port)
    with pconn.cursor() as cur:  # replicated: the bridge starts before it
        cur.execute(f"DROP DATABASE IF EXISTS {schema}")
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20))")
    try:
        for i in range(1, SPACED_TXNS + 1):
            time.sleep(0.05)  # the replica has gone back to sleep on its doorbell
            with pconn.cursor() as cur:
                cur.execute(f"INSERT INTO {schema}.t VALUES (%s, %s)", (i, f"row {i}"))
            wait_for(lambda: table_rows(rconn, schema) == i, f"row {i} on the replica", alive=alive)
        before, woke = cpu_seconds(replica.proc.pid), wakeups(replica.proc.pid)
        time.sleep(IDLE_S)
        idle_share = (cpu_seconds(replica.proc.pid) - before) / IDLE_S
        idle_wakeups = (wakeups(replica.proc.pid) - woke) / IDLE_S
        alive()
        with pconn.cursor() as cur:  # after the long idle: woken by the doorbell, not by the safety timeout
            committed = time.monotonic()
            cur.execute(f"INSERT INTO {schema}.t VALUES (%s, %s)", (SPACED_TXNS + 1, "after the idle"))
        wait_for(lambda: table_rows(rconn, schema) == SPACED_TXNS + 1, "the row after the idle", alive=alive,
                 timeout_s=10)
        arrived_s = time.monotonic() - committed
    finally:
        primary.stop()
        replica.stop()
    assert idle_share < MAX_IDLE_CPU_SHARE, f"idle replica used {idle_share:.0%} of a core: it spins"
    assert idle_wakeups < MAX_WAKEUPS_PER_S, f"idle replica woke {idle_wakeups:.1f} times a second"
    # the doorbell's safety timeout is 1 s: a transaction that waited for it was not woken
    assert arrived_s < DOORBELL_WAIT_S, f"the row after {IDLE_S:.0f} s of idle took {arrived_s:.3f} s"
    result = compare_databases(urls["primary_admin"], urls["replica_admin"], [schema])
    assert result.ok, [(d.table, d.missing, d.extra) for d in result.diffs]
    assert result.digests[f"{schema}.t"][0].rows == SPACED_TXNS + 1


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_replica_side_waiting_for_its_primary_side_sleeps_and_serves_it_at_once(sandbox, urls, tmp_path, transport):
    """Started alone, its primary side not there yet (or gone): it wakes a few times a
    second at most (it polled every 200 µs: ~3,500 times a second, 7-8% of a core), and a
    primary side that connects then is served at once."""
    schema, pconn, rconn, port, replica, primary = _quiet_pair(sandbox, urls, tmp_path, transport, "waiting")
    replica.start()
    try:
        wait_port(port, alive=replica.check_alive)
        time.sleep(1.0)  # its start's work done
        pid = replica.proc.pid
        before, woke = cpu_seconds(pid), wakeups(pid)
        time.sleep(IDLE_S / 2)
        share, rate = (cpu_seconds(pid) - before) / (IDLE_S / 2), (wakeups(pid) - woke) / (IDLE_S / 2)
        primary.start()
        with pconn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {schema}")
            cur.execute(f"CREATE DATABASE {schema}")
            cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO {schema}.t VALUES (1)")
        wait_for(lambda: table_rows(rconn, schema) == 1, "the row once the primary side connected", timeout_s=30,
                 alive=lambda: (replica.check_alive(), primary.check_alive()))
    finally:
        primary.stop()
        replica.stop()
    assert rate < MAX_WAKEUPS_PER_S, f"a replica side with no session woke {rate:.0f} times a second"
    assert share < MAX_IDLE_CPU_SHARE, f"a replica side with no session used {share:.0%} of a core"
