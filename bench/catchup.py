"""Catch-up: a backlog of single-row transactions piles up while both replicas are
stopped; then the native MariaDB replica (1 and 4 parallel threads, optimistic)
and the bridge each catch up alone, on the same machine, in the same run.

    python -m bench.catchup [--transactions 200000] [--transport shm] [--apply-mode binlog|sql]

Prints JSON: seconds and txn/s per contender, and the bridge/native ratios.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.common import BENCH_SCHEMA, Bench, single_row_backlog
from bridge.config import MysqlUrl

TABLE = f"CREATE TABLE {BENCH_SCHEMA}.single (id INT PRIMARY KEY, v INT, note VARCHAR(40))"


def catch_up(bench: Bench, count: int, native_threads: int, start_id: int, log) -> dict:
    bench.native_sql(bench.native_flavor.stop_replica,
                     f"SET GLOBAL {bench.native_flavor.replica_workers_variable}={native_threads}")
    bench.stop_bridge_reader()
    log(f"backlog: {count} single-row transactions")
    single_row_backlog(MysqlUrl.parse(bench.info["primary_admin"]), count, start_id)
    target = bench.primary_pos()
    bench.start_native()
    native_s = bench.wait(bench.native_pos, target)
    log(f"native ({native_threads} threads): {native_s:.1f}s")
    bench.start_bridge()
    bridge_s = bench.wait(bench.bridge_pos, target, alive=bench.bridge_alive)
    log(f"bridge: {bridge_s:.1f}s")
    return {"native_threads": native_threads, "transactions": count,
            "native_s": round(native_s, 2), "native_txn_s": round(count / native_s),
            "bridge_s": round(bridge_s, 2), "bridge_txn_s": round(count / bridge_s),
            "ratio_bridge_over_native": round(native_s / bridge_s, 2)}


def run(count: int, state_dir: str, transport: str, log=print, apply_mode: str = "binlog") -> dict:
    bench = Bench(state_dir, transport, extra_replica=("--apply-mode", apply_mode))
    try:
        bench.start_bridge()
        with bench.primary.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {BENCH_SCHEMA}")
        bench.create_table(TABLE)
        target = bench.primary_pos()
        bench.wait(bench.native_pos, target)
        bench.wait(bench.bridge_pos, target, alive=bench.bridge_alive)
        rounds = [catch_up(bench, count, threads, 1 + i * count, log) for i, threads in enumerate((0, 4))]
    finally:
        bench.restart_native(workers=0)
        bench.stop()
    return {"benchmark": "catch-up, single-row transactions", "transport": transport, "apply_mode": apply_mode,
            "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=200_000)
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--apply-mode", default="binlog", choices=["binlog", "sql"])
    ap.add_argument("--state-dir", default=".sandbox")
    args = ap.parse_args()
    print(json.dumps(run(args.transactions, args.state_dir, args.transport,
                         log=lambda m: print(m, file=sys.stderr), apply_mode=args.apply_mode), indent=2))


if __name__ == "__main__":
    main()
