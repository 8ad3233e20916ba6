"""Apply mode relay against binlog mode and native replication, measured in one run on
the sandbox: CPU per transaction (both bridge processes and the replica server, over the
native replica server), commit→visible lag at a low rate and under load, and the
catch-up of a backlog with four appliers (relay: the replica server's own parallel
applier; binlog: `--workers 4`; native: four threads).

    python -m bench.relay [--rate 1000] [--seconds 5] [--lag-rates 500,2000] [--backlog 40000]

Prints JSON with the ratios first.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench import catchup, cpu, lag
from bench.common import BENCH_SCHEMA, Bench

MODES = ("binlog", "relay")


def catch_up(state_dir: str, mode: str, count: int, first_id: int, log) -> dict:
    """``count`` single-row transactions piled up while both replicas are stopped, then
    the native replica (4 threads) and the bridge (4 appliers) each catch up alone."""
    extra = ("--apply-mode", mode) if mode == "relay" else ("--apply-mode", mode, "--workers", "4")
    bench = Bench(state_dir, "shm", extra_replica=extra)
    try:
        bench.start_bridge()
        if bench.relay:
            bench.set_replica_workers(4)
        bench.create_table(f"DROP TABLE IF EXISTS {BENCH_SCHEMA}.single")  # replicated: both replicas run
        bench.create_table(catchup.TABLE)
        target = bench.primary_pos()
        bench.wait(bench.native_pos, target)
        bench.wait(bench.bridge_pos, target, alive=bench.bridge_alive)
        return {"apply_mode": mode, **catchup.catch_up(bench, count, 4, first_id, log)}
    finally:
        if bench.relay:
            bench.set_replica_workers(0)
        bench.restart_native(workers=0)
        bench.stop()


def run(state_dir: str, rate: int, seconds: float, lag_rates: list[int], backlog: int, log) -> dict:
    result = {"cpu": cpu.run(rate, seconds, state_dir, ("shm",), MODES, log=log, pure=()),
              "lag": {mode: lag.run(lag_rates, 6.0, state_dir, "shm", rounds=2, apply_mode=mode) for mode in MODES}}
    result["catchup"] = [catch_up(state_dir, mode, backlog, 1 + i * backlog, log) for i, mode in enumerate(MODES)]
    result["ratios"] = ratios(result)
    return {"ratios": result.pop("ratios"), **result}


def ratios(result: dict) -> dict:
    out = {}
    rows = {(r["apply_mode"], r["workload"]): r for r in result["cpu"]["rows"]}
    for workload in cpu.WORKLOADS:
        relay, binlog = rows[("relay", workload)], rows[("binlog", workload)]
        out[f"CPU per txn, {workload}: relay (both bridge processes + replica server) over the native replica "
            "server (lower is better)"] = relay["ratio_bridge_total_over_native_server"]
        out[f"CPU per txn, {workload}: binlog mode over the native replica server"] = \
            binlog["ratio_bridge_total_over_native_server"]
        out[f"CPU per txn, {workload}: relay over binlog mode (both bridge processes + replica server)"] = \
            round(relay["bridge_total_us"] / binlog["bridge_total_us"], 2)
    for mode in MODES:
        for r in result["lag"][mode]["rates"]:
            for p in ("p50", "p99"):
                out[f"lag {p} at {r['rate']} txn/s, {mode} over native (lower is better)"] = r[f"ratio_{p}"]
    for r in result["catchup"]:
        out[f"catch-up of {r['transactions']} txns, {r['apply_mode']} (4 appliers) over native 4 threads "
            "(higher is better)"] = r["ratio_bridge_over_native"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=1000, help="CPU per transaction: the offered rate")
    ap.add_argument("--seconds", type=float, default=5.0, help="CPU per transaction: seconds per workload")
    ap.add_argument("--lag-rates", default="500,2000")
    ap.add_argument("--backlog", type=int, default=40_000)
    ap.add_argument("--state-dir", default=".sandbox")
    args = ap.parse_args()
    print(json.dumps(run(args.state_dir, args.rate, args.seconds, [int(r) for r in args.lag_rates.split(",")],
                         args.backlog, log=lambda m: print(m, file=sys.stderr, flush=True)), indent=2))


if __name__ == "__main__":
    main()
