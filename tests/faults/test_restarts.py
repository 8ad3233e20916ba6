"""Stopping (SIGTERM) or killing (SIGKILL) either bridge process in the middle of a
workload, then starting it again: the replica ends with exactly the primary's rows,
nothing lost, nothing applied twice (the keyless ledger table would show a
doubled or missing transaction as a row-count difference)."""

import signal

import pytest

from bridge.check.compare import compare_databases
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, wait_port
from bridge.lab.workload import connect, create_schema
from bridge.model import GtidSet
from tests.conftest import primary_position
from tests.helpers import BackgroundWorkload, applied_seq, channel_row, wait_for

BEFORE_FAULT = 300  # transactions applied before the fault
AFTER_RESTART = 300  # and after the restart, while the workload goes on


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("victim,sig", [("replica", signal.SIGTERM), ("replica", signal.SIGKILL),
                                        ("primary", signal.SIGTERM), ("primary", signal.SIGKILL)])
def test_restart_mid_workload_loses_and_doubles_nothing(sandbox, urls, tmp_path, transport, victim, sig):
    check_restart(sandbox, urls, tmp_path, transport, victim, sig)


def test_killed_replica_with_four_workers_loses_and_doubles_nothing(sandbox, urls, tmp_path):
    """Parallel workers commit in order with the position: a kill -9 between two
    workers' commits still leaves an exact position to resume from."""
    check_restart(sandbox, urls, tmp_path, "shm", "replica", signal.SIGKILL, workers=4)


def check_restart(sandbox, urls, tmp_path, transport, victim, sig, workers=1):
    _, info = sandbox
    schema = channel = f"restart_{transport}_{victim}_{sig}_{workers}"
    pconn, rconn = connect(urls["primary_admin"]), connect(urls["replica_admin"])
    port = free_port()
    procs = {"replica": replica_process(info["replica"], port, transport, channel, str(tmp_path),
                                        extra=("--workers", str(workers))),
             "primary": primary_process(info["primary"], port, transport, primary_position(pconn), str(tmp_path))}

    def alive():
        for p in procs.values():
            p.check_alive()

    procs["replica"].start()
    wait_port(port, alive=alive)
    procs["primary"].start()
    create_schema(pconn, schema)
    try:
        with BackgroundWorkload(urls["primary_admin"], schema):
            wait_for(lambda: applied_seq(rconn, channel) > BEFORE_FAULT, "transactions before the fault",
                     alive=alive)
            code = procs[victim].stop(sig)
            assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL), procs[victim].log_tail()
            at_fault = applied_seq(rconn, channel)
            procs[victim].start()
            wait_for(lambda: applied_seq(rconn, channel) > at_fault + AFTER_RESTART,
                     "transactions after the restart", alive=alive)
        target = primary_position(pconn)
        wait_for(lambda: GtidSet.parse(channel_row(rconn, channel)[1]).contains_all(GtidSet.parse(target)),
                 f"replica to reach {target}", alive=alive)  # heartbeats keep it moving past
    finally:
        for p in procs.values():
            p.stop()
    result = compare_databases(urls["primary_admin"], urls["replica_admin"], [schema])
    assert result.ok, [(d.table, d.missing, d.extra) for d in result.diffs]
    assert result.digests[f"{schema}.ledger"][0].rows > 0
    if victim == "replica":
        assert "session lost" in procs["primary"].log_tail(20000)
    for p in procs.values():  # secrets never in argv (ps) or logs
        for url in (urls["primary"], urls["replica"]):
            assert url.password not in " ".join(p.proc.args) and url.password not in p.log_tail(10**6)
