"""Lag under load: commit-returned on the primary to visible on the replica, at
offered rates, for the bridge and for the native MariaDB replica, one at a time
(the other is stopped, then catches up before its own turn).

Each rate runs in rounds that alternate which side goes first (native, bridge,
then bridge, native, ...), and each side's samples are pooled over its rounds: this
shared machine's speed drifts by 2x over minutes, and one long run per side
measured mostly the drift.

A paced client commits single-row transactions and records when each commit
returned; a watcher in its own process (no shared GIL) polls the replica for the
highest visible id and records when each id first became visible (polling adds its
own interval, the same for both). Both use CLOCK_MONOTONIC (time.perf_counter).

    python -m bench.lag [--rates 500,2000,5000] [--seconds 6] [--rounds 3] [--apply-mode binlog|sql]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time

import pymysql

from bench.common import BENCH_SCHEMA, Bench
from bridge.config import MysqlUrl
from bridge.lab.workload import percentile

SETTLE_S = 1.0
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


def measure(bench: Bench, replica_args: dict, rate: int, seconds: float, first_id: int) -> tuple[list, float]:
    """(lags in seconds, achieved rate) of one round."""
    last = first_id + int(rate * seconds) - 1
    receiver, sender = multiprocessing.Pipe(duplex=False)
    watcher = multiprocessing.Process(target=watch, args=(replica_args, first_id, last, sender))
    watcher.start()
    time.sleep(0.3)  # the watcher is connected and polling
    committed = offered_load(MysqlUrl.parse(bench.info["primary_admin"]), rate, seconds, first_id)
    seen = receiver.recv()
    watcher.join()
    achieved = len(committed) / (max(committed.values()) - min(committed.values()) or 1)
    return [seen[i] - committed[i] for i in committed if i in seen], achieved


def summary(rate: int, lags: list, achieved: list, offered: int) -> dict:
    """``lost_samples``: commits the watcher never saw (it gives up after two minutes)."""
    return {"rate": rate, "achieved_rate": round(min(achieved)), "samples": len(lags),
            "lost_samples": offered - len(lags),
            "p50_us": round(percentile(lags, 50) * 1e6), "p99_us": round(percentile(lags, 99) * 1e6),
            "p999_us": round(percentile(lags, 99.9) * 1e6), "max_us": round(max(lags) * 1e6)}


def stage_summary(bench: Bench) -> dict:
    """Both bridge ends' stage percentiles since each process started (the primary
    side restarts every bridge round; the replica side's include earlier rates)."""
    from bridge.ops.report import fetch_status

    snap = fetch_status({"primary": bench.bridge_primary.metrics_address,
                         "replica": bench.bridge_replica.metrics_address})
    return {f"{role}.{stage}": [s["p50"], s["p99"]] for role, node in snap["nodes"].items()
            for stage, s in node.get("stages", {}).items() if s["count"]}


class Sides:
    """Switches the primary's traffic between the native replica and the bridge: the
    side not measured is stopped, and the side about to be measured has caught up."""

    def __init__(self, bench: Bench) -> None:
        self.bench, self.active = bench, "bridge"

    def use(self, side: str) -> dict:
        """Connection arguments of the server to watch."""
        bench = self.bench
        if side == "native" and self.active != "native":
            bench.start_native()
            bench.wait(bench.native_pos, bench.primary_pos())
            bench.stop_bridge_reader()
        elif side == "bridge" and self.active != "bridge":
            bench.stop_native()
            bench.start_bridge()
            bench.wait(bench.bridge_pos, bench.primary_pos(), alive=bench.bridge_alive)
        if side != self.active:
            time.sleep(SETTLE_S)  # the side just started is past its start-up work
        self.active = side
        if side == "native":
            return {"unix_socket": bench.info["native_socket"], "user": "root"}
        return MysqlUrl.parse(bench.info["replica_admin"]).connect_args()


def run(rates: list[int], seconds: float, state_dir: str, transport: str, rounds: int = 3,
        apply_mode: str = "binlog", flavor: str | None = None) -> dict:
    bench = Bench(state_dir, transport, extra_replica=("--apply-mode", apply_mode), flavor=flavor)
    rows, next_id = [], 1
    try:
        bench.start_bridge()
        bench.stop_native()
        bench.create_table(f"DROP TABLE IF EXISTS {BENCH_SCHEMA}.lag")
        bench.create_table(TABLE)
        sides = Sides(bench)
        per_round = seconds / rounds
        for rate in rates:
            lags = {"native": [], "bridge": []}
            achieved = {"native": [], "bridge": []}
            for n in range(rounds):
                for side in ("native", "bridge") if n % 2 == 0 else ("bridge", "native"):
                    side_lags, rate_seen = measure(bench, sides.use(side), rate, per_round, next_id)
                    next_id += int(rate * per_round)
                    lags[side] += side_lags
                    achieved[side].append(rate_seen)
                    if side == "bridge":
                        stages = stage_summary(bench)
            offered = rounds * int(rate * per_round)
            native, bridge = (summary(rate, lags[s], achieved[s], offered) for s in ("native", "bridge"))
            bridge["stages_p50_p99_us"] = stages
            rows.append({"rate": rate, "native": native, "bridge": bridge,
                         "ratio_p50": round(bridge["p50_us"] / native["p50_us"], 2),
                         "ratio_p99": round(bridge["p99_us"] / native["p99_us"], 2),
                         "ratio_p999": round(bridge["p999_us"] / native["p999_us"], 2)})
    finally:
        bench.start_native()
        bench.stop()
    return {"benchmark": "lag commit-returned to visible (ratios bridge/native, lower is better)",
            "servers": bench.flavor.name, "transport": transport, "apply_mode": apply_mode,
            "seconds_per_rate_and_side": seconds, "rounds": rounds,
            "rates": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="500,2000,5000")
    ap.add_argument("--seconds", type=float, default=6.0, help="per rate and side, over all rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp", "tcp+tls"])
    ap.add_argument("--apply-mode", default="binlog", choices=["binlog", "sql"])
    ap.add_argument("--state-dir", default=".sandbox")
    ap.add_argument("--flavor", default=None, help="the sandbox's servers, e.g. mysql-9.7 (its own --state-dir)")
    args = ap.parse_args()
    print(json.dumps(run([int(r) for r in args.rates.split(",")], args.seconds, args.state_dir, args.transport,
                         args.rounds, args.apply_mode, args.flavor),
                     indent=2))


if __name__ == "__main__":
    main()
