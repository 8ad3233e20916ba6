"""Lag under load: commit-returned on the primary to visible on the replica, at
offered rates, for the bridge and for the native MariaDB replica, one at a time
(the other is stopped, then catches up before its own turn).

A paced client commits single-row transactions and records when each commit
returned; a watcher in its own process (no shared GIL) polls the replica for the
highest visible id and records when each id first became visible (polling adds its
own interval, the same for both). Both use CLOCK_MONOTONIC (time.perf_counter).

    python -m bench.lag [--rates 500,2000,5000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time

import pymysql

from bench.common import BENCH_SCHEMA, Bench
from bridge.config import MysqlUrl
from bridge.workload import percentile

TABLE = f"CREATE TABLE IF NOT EXISTS {BENCH_SCHEMA}.lag (id BIGINT PRIMARY KEY, t DOUBLE NOT NULL)"


def offered_load(url: MysqlUrl, rate: int, seconds: float, first_id: int) -> dict[int, float]:
    conn = pymysql.connect(**url.connect_args(), autocommit=True)
    committed: dict[int, float] = {}
    interval, started = 1.0 / rate, time.perf_counter()
    with conn.cursor() as cur:
        for n in range(int(rate * seconds)):
            delay = started + n * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            cur.execute(f"INSERT INTO {BENCH_SCHEMA}.lag VALUES (%s, %s)", (first_id + n, time.time()))
            committed[first_id + n] = time.perf_counter()
    conn.close()
    return committed


def watch(connect_args: dict, first_id: int, last_id: int, out, deadline_s: float = 120.0) -> None:
    """Record when each id first became visible (ids commit in order); runs in its own process."""
    conn = pymysql.connect(**connect_args, autocommit=True)
    seen, high, deadline = {}, first_id - 1, time.perf_counter() + deadline_s
    with conn.cursor() as cur:
        while high < last_id and time.perf_counter() < deadline:
            cur.execute(f"SELECT MAX(id) FROM {BENCH_SCHEMA}.lag")
            top = cur.fetchone()[0] or 0
            now = time.perf_counter()
            for i in range(high + 1, top + 1):
                seen[i] = now
            high = max(high, top)
    out.send(seen)


def measure(bench: Bench, replica_args: dict, rate: int, seconds: float, first_id: int) -> dict:
    last = first_id + int(rate * seconds) - 1
    receiver, sender = multiprocessing.Pipe(duplex=False)
    watcher = multiprocessing.Process(target=watch, args=(replica_args, first_id, last, sender))
    watcher.start()
    time.sleep(0.3)  # the watcher is connected and polling
    committed = offered_load(MysqlUrl.parse(bench.info["primary_admin"]), rate, seconds, first_id)
    seen = receiver.recv()
    watcher.join()
    lags = [seen[i] - committed[i] for i in committed if i in seen]
    achieved = len(committed) / (max(committed.values()) - min(committed.values()) or 1)
    return {"rate": rate, "achieved_rate": round(achieved), "samples": len(lags),
            "p50_us": round(percentile(lags, 50) * 1e6), "p99_us": round(percentile(lags, 99) * 1e6),
            "p999_us": round(percentile(lags, 99.9) * 1e6), "max_us": round(max(lags) * 1e6)}


def stage_summary(bench: Bench) -> dict:
    """Both bridge ends' stage percentiles (since each process started: the replica
    side's include the catch-up before this rate's samples)."""
    from bridge.report import fetch_status

    snap = fetch_status({"primary": bench.bridge_primary.metrics_address,
                         "replica": bench.bridge_replica.metrics_address})
    return {f"{role}.{stage}": [s["p50"], s["p99"]] for role, node in snap["nodes"].items()
            for stage, s in node.get("stages", {}).items() if s["count"]}


def run(rates: list[int], seconds: float, state_dir: str, transport: str) -> dict:
    bench = Bench(state_dir, transport)
    rows, next_id = [], 1
    try:
        bench.start_bridge()
        bench.create_table(f"DROP TABLE IF EXISTS {BENCH_SCHEMA}.lag")
        bench.create_table(TABLE)
        for rate in rates:
            bench.native_sql("START SLAVE")
            bench.wait(bench.native_pos, bench.primary_pos())
            bench.stop_bridge_reader()
            native = measure(bench, {"unix_socket": bench.info["native_socket"], "user": "root"}, rate, seconds,
                             next_id)
            next_id += int(rate * seconds)
            bench.native_sql("STOP SLAVE")
            bench.start_bridge()
            bench.wait(bench.bridge_pos, bench.primary_pos(), alive=bench.bridge_alive)
            bridge = measure(bench, MysqlUrl.parse(bench.info["replica_admin"]).connect_args(), rate, seconds,
                             next_id)
            bridge["stages_p50_p99_us"] = stage_summary(bench)
            next_id += int(rate * seconds)
            rows.append({"rate": rate, "native": native, "bridge": bridge,
                         "ratio_p50": round(bridge["p50_us"] / native["p50_us"], 2),
                         "ratio_p99": round(bridge["p99_us"] / native["p99_us"], 2),
                         "ratio_p999": round(bridge["p999_us"] / native["p999_us"], 2)})
    finally:
        bench.native_sql("START SLAVE")
        bench.stop()
    return {"benchmark": "lag commit-returned to visible (ratios bridge/native, lower is better)",
            "transport": transport, "seconds_per_rate": seconds, "rates": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="500,2000,5000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--state-dir", default=".sandbox")
    args = ap.parse_args()
    print(json.dumps(run([int(r) for r in args.rates.split(",")], args.seconds, args.state_dir, args.transport),
                     indent=2))


if __name__ == "__main__":
    main()
