"""Decode rate: the stock mysql-replication reader vs rdma-bridge's reader +
assembler, over the same binlog range of single-row transactions, each in a fresh
process (the bridge's reader patches the library, so the stock run never imports it).

    python -m bench.decode [--transactions 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.common import BENCH_SCHEMA, Bench, single_row_backlog
from bridge.config import MysqlUrl


def stock(url: MysqlUrl, start: str, count: int) -> float:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    stream = BinLogStreamReader(connection_settings=url.connect_args(), server_id=7001, is_mariadb=True,
                                auto_position=start, blocking=True,
                                only_events=[MariadbGtidEvent, XidEvent, WriteRowsEvent, UpdateRowsEvent,
                                             DeleteRowsEvent])
    started, seen = time.perf_counter(), 0
    for event in stream:
        if isinstance(event, XidEvent):
            seen += 1
            if seen == count:
                break
        elif hasattr(event, "rows"):
            event.rows  # decode the row values, as a consumer must
    elapsed = time.perf_counter() - started
    stream.close()
    return elapsed


def ours(url: MysqlUrl, start: str, count: int) -> float:
    from bridge.source.assembler import TransactionAssembler
    from bridge.source.reader import BinlogReader

    reader, assembler = BinlogReader(url, 7002, start), TransactionAssembler()
    started, seen = time.perf_counter(), 0
    while seen < count:
        event = reader.next_event()
        if event is not None and assembler.feed(event) is not None:
            seen += 1
    elapsed = time.perf_counter() - started
    reader.close()
    return elapsed


def run(count: int, state_dir: str) -> dict:
    bench = Bench(state_dir)
    with bench.primary.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {BENCH_SCHEMA}")
        cur.execute(f"DROP TABLE IF EXISTS {BENCH_SCHEMA}.single")
        cur.execute(f"CREATE TABLE {BENCH_SCHEMA}.single (id INT PRIMARY KEY, v INT, note VARCHAR(40))")
    start = str(bench.primary_pos())
    single_row_backlog(MysqlUrl.parse(bench.info["primary_admin"]), count, 1)
    url = bench.info["primary"]
    times = {mode: float(subprocess.run([sys.executable, "-m", "bench.decode", "--measure", mode, "--url", url,
                                         "--start", start, "--transactions", str(count)],
                                        capture_output=True, text=True, check=True, env=_env()).stdout)
             for mode in ("stock", "ours")}
    return {"benchmark": "binlog decode, single-row transactions", "transactions": count,
            "stock_txn_s": round(count / times["stock"]), "ours_txn_s": round(count / times["ours"]),
            "ratio_ours_over_stock": round(times["stock"] / times["ours"], 2)}


def _env() -> dict:
    import os

    return {**os.environ}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=100_000)
    ap.add_argument("--state-dir", default=".sandbox")
    ap.add_argument("--measure", choices=["stock", "ours"])
    ap.add_argument("--url")
    ap.add_argument("--start")
    args = ap.parse_args()
    if args.measure:
        fn = stock if args.measure == "stock" else ours
        print(fn(MysqlUrl.parse(args.url), args.start, args.transactions))
        return
    print(json.dumps(run(args.transactions, args.state_dir), indent=2))


if __name__ == "__main__":
    main()
