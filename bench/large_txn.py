"""Benchmark/showcase: one huge transaction through a small ring, with real bridge
processes, reporting time and each process's peak RSS (VmHWM).

    python bench/large_txn.py [--rows 200000] [--row-bytes 520] [--ring-bytes 8388608] [--transport shm]

Prints one JSON object. The binlog size of the transaction is measured on the primary.
"""

from __future__ import annotations

import argparse
import json
import time

from bridge.check.compare import compare_databases
from bridge.check.positions import primary_position
from bridge.config import MysqlUrl
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, wait_port
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect, numbers
from bridge.model import GtidSet


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def binlog_bytes(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return sum(int(row[1]) for row in cur.fetchall())


def applied_gtid(rconn, channel):
    with rconn.cursor() as cur:
        cur.execute("SELECT gtid_set FROM rdma_bridge.bridge_meta WHERE channel=%s", (channel,))
        row = cur.fetchone()
    return row[0] if row else ""


def run(rows: int, row_bytes: int, ring_bytes: int, transport: str, state_dir: str) -> dict:
    info = Sandbox(state_dir).up()
    p, r = MysqlUrl.parse(info["primary_admin"]), MysqlUrl.parse(info["replica_admin"])
    pconn, rconn = connect(p), connect(r)
    start = str(primary_position(pconn))
    channel, port = f"large_{int(time.time())}", free_port()
    rep = replica_process(info["replica"], port, transport, channel, state_dir, ring_bytes=ring_bytes).start()
    wait_port(port, alive=rep.check_alive)
    pri = primary_process(info["primary"], port, transport, start, state_dir).start()
    with pconn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS bench_large")
        cur.execute("CREATE DATABASE bench_large")
        cur.execute("CREATE TABLE bench_large.t (id INT PRIMARY KEY, pad VARCHAR(2000), k INT)")
    created = primary_position(pconn)
    while not GtidSet.parse(applied_gtid(rconn, channel)).contains_all(created):  # both ends up and streaming
        pri.check_alive()
        rep.check_alive()
        time.sleep(0.05)
    base_rss = {"primary": peak_rss_mb(pri.proc.pid), "replica": peak_rss_mb(rep.proc.pid)}
    before = binlog_bytes(pconn)
    t0 = time.perf_counter()
    with pconn.cursor() as cur:
        cur.execute(f"INSERT INTO bench_large.t SELECT seq, REPEAT(CHAR(65 + seq % 26), {row_bytes}), seq % 7 "
                    f"FROM {numbers(pconn, 'bench_large', rows - 1, 0)}")
    target = primary_position(pconn)
    committed = time.perf_counter() - t0
    txn_bytes = binlog_bytes(pconn) - before
    while not GtidSet.parse(applied_gtid(rconn, channel)).contains_all(target):  # heartbeats run past it
        pri.check_alive()
        rep.check_alive()
        time.sleep(0.05)
    replicated = time.perf_counter() - t0
    peaks = {"primary": peak_rss_mb(pri.proc.pid), "replica": peak_rss_mb(rep.proc.pid)}
    pri.stop()
    rep.stop()
    same = compare_databases(p, r, ["bench_large"]).ok
    return {"rows": rows, "transaction_binlog_mb": round(txn_bytes / 2**20, 1), "ring_mb": ring_bytes / 2**20,
            "transport": transport, "primary_commit_s": round(committed, 2),
            "replicated_s": round(replicated, 2), "rows_per_s": round(rows / replicated),
            "peak_rss_mb": {k: round(v, 1) for k, v in peaks.items()},
            "idle_rss_mb": {k: round(v, 1) for k, v in base_rss.items()}, "identical": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--row-bytes", type=int, default=520)
    ap.add_argument("--ring-bytes", type=int, default=8 << 20)
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--state-dir", default=".sandbox")
    args = ap.parse_args()
    print(json.dumps(run(args.rows, args.row_bytes, args.ring_bytes, args.transport, args.state_dir), indent=2))


if __name__ == "__main__":
    main()
