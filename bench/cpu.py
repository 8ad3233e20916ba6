"""CPU per replicated transaction: each bridge process and the replica server, against
the native replica server, measured in the same run while both follow the primary.

A paced client offers RATE transactions/s for SECONDS, either single-row INSERTs or
UPDATEs of 3 rows; the bridge (into the sandbox replica) and the native MariaDB
replica (the third sandbox server) replicate the same stream at the same time. CPU
is user+system time from /proc/<pid>/stat before and after (every thread of the
process), divided by the transactions the primary committed in between (the load
and the heartbeat rows, which both replicas apply); so are the voluntary context
switches of all the process's threads (/proc/<pid>/task/*/status), each a sleep and
a wakeup. The floor of each process's loop as measured here: its context switches per transaction times the
CPU one wakeup costs on this machine, measured in the same run (bench/wakeup.py).

    python -m bench.cpu [--rate 1000] [--seconds 10] [--transports shm,tcp,tcp+tls] [--modes binlog,sql]
                        [--pure binlog/shm]

tcp+tls: the tcp transport with TLS on the bridge's connections (the cost of TLS).
--pure: setups measured again with the bridge on its pure-Python hot path (the
compiled module's gain, same run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pymysql

from bench import wakeup
from bench.common import BENCH_SCHEMA, Bench
from bridge.config import MysqlUrl
from bridge.lab.workload import numbers
from bridge.wire import native

TICK = os.sysconf("SC_CLK_TCK")
ROWS = 30_000  # the 3-row updates spread over this many rows
WORKLOADS = {
    "single-row": lambda n: f"INSERT INTO {BENCH_SCHEMA}.cpu1 VALUES ({n}, {n % 1000}, 'row {n}')",
    "3-row update": lambda n: f"UPDATE {BENCH_SCHEMA}.cpu3 SET v = v + 1 WHERE id IN "
                              f"({3 * n % ROWS}, {(3 * n + 1) % ROWS}, {(3 * n + 2) % ROWS})",
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (their split is a tick sample: not used)


def context_switches(pid: int) -> dict[int, int]:
    """Voluntary context switches of every thread of ``pid`` so far, by thread id (each
    one a sleep and a wakeup: the kernel's part of the CPU per transaction)."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    counts[int(task.name)] = int(line.split()[1])
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
    return counts


def switched_since(pid: int, before: dict[int, int]) -> int:
    """Context switches since ``before`` of the threads alive now (a thread started
    meanwhile counts whole; one that ended meanwhile is lost, never negative)."""
    return sum(n - before.get(tid, 0) for tid, n in context_switches(pid).items())


def server_pid(bench: Bench, role: str) -> int:
    return int((bench.box.dir / role / "mysqld.pid").read_text())


def paced(url: MysqlUrl, statement, rate: int, seconds: float, first: int) -> int:
    conn = pymysql.connect(**url.connect_args(), autocommit=True)
    interval, started, n = 1.0 / rate, time.perf_counter(), 0
    with conn.cursor() as cur:
        while n < rate * seconds:
            delay = started + n * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            cur.execute(statement(first + n))
            n += 1
    conn.close()
    return n


def seq(bench: Bench) -> int:
    return bench.primary_pos().count()  # one more per transaction the primary commits, either flavor


def measure(bench: Bench, workload: str, rate: int, seconds: float, first: int, wakeup_us: float | None = None) -> dict:
    """``wakeup_us``: what one wakeup costs here (bench.wakeup), for each process's floor."""
    pids = {"primary side": bench.bridge_primary.proc.pid, "replica side": bench.bridge_replica.proc.pid,
            "replica server": server_pid(bench, "replica"), "native replica server": server_pid(bench, "native")}
    before, start_seq = {k: cpu_seconds(p) for k, p in pids.items()}, seq(bench)
    switches = {k: context_switches(p) for k, p in pids.items()}
    paced(MysqlUrl.parse(bench.info["primary_admin"]), WORKLOADS[workload], rate, seconds, first)
    target = bench.primary_pos()
    bench.wait(bench.native_pos, target)
    bench.wait(bench.bridge_pos, target, alive=bench.bridge_alive)
    txns = seq(bench) - start_seq
    us = {k: round((cpu_seconds(p) - before[k]) / txns * 1e6, 1) for k, p in pids.items()}
    switched = {k: round(switched_since(p, switches[k]) / txns, 2) for k, p in pids.items()}
    bridge_total = us["primary side"] + us["replica side"] + us["replica server"]
    floor = {} if wakeup_us is None else {"wakeup_floor_us_per_txn": {k: round(n * wakeup_us, 1)
                                                                      for k, n in switched.items()}}
    return {"workload": workload, "transactions": txns, "cpu_us_per_txn": us,
            "context_switches_per_txn": switched, **floor,
            "bridge_processes_us": round(us["primary side"] + us["replica side"], 1),
            "bridge_total_us": round(bridge_total, 1),
            "ratio_bridge_total_over_native_server": round(bridge_total / us["native replica server"], 2)}


def run(rate: int, seconds: float, state_dir: str, transports=("shm", "tcp", "tcp+tls"), modes=("binlog", "sql"),
        log=print, pure=(("binlog", "shm"),), flavor: str | None = None) -> dict:
    """``pure``: the (mode, transport) setups measured once more with the bridge on
    its pure-Python hot path (RDMA_BRIDGE_PURE_PYTHON=1), for the compiled one's gain.
    ``flavor``: the sandbox's servers (e.g. mysql-9.7: a native MySQL replica the baseline)."""
    rows, first = [], 1
    try:
        wakeup_us = wakeup.measure()
        log(f"one wakeup costs {wakeup_us} us of CPU here (bench.wakeup, paced at 1 ms)")
    except (OSError, subprocess.CalledProcessError) as exc:
        wakeup_us = None
        log(f"no wakeup floor in this run: bench.wakeup failed: {exc}")
    setups = [(m, t, "compiled") for m in modes for t in transports] + [(m, t, "pure") for m, t in pure]
    for mode, transport, hot_path in setups:
        if hot_path == "pure":
            os.environ[native.PURE_ENV] = "1"  # the bridge processes inherit it
        bench = Bench(state_dir, transport, extra_replica=("--apply-mode", mode), flavor=flavor)
        try:
            bench.start_bridge()
            _tables(bench)
            for workload in WORKLOADS:
                row = measure(bench, workload, rate, seconds, first, wakeup_us)
                first += int(rate * seconds)
                rows.append({"apply_mode": mode, "transport": transport, "hot_path": hot_path, **row})
                log(f"{mode}/{transport}/{hot_path}/{workload}: {row['cpu_us_per_txn']} "
                    f"(bridge total {row['bridge_total_us']} us, "
                    f"{row['ratio_bridge_total_over_native_server']}x native); "
                    f"context switches per txn {row['context_switches_per_txn']}")
        finally:
            bench.stop()
            os.environ.pop(native.PURE_ENV, None)
    return {"benchmark": "CPU per transaction, bridge (both processes + replica server) vs native replica server",
            "servers": flavor or "local",
            "rate": rate, "seconds": seconds, "us_per_wakeup": wakeup_us, "rows": rows}


def hot_path_ratios(result: dict) -> dict:
    """Both bridge processes' CPU per transaction on the compiled hot path over the
    pure-Python twin, same run."""
    rows = {(r["apply_mode"], r["transport"], r["workload"], r.get("hot_path", "compiled")): r
            for r in result["rows"]}
    out = {}
    for (mode, transport, workload, hot_path), twin in rows.items():
        compiled = rows.get((mode, transport, workload, "compiled"))
        if hot_path == "pure" and compiled:
            out[f"compiled hot path: CPU of both bridge processes per txn, {workload} over {transport} ({mode} "
                "apply), compiled over its pure-Python twin (lower is better)"] = \
                round(compiled["bridge_processes_us"] / twin["bridge_processes_us"], 2)
    return out


def _tables(bench: Bench) -> None:
    with bench.primary.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {BENCH_SCHEMA}")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {BENCH_SCHEMA}.cpu1 (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {BENCH_SCHEMA}.cpu3 (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
        cur.execute(f"DELETE FROM {BENCH_SCHEMA}.cpu1")
        cur.execute(f"SELECT COUNT(*) FROM {BENCH_SCHEMA}.cpu3")
        if cur.fetchone()[0] < ROWS:
            cur.execute(f"INSERT IGNORE INTO {BENCH_SCHEMA}.cpu3 SELECT seq, 0, 'r' "
                        f"FROM {numbers(bench.primary, BENCH_SCHEMA, ROWS - 1, 0)}")
    target = bench.primary_pos()
    bench.wait(bench.native_pos, target)
    bench.wait(bench.bridge_pos, target, alive=bench.bridge_alive)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--transports", default="shm,tcp,tcp+tls")
    ap.add_argument("--modes", default="binlog,sql")
    ap.add_argument("--pure", default="binlog/shm", help="mode/transport setups measured on the pure-Python hot "
                                                          "path too (comma-separated; empty: none)")
    ap.add_argument("--state-dir", default=".sandbox")
    ap.add_argument("--flavor", default=None, help="the sandbox's servers, e.g. mysql-9.7 (its own --state-dir)")
    args = ap.parse_args()
    pure = [tuple(setup.split("/")) for setup in args.pure.split(",") if setup]
    result = run(args.rate, args.seconds, args.state_dir, args.transports.split(","), args.modes.split(","),
                 log=_stderr, pure=pure, flavor=args.flavor)
    result["ratios"] = hot_path_ratios(result)
    print(json.dumps(result, indent=2))


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
