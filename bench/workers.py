"""Parallelism sweep: catch-up of a backlog of 4-row update
transactions with 1..16 apply workers, on uniform keys and on a hot spot, bridge
(`--workers N`) next to the native MariaDB replica (`slave_parallel_threads=N`,
optimistic mode) in the same run; plus a mixed-write backlog (inserts, updates,
deletes, a keyless ledger, DDL) at 1 and 4 workers.

    python -m bench.workers [--transactions 20000] [--workers 1,2,4,8,16]

Prints JSON; the ratios are bridge txn/s over native txn/s at the same N.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

import pymysql
from pymysql.constants import CLIENT

from bench.common import BENCH_SCHEMA, Bench
from bridge.config import MysqlUrl
from bridge.lab.workload import MixedWorkload, connect, create_schema

ROWS = 100_000
HOT_ROWS = 16
TABLE = f"CREATE TABLE {BENCH_SCHEMA}.acct (id INT PRIMARY KEY, n BIGINT NOT NULL, note VARCHAR(40))"
MIXED_SCHEMA = "bench_mixed"


def update_backlog(url: MysqlUrl, count: int, hot: bool, seed: int, batch: int = 200) -> None:
    """``count`` transactions of 4 single-row UPDATEs each. Hot spot: 9 of 10 rows
    come from 16 hot ids; uniform: any of 100k ids."""
    rng = random.Random(seed)

    def pick() -> int:
        return rng.randrange(HOT_ROWS) if hot and rng.random() < 0.9 else rng.randrange(ROWS)

    conn = pymysql.connect(**url.connect_args(), autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
    with conn.cursor() as cur:
        for base in range(0, count, batch):
            parts = []
            for t in range(base, min(count, base + batch)):
                parts.append("BEGIN")
                parts += [f"UPDATE {BENCH_SCHEMA}.acct SET n = n + {t % 97 + 1}, note = 't{t}' WHERE id = {pick()}"
                          for _ in range(4)]
                parts.append("COMMIT")
            cur.execute(";".join(parts))
            while cur.nextset():
                pass
    conn.close()


def one_round(bench: Bench, workers: int, make_backlog, count: int, log) -> dict:
    """Both replicas stopped, the backlog written, then each catches up alone."""
    bench.native_sql("STOP SLAVE", f"SET GLOBAL slave_parallel_threads={workers if workers > 1 else 0}",
                     "SET GLOBAL slave_parallel_mode='optimistic'")
    bench.stop()
    bench.bridge_primary = bench.bridge_replica = None
    bench.extra_replica = ("--workers", str(workers))
    make_backlog()
    target = bench.primary_pos()
    bench.start_native()
    native_s = bench.wait(bench.native_pos, target)
    bench.start_bridge()
    bridge_s = bench.wait(bench.bridge_pos, target, alive=bench.bridge_alive)
    log(f"  workers {workers:2d}: bridge {count / bridge_s:8.0f} txn/s, native {count / native_s:8.0f} txn/s")
    return {"workers": workers, "transactions": count, "bridge_s": round(bridge_s, 2),
            "bridge_txn_s": round(count / bridge_s), "native_s": round(native_s, 2),
            "native_txn_s": round(count / native_s), "ratio_bridge_over_native": round(native_s / bridge_s, 2)}


def run(count: int, workers: list[int], state_dir: str, log=print) -> dict:
    bench = Bench(state_dir)
    admin = MysqlUrl.parse(bench.info["primary_admin"])
    out: dict = {"benchmark": "parallel apply sweep", "rows_per_txn": 4, "table_rows": ROWS,
                 "hot_rows": HOT_ROWS, "sweeps": {}, "mixed": []}
    try:
        bench.start_bridge()
        with bench.primary.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {BENCH_SCHEMA}")
            cur.execute(f"DROP DATABASE IF EXISTS {MIXED_SCHEMA}")
        bench.create_table(TABLE)
        with bench.primary.cursor() as cur:
            cur.execute(f"INSERT INTO {BENCH_SCHEMA}.acct SELECT seq, 0, 'start' "
                        f"FROM {BENCH_SCHEMA}.seq_0_to_{ROWS - 1}")
        create_schema(bench.primary, MIXED_SCHEMA)
        target = bench.primary_pos()
        bench.wait(bench.native_pos, target)
        bench.wait(bench.bridge_pos, target, alive=bench.bridge_alive)
        seed = 0
        for name, hot in (("uniform", False), ("hot-spot", True)):
            log(f"sweep {name}, {count} transactions of 4 updates")
            rounds = []
            for n in workers:
                seed += 1
                rounds.append(one_round(bench, n, lambda s=seed: update_backlog(admin, count, hot, s), count, log))
            out["sweeps"][name] = rounds
        mixed = MixedWorkload(connect(admin), MIXED_SCHEMA, seed=3)
        log(f"mixed writes, {count // 2} transactions")
        for n in (1, 4):
            out["mixed"].append(one_round(bench, n, lambda: mixed.run(count // 2), count // 2, log))
    finally:
        bench.restart_native(workers=0)
        bench.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=20_000)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--state-dir", default=".sandbox")
    args = ap.parse_args()
    result = run(args.transactions, [int(n) for n in args.workers.split(",")], args.state_dir,
                 log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
