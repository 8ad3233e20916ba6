"""Fan-out: the primary side's CPU per transaction feeding 1, 2 and 3 replica sides from
one read of the binlog, against 1, 2 and 3 separate primary sides (one per replica side,
each its own binlog dump) in the same run; and the first replica's latency (the
``bridge`` stage: commit read from the primary's binlog -> committed on the replica)
with all three streaming, then with the third replica side frozen (SIGSTOP).

A paced client offers RATE single-row INSERTs/s for SECONDS; CPU is user+system time of
the primary side processes from /proc, over the transactions the primary committed
(heartbeat rows off, so that is the load alone); the primary server's too (the client's
load included), where each binlog dump is a thread of its own.

With ``--semi-sync received|applied`` the primary runs semi-sync (timeout
``--ack-timeout-ms``) and every primary side is a semi-sync replica, a fan-out one with
``--semi-sync-quorum`` (at most its replica sides); each row then also gives the fan-out's
CPU per transaction over the single replica side's (the first row).

    python -m bench.fanout [--rate 1000] [--seconds 10] [--transport shm] [--state-dir .sandbox-fanout]
                           [--semi-sync received --semi-sync-quorum 2 --ack-timeout-ms 2]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import urllib.request

from bench.common import BENCH_SCHEMA
from bench.cpu import cpu_seconds, paced
from bridge.config import MysqlUrl
from bridge.lab.ports import free_port
from bridge.lab.procs import BridgeProcess, primary_process, replica_process, wait_port
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect
from bridge.model import GtidSet
from bridge.server.flavor import Flavor

ROLES = ("replica", "replica2", "replica3")
SERVER_ID = 20_000


def status(proc: BridgeProcess, timeout_s: float = 30.0) -> dict:
    """A bridge process's /status (waiting for its endpoint while it starts)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://{proc.metrics_address}/status", timeout=5) as answer:
                return json.loads(answer.read())
        except OSError:
            proc.check_alive()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class FanOutBench:
    def __init__(self, state_dir: str, transport: str, semi_sync: str = "off", quorum: int = 1) -> None:
        self.dir, self.transport, self.semi_sync, self.quorum = state_dir, transport, semi_sync, quorum
        self.box = Sandbox(state_dir)
        self.info = self.box.up(replicas=3)
        self.primary = connect(MysqlUrl.parse(self.info["primary_admin"]))
        for role in ("primary", *ROLES):  # a sandbox kept from another run may lack it on a replica
            conn = connect(MysqlUrl.parse(self.info[f"{role}_admin"]))
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_log_bin=0")
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {BENCH_SCHEMA}")
                cur.execute(f"CREATE TABLE IF NOT EXISTS {BENCH_SCHEMA}.fan (id INT PRIMARY KEY, v INT, "
                            "note VARCHAR(40))")
                cur.execute(f"DELETE FROM {BENCH_SCHEMA}.fan")
            conn.close()
        self.start_gtid = self.position()
        self.channel = f"fanout_{time.time_ns()}"
        self.ports = [free_port() for _ in ROLES]
        self.replicas = [self._replica(i) for i in range(len(ROLES))]
        self.primaries: list[BridgeProcess] = []
        self.first = 1

    def _replica(self, i: int) -> BridgeProcess:
        proc = replica_process(self.info[ROLES[i]], self.ports[i], self.transport, self.channel, self.dir).start()
        wait_port(self.ports[i], alive=proc.check_alive)
        return proc

    def position(self) -> str:
        with self.primary.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            return cur.fetchone()[0]

    def seq(self) -> int:
        return GtidSet.parse(self.position()).count()

    def start_primaries(self, members: list[list[int]]) -> None:
        """One primary side per list, feeding the replica sides it names."""
        for n, group in enumerate(members):
            more = [a for i in group[1:] for a in ("--replica", f"127.0.0.1:{self.ports[i]}")]
            if self.semi_sync != "off":
                more += ["--semi-sync", self.semi_sync, "--semi-sync-quorum", str(min(self.quorum, len(group)))]
            self.primaries.append(primary_process(
                self.info["primary"], self.ports[group[0]], self.transport, self.start_gtid, self.dir,
                extra=(*more, "--server-id", str(SERVER_ID + 10 * n), "--heartbeat-interval", "0")).start())
        self.wait_caught_up([i for group in members for i in group])

    def stop_primaries(self) -> None:
        for proc in self.primaries:
            proc.stop()
        self.primaries = []

    def alive(self) -> None:
        for proc in (*self.primaries, *self.replicas):
            proc.check_alive()

    def reached(self, i: int, target: GtidSet) -> bool:
        conn = connect(MysqlUrl.parse(self.info[f"{ROLES[i]}_admin"]))
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT gtid_set FROM rdma_bridge.bridge_meta WHERE channel=%s", (self.channel,))
                row = cur.fetchone()
            return bool(row) and GtidSet.parse(row[0]).contains_all(target)
        finally:
            conn.close()

    def wait_caught_up(self, which, timeout_s: float = 120.0, rejoined: bool = True) -> None:
        """The replica sides ``which`` hold what the primary committed; ``rejoined``:
        and every fan-out member streams from the shared read again."""
        with self.primary.cursor() as cur:  # one transaction, so a fresh channel registers everywhere
            cur.execute(f"REPLACE INTO {BENCH_SCHEMA}.fan VALUES (0, {time.monotonic_ns() % 2**31}, 'mark')")
        target, deadline = GtidSet.parse(self.position()), time.monotonic() + timeout_s
        while not all(self.reached(i, target) for i in which):
            self.alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"bench.fanout: replicas {which} not at {target} within {timeout_s:.0f}s")
            time.sleep(0.05)
        for proc in self.primaries if rejoined else ():
            while any(m["state"] != "streaming" for m in status(proc).get("replicas", ())):
                self.alive()
                if time.monotonic() > deadline:
                    raise TimeoutError("bench.fanout: a member did not rejoin the shared stream")
                time.sleep(0.05)

    def load(self, rate: int, seconds: float) -> int:
        statement = lambda n: f"INSERT INTO {BENCH_SCHEMA}.fan VALUES ({n}, {n % 1000}, 'row {n}')"  # noqa: E731
        sent = paced(MysqlUrl.parse(self.info["primary_admin"]), statement, rate, seconds, self.first)
        self.first += sent
        return sent

    def set_semi_sync(self, enabled: bool, timeout_ms: int = 10_000) -> None:
        """The primary's semi-sync (its plugin's own names, bridge.server.flavor) on or off."""
        flavor = Flavor.of(self.primary)
        with self.primary.cursor() as cur:
            cur.execute(f"SET GLOBAL {flavor.semi_sync_variable('timeout')}={int(timeout_ms)}")
            cur.execute(f"SET GLOBAL {flavor.semi_sync_variable('enabled')}={'ON' if enabled else 'OFF'}")

    def semi_sync_counts(self) -> tuple[int, int]:
        """The primary's commits acknowledged and not acknowledged in time, so far."""
        prefix = Flavor.of(self.primary).semi_sync_status_prefix
        with self.primary.cursor() as cur:
            cur.execute(f"SHOW GLOBAL STATUS LIKE '{prefix}%tx'")
            got = {name.lower()[len(prefix):]: int(value) for name, value in cur.fetchall()}
        return got.get("yes_tx", 0), got.get("no_tx", 0)

    def primary_cpu(self, rate: int, seconds: float, which) -> dict:
        """The primary sides' CPU per transaction over one paced load."""
        server = int((self.box.dir / "primary" / "mysqld.pid").read_text())
        before, start = [cpu_seconds(p.proc.pid) for p in self.primaries], self.seq()
        server_before, acked_before = cpu_seconds(server), self.semi_sync_counts()
        self.load(rate, seconds)
        self.wait_caught_up(which)
        txns = self.seq() - start
        used = sum(cpu_seconds(p.proc.pid) - b for p, b in zip(self.primaries, before))
        out = {"transactions": txns, "primary_sides_us_per_txn": round(used / txns * 1e6, 1),
               "primary_server_us_per_txn": round((cpu_seconds(server) - server_before) / txns * 1e6, 1)}
        if self.semi_sync != "off":
            acked = self.semi_sync_counts()
            out["semi_sync_acked"], out["semi_sync_not_acked"] = (acked[0] - acked_before[0],
                                                                  acked[1] - acked_before[1])
        return out

    def restart_replica(self, i: int) -> None:
        """A fresh replica side: its stages count from here."""
        self.replicas[i].stop()
        self.replicas[i] = self._replica(i)

    def close(self) -> None:
        self.stop_primaries()
        for proc in self.replicas:
            proc.stop()
        self.primary.close()


def run(rate: int, seconds: float, state_dir: str, transport: str = "shm", log=print, counts=(1, 2, 3),
        frozen: bool = True, semi_sync: str = "off", quorum: int = 1, ack_timeout_ms: int = 10_000) -> dict:
    bench = FanOutBench(state_dir, transport, semi_sync, quorum)
    rows, latency = [], {}
    if semi_sync != "off":
        bench.set_semi_sync(True, ack_timeout_ms)
    try:
        for n in counts:
            members = list(range(n))
            bench.start_primaries([members])
            shared = bench.primary_cpu(rate, seconds, members)
            bench.stop_primaries()
            bench.start_primaries([[i] for i in members])
            separate = bench.primary_cpu(rate, seconds, members)
            bench.stop_primaries()
            row = {"replicas": n, "fan_out": shared, "separate": separate,
                   "ratio_fan_out_over_separate": round(shared["primary_sides_us_per_txn"] /
                                                        separate["primary_sides_us_per_txn"], 2)}
            rows.append(row)
            row["ratio_primary_server_fan_out_over_separate"] = round(
                shared["primary_server_us_per_txn"] / separate["primary_server_us_per_txn"], 2)
            row["ratio_fan_out_over_first_row"] = round(shared["primary_sides_us_per_txn"] /
                                                        rows[0]["fan_out"]["primary_sides_us_per_txn"], 2)
            log(f"{n} replica(s): one primary side {shared['primary_sides_us_per_txn']} us/txn, {n} separate "
                f"{separate['primary_sides_us_per_txn']} us/txn ({row['ratio_fan_out_over_separate']}x); the primary "
                f"server (its load included) {shared['primary_server_us_per_txn']} vs "
                f"{separate['primary_server_us_per_txn']} us/txn")
        bench.start_primaries([[0, 1, 2]] if frozen else [])
        for case in ("all streaming", "third frozen") if frozen else ():
            bench.restart_replica(0)
            bench.wait_caught_up([0, 1, 2])
            frozen = bench.replicas[2].proc if case == "third frozen" else None
            if frozen is not None:
                frozen.send_signal(signal.SIGSTOP)
            try:
                bench.load(rate, seconds)
                bench.wait_caught_up([0, 1], rejoined=frozen is None)
                stage = status(bench.replicas[0])["stages"]["bridge"]
            finally:
                if frozen is not None:
                    frozen.send_signal(signal.SIGCONT)
            latency[case] = {k: stage[k] for k in ("count", "p50", "p99", "p999", "max")}
            log(f"first replica's bridge stage, {case}: {latency[case]}")
        if frozen:
            bench.wait_caught_up([0, 1, 2])
    finally:
        if semi_sync != "off":
            bench.set_semi_sync(False)
        bench.close()
    base = latency.get("all streaming") or {"p50": 0, "p99": 0, "p999": 0}
    return {"benchmark": "fan-out: primary side CPU per txn, one read for N replica sides vs N separate primary "
                         "sides; the first replica's latency while the third is frozen",
            "rate": rate, "seconds": seconds, "transport": transport, "rows": rows,
            "semi_sync": semi_sync, "semi_sync_quorum": quorum if semi_sync != "off" else None,
            "ack_timeout_ms": ack_timeout_ms if semi_sync != "off" else None,
            "first_replica_bridge_stage_us": latency,
            "ratio_frozen_over_streaming": {p: round(latency["third frozen"][p] / base[p], 2)
                                            for p in ("p50", "p99", "p999") if base[p] and "third frozen" in latency}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--transport", default="shm")
    ap.add_argument("--replicas", default="1,2,3", help="replica side counts measured, comma-separated")
    ap.add_argument("--no-frozen", action="store_true", help="skip the latency with the third replica side frozen")
    ap.add_argument("--state-dir", default=".sandbox-fanout")
    ap.add_argument("--semi-sync", default="off", choices=("off", "received", "applied"))
    ap.add_argument("--semi-sync-quorum", type=int, default=2)
    ap.add_argument("--ack-timeout-ms", type=int, default=10_000, help="the primary's semi-sync timeout")
    args = ap.parse_args()
    print(json.dumps(run(args.rate, args.seconds, args.state_dir, args.transport,
                         log=lambda m: print(m, file=sys.stderr, flush=True),
                         counts=[int(n) for n in args.replicas.split(",")], frozen=not args.no_frozen,
                         semi_sync=args.semi_sync, quorum=args.semi_sync_quorum,
                         ack_timeout_ms=args.ack_timeout_ms), indent=2))


if __name__ == "__main__":
    main()
