"""`make bench`: catch-up, lag, CPU per transaction, decode, the parallel-apply
sweep, semi-sync and checksum, bridge vs baselines measured in the same run on the
sandbox (native MariaDB replica, stock mysql-replication). Writes
bench/results/<date>.json and .html (ratios first), the flame graphs of both bridge
processes (<date>-flame-*.svg), a 3-minute acceptance run (<date>-stress-2min-shm-received-10ms.*; the
hour is `make stress`) and prints the ratios.

    python -m bench.run_all [--transactions 200000] [--decode-transactions 100000] [--seconds 5]
                            [--sweep-transactions 20000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
from pathlib import Path

from bench import catchup, checksum, clone, cpu, decode, fanout, flame, lag, semisync, stress, workers

MODES = ("binlog", "sql")

RESULTS = Path(__file__).resolve().parent / "results"


def ratios(result: dict) -> dict:
    out = {}
    for mode in MODES:
        for r in result["catchup"][mode]["rounds"]:
            out[f"catch-up ({mode} apply) vs native {r['native_threads'] or 1} thread(s) (higher is better)"] = \
                r["ratio_bridge_over_native"]
    for mode in MODES:
        for r in result["lag"][mode]["rates"]:
            for p in ("p50", "p99", "p999"):
                out[f"lag {p} at {r['rate']} txn/s ({mode} apply), bridge/native (lower is better)"] = r[f"ratio_{p}"]
    for r in result["cpu"]["rows"]:
        if r.get("hot_path", "compiled") != "compiled":
            continue
        out[f"CPU per txn, {r['workload']} at {result['cpu']['rate']} txn/s over {r['transport']} ({r['apply_mode']} "
            "apply), bridge processes + replica server / native replica server (lower is better)"] = \
            r["ratio_bridge_total_over_native_server"]
    out.update(cpu.hot_path_ratios(result["cpu"]))
    out["decode vs stock mysql-replication (higher is better)"] = result["decode"]["ratio_ours_over_stock"]
    for name, rounds in result["workers"]["sweeps"].items():
        for r in rounds:
            out[f"catch-up of 4-row updates, {name} keys, {r['workers']} workers vs native {r['workers']} "
                "thread(s) (higher is better)"] = r["ratio_bridge_over_native"]
    for mode, ratio in result["semisync"]["ratio_p50_over_off"].items():
        if mode != "off":
            out[f"primary commit P50 with semi-sync {mode} over semi-sync off (lower is better)"] = ratio
    for mode, ratio in result["semisync"]["ratio_p50_bridge_over_native"].items():
        out[f"primary commit P50, bridge semi-sync {mode} over a native semi-sync replica (lower is better)"] = ratio
    out["checksum time, in-band over CHECKSUM TABLE (lower is better)"] = \
        result["checksum"]["ratio_in_band_over_checksum_table"]
    stress = result["stress"]
    p999 = stress["criteria"]["P999 lag at least 10x below native's"]["value"]
    rates = (f"{stress['rate_offered']} txn/s offered, {stress['rate_achieved']} achieved with the bridge as "
             f"semi-sync replica, {stress['rate_achieved_native_phase']} with native")
    for baseline, key in (("a native semi-sync replica (its own window)", "ratio"),
                          ("a native async replica beside it (same load)", "ratio_async")):
        if p999[key]:
            out[f"acceptance run (short; {rates}): lag P999 of {baseline} over the bridge's as semi-sync replica "
                "(higher is better, goal 10)"] = p999[key]
    for r in result["workers"]["mixed"]:
        out[f"catch-up of mixed writes, {r['workers']} workers vs native {r['workers']} thread(s) "
            "(higher is better)"] = r["ratio_bridge_over_native"]
    out.update(tls_ratios(result))
    if "fanout" in result:
        for r in result["fanout"]["rows"]:
            out[f"fan-out to {r['replicas']} replica side(s): primary side CPU per txn, one read over "
                f"{r['replicas']} separate primary sides (lower is better)"] = r["ratio_fan_out_over_separate"]
            out[f"fan-out to {r['replicas']} replica side(s): primary server CPU per txn, one dump over "
                f"{r['replicas']} (lower is better)"] = r["ratio_primary_server_fan_out_over_separate"]
        for p, ratio in result["fanout"]["ratio_frozen_over_streaming"].items():
            out[f"fan-out: first replica's bridge stage {p} with the third frozen over all streaming "
                "(lower is better)"] = ratio
    out.update(result["clone"]["ratios"] if "clone" in result else {})
    return out


def tls_ratios(result: dict) -> dict:
    """The cost of TLS on the bridge's connections: tcp+tls over tcp, same run."""
    out = {}
    rows = {(r["apply_mode"], r["transport"], r["workload"]): r for r in result["cpu"]["rows"]
            if r.get("hot_path", "compiled") == "compiled"}
    for (mode, transport, workload), with_tls in rows.items():
        plain = rows.get((mode, "tcp", workload))
        if transport == "tcp+tls" and plain:
            out[f"TLS cost: CPU of both bridge processes per txn, {workload} ({mode} apply), with TLS over without "
                "(lower is better)"] = round(with_tls["bridge_processes_us"] / plain["bridge_processes_us"], 2)
    if "lag_tls" in result:
        for plain, with_tls in zip(result["lag_tls"]["tcp"]["rates"], result["lag_tls"]["tcp+tls"]["rates"]):
            for p in ("p50", "p99"):
                out[f"TLS cost: bridge lag {p} at {plain['rate']} txn/s over tcp, with TLS over without "
                    "(lower is better)"] = round(with_tls["bridge"][f"{p}_us"] / plain["bridge"][f"{p}_us"], 2)
    return out


def html(result: dict) -> str:
    rows = []
    for name, value in result["ratios"].items():
        width = min(400, value * 100)
        rows.append(f"<tr><td>{name}</td><td>{value:.2f}</td><td><svg width='420' height='14'>"
                    f"<rect width='{width:.0f}' height='14' fill='#4a7'/><line x1='100' x2='100' y1='0' "
                    f"y2='14' stroke='#000'/></svg></td></tr>")
    return ("<html><head><meta charset='utf-8'><title>rdma-bridge bench</title></head><body>"
            f"<h1>rdma-bridge benchmarks {result['date']}</h1><p>{result['machine']}. The line marks 1.0 "
            "(parity with the baseline measured in the same run).</p><table>" + "".join(rows) +
            "</table><pre>" + json.dumps({k: v for k, v in result.items() if k != "ratios"}, indent=2) +
            "</pre></body></html>")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=200_000)
    ap.add_argument("--decode-transactions", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=6.0, help="lag: per rate and side")
    ap.add_argument("--sweep-transactions", type=int, default=20_000)
    ap.add_argument("--cpu-seconds", type=float, default=10.0, help="CPU per transaction: per workload and setup")
    ap.add_argument("--state-dir", default=".sandbox")
    args = ap.parse_args()
    log = _stderr
    result = {"date": dt.date.today().isoformat(), "machine": f"{platform.node()} {platform.machine()}, "
              f"{__import__('os').cpu_count()} cpus, Python {platform.python_version()}"}
    result["catchup"], result["lag"] = {}, {}
    for mode in MODES:
        log(f"catch-up ({mode} apply) ...")
        result["catchup"][mode] = catchup.run(args.transactions, args.state_dir, "shm", log=log, apply_mode=mode)
    for mode in MODES:
        log(f"lag ({mode} apply) ...")
        result["lag"][mode] = lag.run([500, 2000, 5000], args.seconds, args.state_dir, "shm", apply_mode=mode)
    log("lag over tcp, without and with TLS on the bridge's connections ...")
    result["lag_tls"] = {t: lag.run([500, 2000], args.seconds, args.state_dir, t) for t in ("tcp", "tcp+tls")}
    log("CPU per transaction ...")
    result["cpu"] = cpu.run(1000, args.cpu_seconds, args.state_dir, log=log)
    log("fan-out to 1, 2 and 3 replica sides ...")
    result["fanout"] = fanout.run(1000, args.cpu_seconds, args.state_dir + "-fanout", log=log)
    log("flame graphs of both bridge processes ...")
    result["flame_graphs"] = flame.run(args.cpu_seconds, 1000, args.state_dir, RESULTS, log=log)
    log("decode ...")
    result["decode"] = decode.run(args.decode_transactions, args.state_dir)
    log("parallel apply sweep ...")
    result["workers"] = workers.run(args.sweep_transactions, [1, 2, 4, 8, 16], args.state_dir, log=log)
    log("semi-sync commit latency ...")
    result["semisync"] = semisync.run(1000, args.state_dir, log=log)
    log("clone of 1M rows vs mariadb-dump | mariadb ...")
    result["clone"] = clone.run(1_000_000, args.state_dir, log=log)
    log("checksum ...")
    result["checksum"] = checksum.run(1_000_000, args.state_dir, log=log)
    log("the acceptance run, short: 2 min with the bridge as semi-sync replica, 1 min native ...")
    result["stress"] = stress.run(2, 1, 2000, "received", args.state_dir, log=log)
    result["ratios"] = ratios(result)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{result['date']}.json").write_text(json.dumps(result, indent=2))
    (RESULTS / f"{result['date']}.html").write_text(html(result))
    print(json.dumps(result["ratios"], indent=2))
    log(f"written: {RESULTS / (result['date'] + '.json')} and .html")


if __name__ == "__main__":
    main()
