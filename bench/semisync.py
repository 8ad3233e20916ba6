"""Primary commit latency under semi-sync: off, the bridge ACKing on receipt
(`--semi-sync received`), on apply (`applied`), and a native MariaDB semi-sync replica,
in one run on the sandbox (AFTER_SYNC wait point).

    python -m bench.semisync [--commits 1000] [--transport shm|tcp]

Prints JSON: P50/P99/P999 of the client's commit round trip per mode, and each over "off".
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.common import BENCH_SCHEMA, Bench
from bridge.lab.workload import percentile


def commit_latencies(bench: Bench, count: int, start_id: int) -> list[float]:
    out = []
    with bench.primary.cursor() as cur:
        for i in range(start_id, start_id + count):
            t0 = time.perf_counter()
            cur.execute(f"INSERT INTO {BENCH_SCHEMA}.semi VALUES ({i}, {i})")  # autocommit
            out.append(time.perf_counter() - t0)
    return out


def primary_sql(bench: Bench, *statements: str) -> None:
    with bench.primary.cursor() as cur:
        for s in statements:
            cur.execute(s)


def semi_clients(bench: Bench) -> int:
    with bench.primary.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")
        return int(cur.fetchone()[1])


def wait_clients(bench: Bench, n: int) -> None:
    deadline = time.monotonic() + 30
    while semi_clients(bench) != n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench: {n} semi-sync clients expected, primary has {semi_clients(bench)}")
        time.sleep(0.05)


def run(count: int, state_dir: str, log=print, transport: str = "shm") -> dict:
    bench = Bench(state_dir, transport)
    rounds, next_id = {}, 1
    try:
        primary_sql(bench, f"DROP DATABASE IF EXISTS {BENCH_SCHEMA}", f"CREATE DATABASE {BENCH_SCHEMA}",
                    f"CREATE TABLE {BENCH_SCHEMA}.semi (id INT PRIMARY KEY, v INT)",
                    "SET GLOBAL rpl_semi_sync_master_wait_point='AFTER_SYNC'",
                    "SET GLOBAL rpl_semi_sync_master_timeout=10000")
        for mode in ("off", "received", "applied", "native"):
            bench.stop()
            bench.bridge_primary = bench.bridge_replica = None
            native_semi = 'ON' if mode == 'native' else 'OFF'
            bench.restart_native(semi_sync=native_semi)
            primary_sql(bench, f"SET GLOBAL rpl_semi_sync_master_enabled={'OFF' if mode == 'off' else 'ON'}")
            bench.extra_primary = ("--semi-sync", mode if mode in ("received", "applied") else "off",
                                   "--heartbeat-interval", "0")
            bench.start_bridge()
            if mode != "off":
                wait_clients(bench, 1)
            commit_latencies(bench, 50, next_id)  # warm-up
            next_id += 50
            lat = commit_latencies(bench, count, next_id)
            next_id += count
            rounds[mode] = {p: round(percentile(lat, q) * 1e6) for p, q in (("p50_us", 50), ("p99_us", 99),
                                                                            ("p999_us", 99.9))}
            log(f"  {mode:9s} commit P50 {rounds[mode]['p50_us']} µs, P99 {rounds[mode]['p99_us']} µs")
    finally:
        primary_sql(bench, "SET GLOBAL rpl_semi_sync_master_enabled=OFF")
        bench.restart_native(semi_sync="OFF")
        bench.stop()
    base = rounds["off"]
    return {"benchmark": "primary commit latency under semi-sync (AFTER_SYNC)", "commits": count,
            "transport": transport,
            "rounds": rounds,
            "ratio_p50_over_off": {m: round(r["p50_us"] / base["p50_us"], 2) for m, r in rounds.items()},
            "ratio_p50_bridge_over_native": {m: round(rounds[m]["p50_us"] / rounds["native"]["p50_us"], 2)
                                             for m in ("received", "applied")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--state-dir", default=".sandbox")
    ap.add_argument("--transport", default="shm", choices=("shm", "tcp"),
                    help="the bridge's transport (tcp: the `received` ACK waits for the replica side's "
                         "placement answer, a round trip like a native replica's ACK)")
    args = ap.parse_args()
    print(json.dumps(run(args.commits, args.state_dir, log=lambda m: print(m, file=sys.stderr),
                         transport=args.transport), indent=2))


if __name__ == "__main__":
    main()
