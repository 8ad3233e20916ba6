"""End to end over rdma, next to tcp and shm, in the Soft-RoCE guest (`make bench-rdma`,
after bench.rdma_lat): the same paced workloads through the bridge in one run.

- CPU per transaction of each bridge process (bench.cpu: /proc CPU time over the
  transactions committed), over shm, tcp and rdma, tcp and rdma in alternating rounds as
  the lag's below (the median round's ratio);
- lag from commit returned to visible on the replica, over tcp and rdma (bench.lag, the
  native replica beside it as in that benchmark), in rounds that take tcp and rdma in
  turn (this guest's speed drifts between phases): the median of the rounds' ratios;
- the replica side's CPU while nothing is written, over tcp and rdma, twice: with the
  primary side's heartbeat rows (every 0.1 s, the default: ten small transactions a second
  to apply), and with none (``--heartbeat-interval 0``: what sleeping itself costs). An
  idle replica side over rdma sleeps on its queue pair's completion channel.

The guest runs under software emulation (QEMU TCG), so absolute times are many times a
real host's; the ratios between transports measured in the same run are what counts.

- the ship lane's placement (its "place" stage: from a transaction framed to its header
  write's completion) over rdma next to `ib_write_lat` (from bench.rdma_lat's report,
  ``--placement``: the same run).

    python3 -m bench.rdma_e2e [--rate 200] [--seconds 8] [--idle-seconds 10] [--state-dir /tmp/bench-rdma]
                              [--placement LAT.json] [--lag-rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench import cpu, lag
from bench.common import Bench

IDLE_HEARTBEATS = {"heartbeat every 0.1 s": "0.1", "no heartbeat": "0"}


def idle_cpu(state_dir: str, transport: str, seconds: float, heartbeat_s: str) -> dict:
    """Each bridge process's CPU, in percent of one core, over ``seconds`` with nothing to
    replicate (the primary side writing its heartbeat row every ``heartbeat_s``, 0: never)."""
    bench = Bench(state_dir, transport, extra_primary=("--heartbeat-interval", heartbeat_s))
    try:
        bench.start_bridge()
        time.sleep(2.0)  # past the start's catch-up
        pids = {"primary side": bench.bridge_primary.proc.pid, "replica side": bench.bridge_replica.proc.pid}
        before, started = {k: cpu.cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
        switches = {k: cpu.context_switches(p) for k, p in pids.items()}
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        out = {k: round((cpu.cpu_seconds(p) - before[k]) / elapsed * 100, 2) for k, p in pids.items()}
        wakeups = {k: round(cpu.switched_since(p, switches[k]) / elapsed) for k, p in pids.items()}
        bench.bridge_alive()
    finally:
        bench.stop()
    return {"cpu_percent_of_a_core": out, "wakeups_per_s": wakeups}


def run(rate: int, seconds: float, idle_seconds: float, state_dir: str, placement: dict | None = None,
        log=print, lag_rounds: int = 3) -> dict:
    cpu_rounds = []  # as the lag's: tcp and rdma in turn (shm in the first round only)
    for n in range(lag_rounds):
        order = ("tcp", "rdma") if n % 2 == 0 else ("rdma", "tcp")
        spent = cpu.run(rate, seconds, state_dir, transports=("shm",) * (n == 0) + order, modes=("binlog",),
                        log=log, pure=())
        cpu_rounds.append({(r["transport"], r["workload"], side): r["cpu_us_per_txn"][side]
                           for r in spent["rows"] for side in ("primary side", "replica side")})
    per_setup = {key: statistics.median(r[key] for r in cpu_rounds if key in r) for key in cpu_rounds[0]}
    primary_us = {(t, w): us for (t, w, side), us in per_setup.items() if side == "primary side"}
    replica_us = {(t, w): us for (t, w, side), us in per_setup.items() if side == "replica side"}

    def cpu_ratio(workload: str, side: str) -> float:
        """The median round's rdma / tcp CPU per transaction."""
        return statistics.median(round(r["rdma", workload, side] / r["tcp", workload, side], 2) for r in cpu_rounds)
    rounds = []  # tcp and rdma in turn, each round in the other order: the guest's phases hit both
    for n in range(lag_rounds):
        measured = {}
        for transport in ("tcp", "rdma") if n % 2 == 0 else ("rdma", "tcp"):
            row = lag.run([rate], seconds, state_dir, transport, rounds=2)["rates"][0]
            measured[transport] = {
                "p50_us": row["bridge"]["p50_us"], "p99_us": row["bridge"]["p99_us"],
                "native_p50_us": row["native"]["p50_us"], "native_p99_us": row["native"]["p99_us"],
                "lane_place_p50_p99_us": row["bridge"]["stages_p50_p99_us"].get("primary.place")}
            log(f"lag over {transport}, round {n + 1}: {measured[transport]}")
        rounds.append(measured)
    lags = {t: {**{k: statistics.median(r[t][k] for r in rounds)
                   for k in ("p50_us", "p99_us", "native_p50_us", "native_p99_us")},
                "lane_place_p50_p99_us": rounds[-1][t]["lane_place_p50_p99_us"]} for t in ("tcp", "rdma")}
    idle = {beat: {t: idle_cpu(state_dir, t, idle_seconds, every) for t in ("tcp", "rdma")}
            for beat, every in IDLE_HEARTBEATS.items()}
    log(f"idle: {idle}")
    idle_replica = {(beat, t): figures["cpu_percent_of_a_core"]["replica side"]
                    for beat, by_transport in idle.items() for t, figures in by_transport.items()}
    workloads = sorted({w for _, w in primary_us})
    lane_place = lags["rdma"]["lane_place_p50_p99_us"]
    perftest = (placement or {}).get("ib_write_lat", {})
    placed = {}
    if lane_place and "typical_us" in perftest:
        placed = {"lane placement P50 over rdma / ib_write_lat P50": round(lane_place[0] / perftest["typical_us"], 2),
                  "lane placement P99 over rdma / ib_write_lat P99": round(lane_place[1] / perftest["p99_us"], 2)}
    for key, name in LATENCY_RATIOS.items():  # bench.rdma_lat's rounds: the ship lane's placement in C
        if key in (placement or {}):
            placed[name] = placement[key]
    return {
        "benchmark": "end to end over rdma, tcp and shm (Soft-RoCE guest under emulation: ratios count)",
        "rate": rate, "seconds": seconds,
        "primary_side_cpu_us_per_txn": {f"{t}/{w}": primary_us[t, w] for t, w in sorted(primary_us)},
        "replica_side_cpu_us_per_txn": {f"{t}/{w}": replica_us[t, w] for t, w in sorted(replica_us)},
        "cpu_rounds": [{"/".join(key): us for key, us in r.items()} for r in cpu_rounds],
        "lag": lags, "lag_rounds": rounds, "idle": idle, "ib_write_lat": perftest,
        "ratios": {
            **placed,
            **{f"primary side CPU per txn, rdma over tcp ({w}, median of rounds)": cpu_ratio(w, "primary side")
               for w in workloads},
            **{f"replica side CPU per txn, rdma over tcp ({w}, median of rounds)": cpu_ratio(w, "replica side")
               for w in workloads},
            **{f"lag {q.upper()}, rdma over tcp (median of rounds)":
               statistics.median(round(r["rdma"][f"{q}_us"] / r["tcp"][f"{q}_us"], 2) for r in rounds)
               for q in ("p50", "p99")},
            **{f"idle replica side over rdma, % of a core ({beat})": idle_replica[beat, "rdma"]
               for beat in IDLE_HEARTBEATS},
            **{f"idle replica side CPU, rdma over tcp ({beat})":
               round(idle_replica[beat, "rdma"] / max(idle_replica[beat, "tcp"], 0.01), 2) for beat in IDLE_HEARTBEATS},
        },
    }


LATENCY_RATIOS = {
    "ratio_p50_ship_lane_over_ib_write_lat": "placement P50, ship lane / ib_write_lat (median of rounds)",
    "ratio_p99_ship_lane_over_ib_write_lat": "placement P99, ship lane / ib_write_lat (median of rounds)",
    "ratio_p50_ship_lane_over_one_signaled_write": "placement P50, ship lane / one signaled write (median of rounds)",
    "ratio_p50_one_signaled_write_over_ib_write_lat": "one signaled write P50 / ib_write_lat (the floor)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--state-dir", default="/tmp/bench-rdma")
    ap.add_argument("--placement", default=None, help="bench.rdma_lat's report of the same run (its ib_write_lat)")
    ap.add_argument("--lag-rounds", type=int, default=3)
    args = ap.parse_args()
    placement = json.loads(Path(args.placement).read_text()) if args.placement else None
    if placement:
        print(json.dumps(placement, indent=2))
    print(json.dumps(run(args.rate, args.seconds, args.idle_seconds, args.state_dir, placement,
                         lag_rounds=args.lag_rounds), indent=2))


if __name__ == "__main__":
    main()
