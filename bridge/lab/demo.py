"""`make demo`: sandbox up, both bridge ends started as real `rdma-bridge`
processes, a mixed workload on the primary with a progress bar, catch-up, a
row-by-row verification and a short summary (transactions, rate, lag P50/P99).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pymysql

from bridge.check.compare import compare_databases
from bridge.check.positions import primary_position, wait_for_replica
from bridge.config import MysqlUrl
from bridge.errors import ApplyError
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, wait_port
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import MixedWorkload, connect, create_schema, percentile, probe_lag
from bridge.model import GtidSet
from bridge.ops.report import fetch_status, status_table
from bridge.server import errorcodes
from bridge.server.flavor import Flavor
from bridge.server.sqlnames import META

SCHEMA = "bridge_demo"
CHANNEL = "demo"
CATCH_UP_TIMEOUT_S = 120.0


def run_demo(state_dir: str, transactions: int, transport: str, probes: int, echo, progressbar,
             flavor: str | None = None, apply_mode: str = "auto") -> bool:
    info = Sandbox(state_dir).up(flavor=flavor)
    echo(f"sandbox: primary {_mask(info['primary'])}, replica {_mask(info['replica'])}")
    primary, replica = MysqlUrl.parse(info["primary_admin"]), MysqlUrl.parse(info["replica_admin"])
    pconn, rconn = connect(primary), connect(replica)
    relay = apply_mode == "relay"
    start = relay_start(pconn, rconn, CHANNEL) if relay else reset_channel(pconn, rconn, CHANNEL)

    def caught_up(alive) -> None:
        if relay:
            wait_for_server(rconn, replica, primary_position(pconn), CATCH_UP_TIMEOUT_S, alive)
        else:
            wait_for_replica(rconn, replica, CHANNEL, primary_position(pconn), CATCH_UP_TIMEOUT_S, alive=alive)

    with bridge_processes(info, transport, state_dir, start, apply_mode) as bridges:
        echo(f"bridges: start-replica on 127.0.0.1:{bridges.port} (apply mode {apply_mode}) and start-primary over "
             f"{transport}")
        create_schema(pconn, SCHEMA)
        # the schema's DDL is a barrier the replica's server takes tens of ms per statement for
        # (fsyncs): a workload started at once queues ~50 transactions behind it, which is the
        # report's P99 then, not the steady state (docs/benchmarks.md, "The demo's P99")
        caught_up(bridges.check_alive)
        started = time.perf_counter()
        with progressbar(length=transactions, label="workload") as bar:
            MixedWorkload(pconn, SCHEMA).run(transactions, bar.update)
        caught_up(bridges.check_alive)
        elapsed = time.perf_counter() - started
        logged = logged_transactions(pconn, start)
        echo(f"replica caught up: the workload's {transactions} transactions, {logged} of them in the binlog "
             f"(one that changed no row leaves nothing to replicate; heartbeat rows included), in {elapsed:.1f}s "
             f"({logged / elapsed:.0f} txn/s, workload included)")
        lags = probe_lag(pconn, rconn, SCHEMA, probes) if probes else []
        echo(status_table(fetch_status({"primary": bridges.primary.metrics_address,
                                        "replica": bridges.replica.metrics_address})))
        if relay:
            echo(channel_summary(rconn))
    result = compare_databases(primary, replica, [SCHEMA])
    for name, (a, b) in result.digests.items():
        echo(f"  {'ok' if a == b else 'DIFF':4} {name:28} rows {a.rows:>6} / {b.rows:<6} "
             f"sha256 {a.sha256[:12]} / {b.sha256[:12]}")
    if lags:
        echo(f"lag commit→visible over {len(lags)} probes: P50 {percentile(lags, 50) * 1e6:.0f} µs, "
             f"P99 {percentile(lags, 99) * 1e6:.0f} µs, max {max(lags) * 1e6:.0f} µs")
    echo("verified: both databases hold the same rows" if result.ok else "MISMATCH: " + "; ".join(
        f"{d.table} missing {d.missing} extra {d.extra}" for d in result.diffs))
    if relay:
        stop_server_channel(rconn, CHANNEL)
        echo(f"the replica server's channel {CHANNEL!r} is stopped with the bridges (SHOW SLAVE '{CHANNEL}' STATUS "
             f"there still shows it; a replica side started again points it at itself and starts it)")
    echo(f"the sandbox keeps running; stop it with: {command_name()} sandbox down --state-dir {state_dir}")
    return result.ok


def relay_start(pconn, rconn, channel: str) -> str:
    """Apply mode relay: the replica server's own GTID position says where its channel
    starts. The demo replays its own schema from scratch each run, so the replica is
    given the primary's position now, as a DBA positions a replica that holds the data
    (MariaDB: gtid_slave_pos, its channel stopped; MySQL: gtid_purged gains what the
    replica lacks)."""
    position = primary_position(pconn)
    flavor = Flavor.of(rconn)
    stop_server_channel(rconn, channel)
    with rconn.cursor() as cur:
        if flavor.is_mysql:
            cur.execute(flavor.replica_gtid_sql)
            lacking = position.minus(GtidSet.parse(cur.fetchone()[0] or ""))
            if lacking:
                cur.execute("SET GLOBAL gtid_purged = %s", (f"+{lacking}",))
        else:
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (str(position),))
    return str(position)


def stop_server_channel(rconn, channel: str) -> None:
    """The replica server's ``channel`` stopped (nothing to stop: fine)."""
    with rconn.cursor() as cur:
        try:
            cur.execute(Flavor.of(rconn).replica_channel("STOP", channel))
        except pymysql.MySQLError as exc:
            if errorcodes.code_of(exc) not in errorcodes.NO_CHANNEL:
                raise


def wait_for_server(rconn, url: MysqlUrl, target: GtidSet, timeout_s: float, alive) -> None:
    """Apply mode relay: until the replica server has executed ``target`` itself."""
    sql = Flavor.of(rconn).replica_gtid_sql
    deadline = time.monotonic() + timeout_s
    while True:
        with rconn.cursor() as cur:
            cur.execute(sql)
            if GtidSet.parse(cur.fetchone()[0] or "").contains_all(target):
                return
        alive()
        if time.monotonic() > deadline:
            raise ApplyError(f"the replica {url} did not execute {target} within {timeout_s:.0f}s: "
                             f"{channel_summary(rconn)}")
        time.sleep(0.05)


def channel_summary(rconn) -> str:
    """The replica server's own view of the channel, as SHOW REPLICA STATUS has it."""
    flavor = Flavor.of(rconn)
    with rconn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SHOW REPLICA STATUS FOR CHANNEL '{CHANNEL}'" if flavor.is_mysql else
                    f"SHOW SLAVE '{CHANNEL}' STATUS")
        row = cur.fetchone() or {}
        cur.execute(flavor.replica_gtid_sql)
        executed = next(iter(cur.fetchone().values()))
    prefix, source = ("Replica", "Source") if flavor.is_mysql else ("Slave", "Master")
    return (f"the replica server's channel {CHANNEL!r}: {prefix}_IO_Running {row.get(f'{prefix}_IO_Running')}, "
            f"{prefix}_SQL_Running {row.get(f'{prefix}_SQL_Running')}, Seconds_Behind_{source} "
            f"{row.get(f'Seconds_Behind_{source}')}, {source}_Server_Id {row.get(f'{source}_Server_Id')}, "
            f"executed {executed}")


def logged_transactions(pconn, start: str) -> int:
    """Transactions the primary's binlog gained since ``start``."""
    return primary_position(pconn).count() - GtidSet.parse(start).count()


def command_name() -> str:
    """How the user can run this program: by name when it is on PATH, else its path."""
    if shutil.which("rdma-bridge"):
        return "rdma-bridge"
    beside = Path(sys.executable).with_name("rdma-bridge")
    if beside.exists():
        try:
            return str(beside.relative_to(Path.cwd()))
        except ValueError:
            return str(beside)
    return f"{sys.executable} -m bridge"


def _mask(url: str) -> str:
    return str(MysqlUrl.parse(url))


def reset_channel(pconn, rconn, channel: str) -> str:
    """The demo replays its own schema from scratch each run: its channel starts at
    the primary's position now, before the workload's DROP/CREATE DATABASE."""
    start = str(primary_position(pconn))
    with rconn.cursor() as rc:
        if _has_meta(rc):
            rc.execute(f"DELETE FROM {META} WHERE channel=%s", (channel,))
    return start


def _has_meta(cur) -> bool:
    return bool(cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA='rdma_bridge' "
                            "AND TABLE_NAME='bridge_meta'"))


class bridge_processes:
    """Both ends as real processes for the demo; stopped with SIGTERM on exit."""

    def __init__(self, info: dict, transport: str, state_dir: str, start_gtid: str, apply_mode: str = "auto") -> None:
        self.port = free_port()
        self.replica = replica_process(info["replica"], self.port, transport, CHANNEL, state_dir,
                                       extra=("--apply-mode", apply_mode))
        self.primary = primary_process(info["primary"], self.port, transport, start_gtid, state_dir)

    def __enter__(self) -> bridge_processes:
        self.replica.start()
        wait_port(self.port, alive=self.replica.check_alive)
        self.primary.start()
        return self

    def check_alive(self) -> None:
        self.replica.check_alive()
        self.primary.check_alive()

    def __exit__(self, *exc) -> None:
        self.primary.stop()
        self.replica.stop()
