"""`make soak`: a random mix of faults against a steady workload, for N minutes.

Real bridge processes (tcp transport) with fault proxies on the bridge link, on the
binlog connection to the primary and on the applier's connection to the replica.
Each cycle injects one fault, measures the time until the replica holds everything
the primary had committed when the fault hit (time to recover), then pauses the
workload, lets the replica catch up and compares both databases row by row
(lost = rows missing on the replica, duplicated = extra rows). Prints a summary and
a markdown fault matrix; writes the JSON next to it.

    python -m tests.faults.soak --minutes 5 [--seed 1] [--out soak-result.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict

from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl
from bridge.lab.ports import free_port
from bridge.lab.procs import BridgeProcess, replica_process, wait_port
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import MixedWorkload, connect, create_schema
from bridge.model import GtidSet
from tests.faults.proxy import FaultProxy

SCHEMA, CHANNEL = "soak", "soak"
RECOVER_TIMEOUT_S = 120.0


class SteadyWorkload:
    """A throttled mixed workload that survives primary restarts (it reconnects)."""

    def __init__(self, url: MysqlUrl, rate: int) -> None:
        self.url, self.rate = url, rate
        self.running, self.stopped = threading.Event(), threading.Event()
        self.transactions, self.errors = 0, 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        workload = None
        while not self.stopped.is_set():
            if not self.running.wait(0.1):
                continue
            try:
                workload = workload or MixedWorkload(connect(self.url), SCHEMA, seed=random.randrange(10**6))
                started = time.perf_counter()
                self.transactions += workload.run(10) - (workload.transactions - 10)
                time.sleep(max(0.0, 10 / self.rate - (time.perf_counter() - started)))
            except Exception:  # the primary restarting under us: reconnect and go on
                self.errors += 1
                workload = None
                time.sleep(0.2)


class Soak:
    def __init__(self, state_dir: str, seed: int, log_dir: str) -> None:
        self.rng = random.Random(seed)
        self.box = Sandbox(state_dir)
        info = self.box.up()
        self.urls = {k: MysqlUrl.parse(v) for k, v in info.items() if v.startswith("mysql://")}
        self.admin_p, self.admin_r = self.urls["primary_admin"], self.urls["replica_admin"]
        self.proxies = {"link": None, "binlog": FaultProxy((self.urls["primary"].host, self.urls["primary"].port)),
                        "apply": FaultProxy((self.urls["replica"].host, self.urls["replica"].port))}
        self.port = free_port()
        self.proxies["link"] = FaultProxy(("127.0.0.1", self.port))
        self.log_dir = log_dir
        self.results: dict[str, list[dict]] = defaultdict(list)

    # --- processes ---------------------------------------------------------

    def start(self) -> None:
        pconn = connect(self.admin_p)
        rconn = connect(self.admin_r)
        with rconn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS rdma_bridge")
        with pconn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            start = cur.fetchone()[0]
        self._drop_channel(rconn)
        target = _url_text(self.urls["replica"], self.proxies["apply"])
        source = _url_text(self.urls["primary"], self.proxies["binlog"])
        self.replica = replica_process(target, self.port, "tcp", CHANNEL, self.log_dir)
        link = self.proxies["link"].address
        self.primary = BridgeProcess("primary", ["start-primary", "--replica", f"{link[0]}:{link[1]}",
                                                 "--transport", "tcp", "--start-gtid", start,
                                                 "--backpressure-timeout", "0"],
                                     {"RDMA_BRIDGE_SOURCE": source}, self.log_dir)
        self.replica.start()
        wait_port(self.port, alive=self.replica.check_alive)
        self.primary.start()
        create_schema(pconn, SCHEMA)
        self.workload = SteadyWorkload(self.admin_p, rate=300)
        self.workload.thread.start()

    def _drop_channel(self, rconn) -> None:
        with rconn.cursor() as cur:
            if cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA='rdma_bridge' "
                           "AND TABLE_NAME='bridge_meta'"):
                cur.execute("DELETE FROM rdma_bridge.bridge_meta WHERE channel=%s", (CHANNEL,))

    # --- faults ------------------------------------------------------------

    def faults(self) -> dict:
        link, binlog, apply = self.proxies["link"], self.proxies["binlog"], self.proxies["apply"]
        return {
            "link cut": link.cut,
            "link stall 2s": lambda: link.stall(2.0),
            "link corrupt byte": lambda: link.corrupt(self.rng.randrange(20, 200)),
            "binlog connection cut": binlog.cut,
            "binlog stall 4s": lambda: binlog.stall(4.0),
            "replica connection cut": apply.cut,
            "kill -9 primary bridge": lambda: self._bounce(self.primary, signal.SIGKILL),
            "kill -9 replica bridge": lambda: self._bounce(self.replica, signal.SIGKILL),
            "SIGTERM replica bridge": lambda: self._bounce(self.replica, signal.SIGTERM),
            "restart replica server": lambda: self._restart_server("replica"),
            "restart primary server": lambda: self._restart_server("primary"),
            "cpu hog 3s": lambda: _cpu_hog(3.0),
        }

    def _bounce(self, proc: BridgeProcess, sig: int) -> None:
        proc.stop(sig)
        proc.start()

    def _restart_server(self, role: str) -> None:
        self.box.stop_server(role)
        time.sleep(0.3)
        self.box.up()

    # --- one cycle ---------------------------------------------------------

    def cycle(self, name: str, inject) -> dict:
        """Recovery: from the fault until a transaction committed after it (a marker
        written once the fault is in place) is on the replica."""
        self.workload.running.set()
        time.sleep(self.rng.uniform(0.5, 2.0))
        t0 = time.monotonic()
        inject()
        after_fault = self._mark()
        self._wait(lambda: self._replica_has(after_fault), f"recovery from {name}")
        recovered = time.monotonic() - t0
        self.workload.running.clear()
        time.sleep(0.2)
        final = self._primary_position()
        self._wait(lambda: self._replica_has(final), f"catch-up after {name}")
        diff = compare_databases(self.admin_p, self.admin_r, [SCHEMA])
        lost = sum(d.missing for d in diff.diffs)
        duplicated = sum(d.extra for d in diff.diffs)
        row = {"fault": name, "recover_s": round(recovered, 3), "lost": lost, "duplicated": duplicated}
        self.results[name].append(row)
        return row

    def _mark(self) -> GtidSet:
        """Commit a marker transaction; its position."""
        return self._primary_position(f"INSERT INTO {SCHEMA}.probe VALUES (%s, %s) ON DUPLICATE KEY UPDATE t=%s")

    def _primary_position(self, marker: str = "") -> GtidSet:
        for _ in range(200):
            try:
                conn = connect(self.admin_p)
                with conn.cursor() as cur:
                    if marker:
                        cur.execute(marker, (self.rng.randrange(100), time.time(), time.time()))
                    cur.execute("SELECT @@gtid_binlog_pos")
                    pos = GtidSet.parse(cur.fetchone()[0])
                conn.close()
                return pos
            except Exception:  # primary restarting
                time.sleep(0.1)
        raise RuntimeError("soak: primary unreachable for 20s")

    def _replica_has(self, pos: GtidSet) -> bool:
        try:
            conn = connect(self.admin_r)
            with conn.cursor() as cur:
                cur.execute("SELECT gtid_set FROM rdma_bridge.bridge_meta WHERE channel=%s", (CHANNEL,))
                row = cur.fetchone()
            conn.close()
        except Exception:  # replica restarting
            return False
        have = GtidSet.parse(row[0] if row else "")
        return have.contains_all(pos)

    def _wait(self, predicate, what: str) -> None:
        deadline = time.monotonic() + RECOVER_TIMEOUT_S
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError(f"soak: no {what} within {RECOVER_TIMEOUT_S:.0f}s; logs in {self.log_dir}")
            for proc in (self.primary, self.replica):
                if not proc.alive():
                    raise RuntimeError(f"soak: {proc.name} bridge exited during {what}:\n{proc.log_tail()}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.workload.stopped.set()
        self.workload.running.clear()
        for proc in (self.primary, self.replica):
            proc.stop()
        for proxy in self.proxies.values():
            proxy.close()


def _url_text(url: MysqlUrl, proxy: FaultProxy) -> str:
    via = dataclasses.replace(url, host=proxy.address[0], port=proxy.address[1])
    return f"mysql://{via.user}:{via.password}@{via.host}:{via.port}"


def _cpu_hog(seconds: float) -> None:
    for _ in range(2):
        subprocess.Popen([sys.executable, "-c", f"import time\nt=time.time()+{seconds}\nwhile time.time()<t: pass"])


def reconnects(proc: BridgeProcess) -> int:
    with open(proc.log_path, errors="replace") as f:
        return sum(re.search(r"attempt \d+/\d+ in", line) is not None for line in f)


def matrix(results: dict[str, list[dict]]) -> str:
    lines = ["| fault | runs | lost | duplicated | recover median (s) | recover max (s) |", "|---|---|---|---|---|---|"]
    for name, rows in sorted(results.items()):
        times = [r["recover_s"] for r in rows]
        lines.append(f"| {name} | {len(rows)} | {sum(r['lost'] for r in rows)} | "
                     f"{sum(r['duplicated'] for r in rows)} | {statistics.median(times):.2f} | {max(times):.2f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description="Random faults against a steady workload.")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--state-dir", default=".sandbox-soak")
    ap.add_argument("--out", default="soak-result.json")
    args = ap.parse_args()
    soak = Soak(args.state_dir, args.seed, args.state_dir)
    soak.start()
    faults = soak.faults()
    deadline = time.monotonic() + args.minutes * 60
    try:
        while time.monotonic() < deadline:
            name = soak.rng.choice(sorted(faults))
            row = soak.cycle(name, faults[name])
            print(f"{time.strftime('%H:%M:%S')} {name:26} recovered in {row['recover_s']:6.2f}s  "
                  f"lost {row['lost']} duplicated {row['duplicated']}", flush=True)
    finally:
        soak.stop()
    rows = [r for rs in soak.results.values() for r in rs]
    summary = {"seed": args.seed, "minutes": args.minutes, "faults": len(rows),
               "faults_by_kind": {k: len(v) for k, v in sorted(soak.results.items())},
               "transactions": soak.workload.transactions, "workload_reconnects": soak.workload.errors,
               "bridge_reconnects": {"primary": reconnects(soak.primary), "replica": reconnects(soak.replica)},
               "lost": sum(r["lost"] for r in rows), "duplicated": sum(r["duplicated"] for r in rows),
               "final_comparison": "identical" if not any(r["lost"] or r["duplicated"] for r in rows) else "DIFFERENT",
               "runs": rows}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    print(matrix(soak.results))
    return 0 if summary["final_comparison"] == "identical" else 1


if __name__ == "__main__":
    sys.exit(main())
