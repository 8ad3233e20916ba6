"""Shared pieces of the benchmarks: sandbox with the native replica, bridge
processes, positions, backlog generation."""

from __future__ import annotations

import time
from pathlib import Path

import pymysql
from pymysql.constants import CLIENT

from bridge.config import MysqlUrl
from bridge.lab.demo import relay_start, stop_server_channel
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, wait_port
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect
from bridge.model import GtidSet
from bridge.ops.certs import make_set
from bridge.relay.target import RelayTarget
from bridge.server.flavor import Flavor

BENCH_SCHEMA = "bench"


def tls_args(state_dir: str) -> tuple[str, ...]:
    """--tls-* for both bridge ends: certificates of a CA kept in the state directory."""
    files = make_set(Path(state_dir) / "bridge-tls", ["localhost", "127.0.0.1"])
    return "--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-ca", str(files.ca)


class Bench:
    """``transport``: shm, tcp, rdma, or tcp+tls (tcp with TLS on the bridge's connections)."""

    def __init__(self, state_dir: str, transport: str = "shm", extra_primary: tuple[str, ...] = (),
                 extra_replica: tuple[str, ...] = (), flavor: str | None = None) -> None:
        """``flavor``: the sandbox's servers (bridge.lab.images; None: this host's MariaDB, or
        what the state directory's sandbox was made with)."""
        self.box = Sandbox(state_dir)
        self.info = self.box.up(native_replica=True, flavor=flavor)
        self.primary = connect(MysqlUrl.parse(self.info["primary_admin"]))
        self.replica = connect(MysqlUrl.parse(self.info["replica_admin"]))
        self.native = self.box.native_connection()
        self.flavor, self.native_flavor = Flavor.of(self.primary), Flavor.of(self.native)
        self.transport, self.state_dir = transport.removesuffix("+tls"), state_dir
        tls = tls_args(state_dir) if transport.endswith("+tls") else ()
        self.extra_primary, self.extra_replica = (*extra_primary, *tls), (*extra_replica, *tls)
        # apply mode relay: the replica server's own channel applies; one for every run, positioned
        # at the primary's position now as a DBA positions a replica that holds the data
        args = list(extra_replica)
        self.relay = "--apply-mode" in args and args[args.index("--apply-mode") + 1] == "relay"
        self.channel = "bench_relay" if self.relay else f"bench_{time.time_ns()}"
        self.server_id = 10_000 + time.time_ns() % 1_000_000  # each benchmark's bridge is another replica
        self.start_gtid = relay_start(self.primary, self.replica, self.channel) if self.relay else \
            str(self.primary_pos())  # where this channel starts, whenever it first connects
        self.port = free_port()
        self.bridge_primary = self.bridge_replica = None

    def start_bridge(self) -> None:
        """Start the bridge (the reader side again, if only it was stopped); returns once the
        channel is registered on the replica."""
        if self.bridge_replica is None:
            self.bridge_replica = replica_process(self.info["replica"], self.port, self.transport, self.channel,
                                                  self.state_dir)
            self.bridge_replica.args += list(self.extra_replica)
            self.bridge_replica.start()
            wait_port(self.port, alive=self.bridge_replica.check_alive)
        self.bridge_primary = primary_process(self.info["primary"], self.port, self.transport, self.start_gtid,
                                              self.state_dir, extra=("--server-id", str(self.server_id),
                                                                     *self.extra_primary)).start()
        deadline = time.monotonic() + 30
        while not self._channel_registered():
            self.bridge_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"bench: channel {self.channel} not registered within 30s")
            time.sleep(0.02)

    def _channel_registered(self) -> bool:
        if self.relay:  # the replica server's channel is connected to the relay
            return RelayTarget(MysqlUrl.parse(self.info["replica_admin"]), self.channel).status().io_running == "Yes"
        with self.replica.cursor() as cur:
            return bool(cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA='rdma_bridge' "
                                    "AND TABLE_NAME='bridge_meta'")) and \
                bool(cur.execute("SELECT 1 FROM rdma_bridge.bridge_meta WHERE channel=%s", (self.channel,)))

    def bridge_alive(self) -> None:
        self.bridge_primary.check_alive()
        self.bridge_replica.check_alive()

    def stop_bridge_reader(self) -> None:
        self.bridge_primary.stop()

    def stop(self) -> None:
        for proc in (self.bridge_primary, self.bridge_replica):
            if proc is not None:
                proc.stop()
        if self.relay:  # the replica server's channel would keep calling a relay that is gone
            stop_server_channel(self.replica, self.channel)

    def set_replica_workers(self, workers: int) -> None:
        """Apply mode relay: the replica server's own parallel applier (its channel stopped
        and started again around it)."""
        flavor = Flavor.of(self.replica)
        with self.replica.cursor() as cur:
            cur.execute(flavor.replica_channel("STOP", self.channel))
            cur.execute(f"SET GLOBAL {flavor.replica_workers_variable}={workers}")
            cur.execute(flavor.replica_channel("START", self.channel))

    def primary_pos(self) -> GtidSet:
        with self.primary.cursor() as cur:
            cur.execute(self.flavor.gtid_position_sql)
            return GtidSet.parse(cur.fetchone()[0])

    def bridge_pos(self) -> GtidSet:
        if self.relay:
            with self.replica.cursor() as cur:
                cur.execute(Flavor.of(self.replica).replica_gtid_sql)
                return GtidSet.parse(cur.fetchone()[0] or "")
        with self.replica.cursor() as cur:
            cur.execute("SELECT gtid_set FROM rdma_bridge.bridge_meta WHERE channel=%s", (self.channel,))
            row = cur.fetchone()
        return GtidSet.parse(row[0] if row else "")

    def native_pos(self) -> GtidSet:
        with self.native.cursor() as cur:
            cur.execute(self.native_flavor.replica_gtid_sql)
            return GtidSet.parse(cur.fetchone()[0])

    def native_sql(self, *statements: str) -> None:
        with self.native.cursor() as cur:
            for s in statements:
                cur.execute(s)

    def start_native(self) -> None:
        self.native_sql(self.native_flavor.start_replica)

    def stop_native(self) -> None:
        self.native_sql(self.native_flavor.stop_replica)

    def restart_native(self, **settings) -> None:
        """The native replica stopped, ``SET GLOBAL`` each of its settings by role
        (``workers``, ``semi_sync``: each flavor's variable), started again."""
        names = {"workers": self.native_flavor.replica_workers_variable,
                 "semi_sync": self.native_flavor.replica_semi_sync_variable}
        self.native_sql(self.native_flavor.stop_replica, *(f"SET GLOBAL {names[k]}={v}" for k, v in settings.items()),
                        self.native_flavor.start_replica)

    def semi_sync_sql(self, **settings) -> None:
        """``SET GLOBAL`` the primary's semi-sync variables by name (enabled=ON, timeout=...)."""
        with self.primary.cursor() as cur:
            for name, value in settings.items():
                cur.execute(f"SET GLOBAL {self.flavor.semi_sync_variable(name)}={value}")

    def wait(self, pos_fn, target: GtidSet, timeout_s: float = 900.0, alive=lambda: None) -> float:
        """Seconds until ``pos_fn()`` holds every GTID of ``target``."""
        started = time.perf_counter()
        while not pos_fn().contains_all(target):
            alive()
            if time.perf_counter() - started > timeout_s:
                raise TimeoutError(f"bench: {target} not reached in {timeout_s}s")
            time.sleep(0.005)
        return time.perf_counter() - started

    def create_table(self, ddl: str) -> None:
        with self.primary.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {BENCH_SCHEMA}")
            cur.execute(ddl)


def single_row_backlog(url: MysqlUrl, count: int, start_id: int, batch: int = 500, progress=None) -> None:
    """``count`` single-row transactions (autocommit), sent ``batch`` per round trip."""
    conn = pymysql.connect(**url.connect_args(), autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
    with conn.cursor() as cur:
        for base in range(start_id, start_id + count, batch):
            n = min(batch, start_id + count - base)
            cur.execute(";".join(f"INSERT INTO {BENCH_SCHEMA}.single VALUES ({i}, {i % 1000}, 'row {i}')"
                                 for i in range(base, base + n)))
            while cur.nextset():
                pass
            if progress:
                progress(n)
    conn.close()
