"""The acceptance run (`make stress`): the bridge as semi-sync replica for an hour.

The bridge is the sandbox primary's semi-sync replica under a steady mixed write load,
beside a native MariaDB replica of the same primary, then a native semi-sync window;
per-minute lag, semi-sync, reconnects, CPU and memory; a row-by-row comparison at the
end.

Phases, on the sandbox (primary, bridge replica, native replica):
1. bridge (``--minutes``): the primary runs semi-sync (AFTER_SYNC, ACK timeout
   ``--ack-timeout-ms``) with the bridge as its only semi-sync replica
   (``start-primary --semi-sync received|applied``); the native replica follows the
   same primary asynchronously, so both replicas' lag is measured under the same load
   at the same time. Only one replica can be semi-sync at a time here: MariaDB waits
   for the first ACK from any semi-sync replica, so with two the primary's counters
   would say nothing about either.
2. native (``--native-minutes``): the bridge's primary side restarts without semi-sync
   and the native replica becomes the semi-sync replica: the baseline's degradations and
   lag, on a host doing the same work as in the bridge phase (both replicas apply the
   load; only the one that acknowledges changed).
   Its probes start once it runs as the semi-sync replica again and has caught up (the
   switch-over itself is not measured).
3. the load stops; the bridge's primary side starts again as in phase 1 and catches up;
   the stress schema is compared row by row on both replicas with the primary's.

The load (its own process) offers ``--rate`` transactions/s, a fixed mix: single-row
inserts, 3-row updates, deletes, a two-table transaction (keyless ledger + keyed
account) and every 50 ms a probe row. Lag is commit-returned on the primary to
visible on a replica, measured on the probes: a watcher process per replica is told
each probe's id before its commit and polls for it until it appears (CLOCK_MONOTONIC
on both ends). Lag can be negative under semi-sync: a row may be visible on the
replica before the primary's client has its OK.

The P999 criterion compares the bridge (its semi-sync phase) with the native replica
in the same role (its semi-sync phase); the native replica's lag during the bridge
phase, as an async replica beside it, is reported too. Under semi-sync that one can be
negative: the primary's client waits for the bridge's ACK while the native replica
already shows the row.

Each minute reports the rate it achieved, and says so when that is under 95% of the
offered one (the comparison of both phases holds only at equal achieved rates). The
load times each commit (under semi-sync: the wait for the ACK), and the run compares
the commit P99 of both phases.

``--hogs N`` runs N busy loops at nice 0 beside everything in both phases (a busy
host: a wakeup then waits for a CPU); ``--realtime-priority P`` starts both bridge
ends with that option (SCHED_FIFO).

Writes bench/results/<date>-stress-<minutes>min-<transport>-<mode>-<timeout>ms.json and
.html (per-minute lag chart, the acceptance criteria met or not).

    python -m bench.stress [--hours 1 | --minutes 60 --native-minutes 6] [--rate 2000] [--semi-sync received]
                           [--transport shm|tcp] [--ack-timeout-ms 10] [--hogs N] [--realtime-priority P]
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty

import pymysql
from pymysql.constants import CLIENT

from bench import cpu
from bench.common import Bench
from bench.semisync import primary_sql, wait_clients
from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl
from bridge.lab.workload import numbers, percentile
from bridge.ops.report import fetch_status

SCHEMA = "stress"
PROBE_EVERY_S = 0.05
SAMPLE_EVERY_S = 5.0
RESULTS = Path(__file__).resolve().parent / "results"
TABLES = (f"CREATE TABLE {SCHEMA}.orders (id BIGINT PRIMARY KEY, customer INT NOT NULL, amount BIGINT NOT NULL, "
          "note VARCHAR(64), KEY (customer))",
          f"CREATE TABLE {SCHEMA}.accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
          f"CREATE TABLE {SCHEMA}.ledger (account INT NOT NULL, delta BIGINT NOT NULL, at DOUBLE NOT NULL)",
          f"CREATE TABLE {SCHEMA}.probe (id BIGINT PRIMARY KEY)")
ACCOUNTS = 1000
RECONNECTS = ("primary_reconnects", "binlog_reopens", "replica_reconnects")  # counters that must not move
LOAD_PHASES = ("bridge", "switch", "native")  # whose commit times the load is keeping (Run.load_phase)
BELOW_OFFERED = 0.95  # a window whose achieved rate is under this share of the offered one says so


# --- the load (its own process) ----------------------------------------------------

def statement(n: int) -> str:
    """Transaction ``n`` of the fixed mix (every id is derived from ``n``)."""
    k = n % 10
    if k < 5:
        return f"INSERT INTO {SCHEMA}.orders VALUES ({n}, {n % 997}, {n % 10_000}, 'order {n}')"
    if k < 7:
        base = max(0, n - 50 - n % 10)  # inserted a few transactions ago
        return f"UPDATE {SCHEMA}.orders SET amount = amount + 1 WHERE id IN ({base}, {base + 1}, {base + 2})"
    if k == 7:
        return f"DELETE FROM {SCHEMA}.orders WHERE id = {max(0, n - 5_000 - n % 10 + 3)}"
    account = n % ACCOUNTS
    return (f"BEGIN; INSERT INTO {SCHEMA}.ledger VALUES ({account}, {n % 100 - 50}, {n}); "
            f"UPDATE {SCHEMA}.accounts SET balance = balance + {n % 100 - 50} WHERE id = {account}; COMMIT")


def load(url: MysqlUrl, rate: int, first: int, watchers: list, active, stop, phase, commits) -> None:
    """Paced transactions until ``stop`` is set; every PROBE_EVERY_S a probe row,
    announced to the ``active`` watchers before its commit and timed after it. Each
    transaction's commit time (statement sent to its answer: under semi-sync the wait for
    the ACK) is kept by the ``phase`` in force (LOAD_PHASES) and put on ``commits`` at the end."""
    conn = pymysql.connect(**url.connect_args(), autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
    interval, started, n, next_probe = 1.0 / rate, time.perf_counter(), 0, 0.0
    took: list[list[float]] = [[] for _ in LOAD_PHASES]
    with conn.cursor() as cur:
        while not stop.is_set():
            delay = started + n * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            now = time.perf_counter()
            if now >= next_probe:
                next_probe = now + PROBE_EVERY_S
                probe, told = first + n, [w for i, w in enumerate(watchers) if active[i]]
                for w in told:
                    w.send(("probe", probe))
                sent = time.perf_counter()
                cur.execute(f"INSERT INTO {SCHEMA}.probe VALUES ({probe})")
                committed = time.perf_counter()
                for w in told:
                    w.send(("commit", probe, committed))
            else:
                sent = time.perf_counter()
                cur.execute(statement(first + n))
                while cur.nextset():
                    pass
                committed = time.perf_counter()
            took[phase.value].append(committed - sent)
            n += 1
    conn.close()
    commits.put(took)
    for w in watchers:
        w.send(("stop",))


def watch(connect_args: dict, inbox, out) -> None:
    """Polls the replica for announced probes while any is pending (idle otherwise);
    puts ("lag", seconds) for each, and at the end ("lost", probes never seen), None."""
    conn = pymysql.connect(**connect_args, autocommit=True)
    pending, seen, commits = set(), {}, {}
    with conn.cursor() as cur:
        while True:
            messages = [inbox.recv()] if not pending else []
            while inbox.poll():
                messages.append(inbox.recv())
            for m in messages:
                if m[0] == "stop":
                    out.put(("lost", len(pending)))
                    out.put(None)
                    return
                if m[0] == "probe":
                    pending.add(m[1])
                else:
                    commits[m[1]] = m[2]
            if pending:
                cur.execute(f"SELECT MAX(id) FROM {SCHEMA}.probe")
                top, now = cur.fetchone()[0] or 0, time.perf_counter()
                for probe in [p for p in pending if p <= top]:
                    pending.discard(probe)
                    seen[probe] = now
            for probe in [p for p in seen if p in commits]:
                out.put(("lag", seen.pop(probe) - commits.pop(probe)))


# --- measuring -----------------------------------------------------------------------

def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def semi_status(bench: Bench) -> dict:
    prefix = bench.flavor.semi_sync_status_prefix.lower()
    with bench.primary.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE %s", (prefix + "%",))
        return {k.lower().removeprefix(prefix): v for k, v in cur.fetchall()}


class Minute:
    """What one minute of the run collects."""

    def __init__(self, index: int, phase: str) -> None:
        self.index, self.phase = index, phase
        self.lags: dict[str, list[float]] = {"bridge": [], "native": []}
        self.async_s, self.backlog_max = 0.0, 0

    def row(self, txns: int, cpu_s: dict, rss: dict, semi: dict, counters: dict, rate: int, seconds: float) -> dict:
        lags = {side: _percentiles(v) for side, v in self.lags.items() if v}
        achieved = round(txns / seconds)
        return {"minute": self.index, "phase": self.phase, "transactions": txns, "achieved_rate": achieved,
                "below_offered": achieved < BELOW_OFFERED * rate,
                "lag_us": lags, "semi_sync": {**semi, "async_s": round(self.async_s, 1)},
                "cpu_us_per_txn": {k: round(v / max(txns, 1) * 1e6, 1) for k, v in cpu_s.items()},
                "rss_mib": {k: round(v, 1) for k, v in rss.items()}, "ring_backlog_frames_max": self.backlog_max,
                "counters": counters}


def _percentiles(values: list[float]) -> dict:
    return {"samples": len(values), "p50": round(percentile(values, 50) * 1e6),
            "p99": round(percentile(values, 99) * 1e6), "p999": round(percentile(values, 99.9) * 1e6),
            "max": round(max(values) * 1e6)}


class Run:
    def __init__(self, bench: Bench, rate: int, semi_sync: str, log) -> None:
        self.bench, self.rate, self.semi_sync, self.log = bench, rate, semi_sync, log
        self.minutes: list[dict] = []
        self.lags = {"bridge": {"bridge": [], "native": []}, "native": {"native": []}}  # phase -> side -> lags
        self.lost = {"bridge": 0, "native": 0}  # probes a watcher never saw
        self.stop_load = multiprocessing.Event()
        self.watchers, self.inboxes = [], []
        self.active = multiprocessing.Array("b", [1, 1])  # the load tells these watchers (bridge, native)
        self.load_phase = multiprocessing.Value("b", 0)  # an index of LOAD_PHASES
        self.commit_queue = multiprocessing.Queue()
        self.commit_s: dict[str, list[float]] = {}  # LOAD_PHASES -> the load's commit times, once stopped
        self.stopped = False

    def start_load(self) -> None:
        sides = {"bridge": MysqlUrl.parse(self.bench.info["replica_admin"]).connect_args(),
                 "native": {"unix_socket": self.bench.info["native_socket"], "user": "root"}}
        for side, args in sides.items():
            inbox, outbox = multiprocessing.Pipe(duplex=False)
            queue = multiprocessing.Queue()
            proc = multiprocessing.Process(target=watch, args=(args, inbox, queue), daemon=True)
            proc.start()
            self.watchers.append((side, proc, queue))
            self.inboxes.append(outbox)
        self.loader = multiprocessing.Process(
            target=load, args=(MysqlUrl.parse(self.bench.info["primary_admin"]), self.rate, 1, self.inboxes,
                               self.active, self.stop_load, self.load_phase, self.commit_queue), daemon=True)
        self.loader.start()

    def pids(self, bridge: bool) -> dict:
        b = self.bench
        out = {"primary server": cpu.server_pid(b, "primary"), "replica server": cpu.server_pid(b, "replica"),
               "native replica server": cpu.server_pid(b, "native"), "load": self.loader.pid}
        if bridge:
            out.update({"primary side": b.bridge_primary.proc.pid, "replica side": b.bridge_replica.proc.pid})
        return out

    def phase(self, name: str, minutes: int, first_index: int) -> None:
        """``minutes`` of samples, one row per minute."""
        bridge = name == "bridge"
        for i in range(minutes):
            minute = Minute(first_index + i, name)
            pids = self.pids(bridge)
            cpu0, seq0, semi0 = {k: cpu.cpu_seconds(p) for k, p in pids.items()}, cpu.seq(self.bench), \
                semi_status(self.bench)
            begun = time.monotonic()
            end = begun + 60
            while time.monotonic() < end:
                tick = time.monotonic()
                self._drain(minute, name)
                semi = semi_status(self.bench)
                if semi.get("status", "OFF").upper() != "ON":
                    minute.async_s += SAMPLE_EVERY_S
                if bridge:
                    snap = fetch_status({"replica": self.bench.bridge_replica.metrics_address})["nodes"]["replica"]
                    minute.backlog_max = max(minute.backlog_max,
                                             snap.get("counters", {}).get("ring_backlog_frames", 0))
                    self.bench.bridge_alive()
                time.sleep(max(0.0, SAMPLE_EVERY_S - (time.monotonic() - tick)))
            self._drain(minute, name)
            txns = cpu.seq(self.bench) - seq0
            semi1 = semi_status(self.bench)
            semi = {"degradations": int(semi1.get("no_times", 0)) - int(semi0.get("no_times", 0)),
                    "commits_not_acked": int(semi1.get("no_tx", 0)) - int(semi0.get("no_tx", 0)),
                    "commits_acked": int(semi1.get("yes_tx", 0)) - int(semi0.get("yes_tx", 0))}
            row = minute.row(txns, {k: cpu.cpu_seconds(p) - cpu0[k] for k, p in pids.items()},
                             {k: rss_mib(pids[k]) for k in ("primary side", "replica side") if k in pids}, semi,
                             self._counters() if bridge else {}, self.rate, time.monotonic() - begun)
            self.minutes.append(row)
            self.log(_line(row))

    def _drain(self, minute: Minute | None, phase: str) -> None:
        for side, _, queue in self.watchers:
            while not queue.empty():
                item = queue.get()
                if item is None:
                    continue
                if item[0] == "lost":
                    self.lost[side] += item[1]
                elif minute is not None and (phase == "bridge" or side == "native"):
                    minute.lags[side].append(item[1])
                    self.lags[phase][side].append(item[1])

    def _counters(self) -> dict:
        b = self.bench
        nodes = fetch_status({"primary": b.bridge_primary.metrics_address,
                              "replica": b.bridge_replica.metrics_address})["nodes"]
        p, r = nodes["primary"].get("counters", {}), nodes["replica"].get("counters", {})
        semi = nodes["primary"].get("semi_sync", {})
        return {"primary_reconnects": p.get("reconnects"), "binlog_reopens": p.get("binlog_reopens"),
                "frames_resent": p.get("frames_resent"), "replica_reconnects": r.get("reconnects"),
                "corrupt_frames": r.get("corrupt_frames"), "acks_sent": semi.get("acks_sent"),
                "acks_skipped": semi.get("acks_skipped"), "bridge_seen_degradations": semi.get("degradations")}

    def stages(self) -> dict:
        """Both bridge processes' stage percentiles (µs) over the bridge phase, GC pauses included."""
        b = self.bench
        nodes = fetch_status({"primary": b.bridge_primary.metrics_address,
                              "replica": b.bridge_replica.metrics_address})["nodes"]
        return {role: {stage: {k: v for k, v in s.items() if k != "hdr"} for stage, s in node.get("stages", {}).items()}
                for role, node in nodes.items()}

    def stop_watching_bridge(self) -> None:
        """No more probes for the bridge's watcher; the ones it waits for arrive first."""
        self.active[0] = 0
        time.sleep(PROBE_EVERY_S * 2)
        self.bench.wait(self.bench.bridge_pos, self.bench.primary_pos(), alive=self.bench.bridge_alive)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.stop_load.set()
        try:  # read before the join: a process that put on a queue ends once it is read
            self.commit_s = dict(zip(LOAD_PHASES, self.commit_queue.get(timeout=60)))
        except Empty:
            self.log("the load did not report its commit times")
        self.loader.join(timeout=30)
        deadline = time.monotonic() + 60
        while any(proc.is_alive() for _, proc, _ in self.watchers) and time.monotonic() < deadline:
            self._drain(None, "")  # a process that put on a queue ends once the queue is read
            time.sleep(0.1)
        self._drain(None, "")
        for _, proc, _ in self.watchers:
            if proc.is_alive():
                proc.terminate()


def _line(row: dict) -> str:
    lag = " ".join(f"{side} p50/p99/max {v['p50']}/{v['p99']}/{v['max']} us" for side, v in row["lag_us"].items())
    c = row["cpu_us_per_txn"]
    short = f" BELOW the offered rate ({row['achieved_rate']} txn/s)" if row["below_offered"] else ""
    return (f"minute {row['minute']} ({row['phase']}): {row['transactions']} txns{short}; {lag}; semi-sync "
            f"degradations {row['semi_sync']['degradations']}, not acked {row['semi_sync']['commits_not_acked']}; "
            f"cpu us/txn bridge {c.get('primary side', '-')} + {c.get('replica side', '-')}, replica server "
            f"{c['replica server']}, native server {c['native replica server']}; rss {row['rss_mib']}")


# --- the run -------------------------------------------------------------------------

def run(minutes: int, native_minutes: int, rate: int, semi_sync: str, state_dir: str, ack_timeout_ms: int = 10,
        out: Path = RESULTS, log=print, primary_nice: int = 0, transport: str = "shm", replica_nice: int = 0,
        hogs: int = 0, realtime_priority: int = 0) -> dict:
    rt = ("--realtime-priority", str(realtime_priority)) if realtime_priority else ()
    bench = Bench(state_dir, transport, extra_primary=("--semi-sync", semi_sync, *rt), extra_replica=rt)
    started_at = dt.datetime.now(dt.timezone.utc)
    stress, busy = None, []
    try:
        primary_sql(bench, f"DROP DATABASE IF EXISTS {SCHEMA}", f"CREATE DATABASE {SCHEMA}", *TABLES,
                    f"INSERT INTO {SCHEMA}.accounts SELECT seq, 0 "
                    f"FROM {numbers(bench.primary, SCHEMA, ACCOUNTS - 1, 0)}")
        bench.semi_sync_sql(wait_point="'AFTER_SYNC'", timeout=ack_timeout_ms, enabled="ON")
        bench.restart_native(semi_sync="OFF")
        bench.start_bridge()
        if primary_nice:
            renice(bench.bridge_primary.proc.pid, primary_nice, log)
        if replica_nice:  # over tcp its receiver is on the ACK's path: it answers before the primary side ACKs
            renice(bench.bridge_replica.proc.pid, replica_nice, log, "replica side")
        wait_clients(bench, 1)
        bench.wait(bench.bridge_pos, bench.primary_pos(), alive=bench.bridge_alive)
        bench.wait(bench.native_pos, bench.primary_pos())
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        if hogs:
            log(f"{hogs} busy loops at nice 0 beside everything, both phases (a busy host)")
        stress = Run(bench, rate, semi_sync, log)
        counters_start = stress._counters()
        stress.start_load()
        log(f"bridge phase: {minutes} min at {rate} txn/s, the bridge the primary's semi-sync replica ({semi_sync})")
        stress.phase("bridge", minutes, 1)
        stress.load_phase.value = LOAD_PHASES.index("switch")
        counters_end = stress._counters()
        stages = stress.stages()
        stress.stop_watching_bridge()
        stress.active[1] = 0  # no probes while the native replica restarts as the semi-sync one
        bench.stop_bridge_reader()
        semi_sync_args, bench.extra_primary = bench.extra_primary, rt  # the same work, not semi-sync
        bench.start_bridge()
        bench.restart_native(semi_sync="ON")
        wait_clients(bench, 1)
        bench.wait(bench.native_pos, bench.primary_pos())
        deadline = time.monotonic() + 60
        while semi_status(bench).get("status", "OFF").upper() != "ON" and time.monotonic() < deadline:
            time.sleep(0.1)  # the first commit acknowledged by the native replica turns it on again
        stress.active[1] = 1
        stress.load_phase.value = LOAD_PHASES.index("native")
        log(f"native phase: {native_minutes} min, the native replica the semi-sync replica")
        stress.phase("native", native_minutes, minutes + 1)
        stress.stop()
        bench.restart_native(semi_sync="OFF")
        bench.stop_bridge_reader()
        bench.extra_primary = semi_sync_args
        bench.start_bridge()  # as in the bridge phase, to the end
        target = bench.primary_pos()
        bench.wait(bench.native_pos, target)
        bench.wait(bench.bridge_pos, target, alive=bench.bridge_alive)
        compared = {side: compare_databases(MysqlUrl.parse(bench.info["primary_admin"]), MysqlUrl.parse(url),
                                            [SCHEMA])
                    for side, url in (("bridge", bench.info["replica_admin"]), ("native", bench.info["native_admin"]))}
    finally:
        for hog in busy:
            hog.kill()
            hog.wait()
        if stress is not None:
            stress.stop()
        bench.semi_sync_sql(enabled="OFF")
        bench.restart_native(semi_sync="OFF")
        bench.stop()
    counters = {k: (counters_end.get(k) or 0) - (counters_start.get(k) or 0) for k in RECONNECTS}
    result = summarize(stress, compared, counters, minutes, native_minutes, rate, semi_sync, ack_timeout_ms,
                       started_at)
    result["bridge_stages_us"] = stages
    result["transport"] = transport
    out.mkdir(parents=True, exist_ok=True)
    name = f"{started_at.date().isoformat()}-stress-{minutes}min-{transport}-{semi_sync}-{ack_timeout_ms}ms" + \
        (f"-nice{primary_nice}" if primary_nice else "") + (f"-replica-nice{replica_nice}" if replica_nice else "") + \
        (f"-rt{realtime_priority}" if realtime_priority else "") + (f"-hogs{hogs}" if hogs else "")
    result["primary_side_nice"], result["replica_side_nice"] = primary_nice, replica_nice
    result["realtime_priority"], result["busy_loops"] = realtime_priority, hogs
    (out / f"{name}.json").write_text(json.dumps(result, indent=2))
    (out / f"{name}.html").write_text(render_html(result))
    log(f"written: {out / name}.json and .html")
    return result


def renice(pid: int, nice: int, log, who: str = "primary side") -> None:
    """Every thread of a bridge process at ``nice`` (Linux keeps it per thread; threads
    made later inherit it), as `Nice=` in its systemd unit would start it."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
    log(f"{who} (pid {pid}) at nice {nice}")


def summarize(stress: Run, compared: dict, reconnect_counters: dict, minutes: int, native_minutes: int, rate: int,
              semi_sync: str, ack_timeout_ms: int, started_at) -> dict:
    bridge_rows = [m for m in stress.minutes if m["phase"] == "bridge"]
    native_rows = [m for m in stress.minutes if m["phase"] == "native"]
    lag = {phase: {side: _percentiles(v) for side, v in sides.items() if v} for phase, sides in stress.lags.items()}
    semi = {phase: {k: sum(m["semi_sync"][k] for m in stress.minutes if m["phase"] == phase)
                    for k in ("degradations", "commits_not_acked", "commits_acked", "async_s")}
            for phase in ("bridge", "native")}
    cpu_sum, txns = {}, sum(m["transactions"] for m in bridge_rows)
    for key in ("primary side", "replica side", "replica server", "native replica server", "primary server",
                "load"):
        spent = sum(m["cpu_us_per_txn"].get(key, 0) * m["transactions"] for m in bridge_rows)
        cpu_sum[key] = round(spent / max(txns, 1), 1)
    rss = {k: [m["rss_mib"][k] for m in bridge_rows] for k in ("primary side", "replica side")}
    growth = {k: round(v[-1] - v[min(1, len(v) - 1)], 1) for k, v in rss.items() if v}
    reconnects = sum(reconnect_counters.values())
    b, n, n_async = lag["bridge"].get("bridge"), lag["native"].get("native"), lag["bridge"].get("native")
    bridge_rate = txns / max(1, 60 * len(bridge_rows))
    native_rate = sum(m["transactions"] for m in native_rows) / max(1, 60 * len(native_rows))
    comparable = abs(native_rate - bridge_rate) <= 0.1 * max(bridge_rate, 1)  # else the load was not the same
    commit = {phase: _percentiles(stress.commit_s[phase]) for phase in ("bridge", "native")
              if stress.commit_s.get(phase)}
    criteria = {
        "zero reconnects on the bridge": {"met": reconnects == 0, "value": reconnect_counters},
        "zero semi-sync degradations with the bridge": {
            "met": semi["bridge"]["degradations"] == 0 and semi["bridge"]["commits_not_acked"] == 0,
            "value": semi["bridge"], "native_phase": semi["native"]},
        "P999 lag at least 10x below native's": {
            "met": bool(b and n and b["p999"] * 10 <= n["p999"] and comparable),
            "value": {"rates_comparable": comparable, "bridge_p999_us": b and b["p999"],
                      "native_semi_sync_p999_us": n and n["p999"],
                      "ratio": _ratio(n, b), "native_async_same_time_p999_us": n_async and n_async["p999"],
                      "ratio_async": _ratio(n_async, b)}},
        "commit P99 with the bridge at most native semi-sync's": {
            "met": bool(len(commit) == 2 and commit["bridge"]["p99"] <= commit["native"]["p99"] and comparable),
            "value": {"rates_comparable": comparable, **{f"{k}_p99_us": v["p99"] for k, v in commit.items()}}},
        "replica side apply cost at most 50 us per transaction": {"met": cpu_sum["replica side"] <= 50,
                                                                   "value": cpu_sum["replica side"]},
        "no RSS growth of the bridge processes": {"met": all(g < 10 for g in growth.values()), "value_mib": growth},
        "both replicas equal the primary row by row": {
            "met": all(c.ok for c in compared.values()),
            "value": {s: {"ok": c.ok, "tables": len(c.digests), "diffs": [d.table for d in c.diffs]}
                      for s, c in compared.items()}},
    }
    return {"benchmark": "acceptance run: the bridge as the primary's semi-sync replica under a steady mixed load",
            "started_at": started_at.isoformat(timespec="seconds"), "commit": _commit(), "bridge_minutes": minutes,
            "native_minutes": native_minutes, "rate_offered": rate,
            "rate_achieved": round(txns / max(1, 60 * len(bridge_rows))),
            "rate_achieved_native_phase": round(sum(m["transactions"] for m in native_rows)
                                                / max(1, 60 * len(native_rows))),
            "windows_below_offered": {phase: [m["minute"] for m in rows if m["below_offered"]]
                                      for phase, rows in (("bridge", bridge_rows), ("native", native_rows))},
            "semi_sync": semi_sync,
            "ack_timeout_ms": ack_timeout_ms, "lag_us": lag, "commit_us": commit, "probes_never_seen": stress.lost,
            "cpu_us_per_txn_bridge_phase": cpu_sum,
            "criteria": criteria, "minutes": stress.minutes}


def _ratio(native: dict | None, bridge: dict | None) -> float | None:
    """How many times the bridge's P999 fits in native's."""
    return round(native["p999"] / bridge["p999"], 2) if native and bridge and bridge["p999"] > 0 else None


def _commit() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                              cwd=RESULTS.parent, timeout=10).stdout.strip()
    except OSError:
        return "unknown"


# --- report --------------------------------------------------------------------------

def render_html(result: dict) -> str:
    rows = "".join(f"<tr><td>{html.escape(name)}</td><td class='{'ok' if c['met'] else 'no'}'>"
                   f"{'met' if c['met'] else 'NOT met'}</td><td><code>"
                   f"{html.escape(json.dumps(c.get('value', c.get('value_mib'))))}"
                   "</code></td></tr>" for name, c in result["criteria"].items())
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>rdma-bridge acceptance run</title>"
            "<style>body{font-family:sans-serif;margin:1.5em 2em} svg{width:100%;height:auto} "
            "td{padding:2px 10px} .ok{color:#080} .no{color:#b00}</style></head><body>"
            f"<h1>Acceptance run {html.escape(result['started_at'])}</h1>"
            f"<p>{result['bridge_minutes']} min with the bridge as the semi-sync replica ({result['semi_sync']}, ACK "
            f"timeout {result['ack_timeout_ms']} ms) at {result['rate_offered']} txn/s offered "
            f"({result['rate_achieved']} achieved), then {result['native_minutes']} min with the native replica as "
            "the semi-sync replica. Lag: commit returned on the primary to visible on the replica, per minute.</p>"
            f"<table>{rows}</table>" + lag_chart(result["minutes"]) +
            f"<pre>{html.escape(json.dumps({k: v for k, v in result.items() if k != 'minutes'}, indent=2))}</pre>"
            "</body></html>")


SERIES = {("bridge", "p50"): "#1f6fd1", ("bridge", "p99"): "#6aa5ec", ("bridge", "max"): "#b7d3f5",
          ("native", "p50"): "#c4122f", ("native", "p99"): "#e27a8a", ("native", "max"): "#f2c2ca"}


def lag_chart(minutes: list[dict], width: int = 1000, height: int = 320) -> str:
    """Per-minute lag percentiles of both replicas on a log axis (1 µs to the largest)."""
    left, right, top, bottom = 70, 20, 40, 40
    pw, ph = width - left - right, height - top - bottom
    values = [v[k] for m in minutes for v in m["lag_us"].values() for k in ("p50", "p99", "max")]
    hi = math.ceil(math.log10(max([10.0] + [v for v in values if v > 0])))
    lo = min(2, hi - 1)
    last = max((m["minute"] for m in minutes), default=1)

    def x(minute: int) -> float:
        return left + (minute - 1) / max(1, last - 1) * pw

    def y(us: float) -> float:
        return top + ph - (math.log10(max(us, 10 ** lo)) - lo) / (hi - lo) * ph

    parts = [f"<svg viewBox='0 0 {width} {height}' xmlns='http://www.w3.org/2000/svg' font-size='12' "
             "font-family='sans-serif'>"]
    for d in range(lo, hi + 1):
        label = f"{10 ** (d - 3):g} ms" if d >= 3 else f"{10 ** d} µs"
        parts.append(f"<line x1='{left}' x2='{left + pw}' y1='{y(10 ** d):.1f}' y2='{y(10 ** d):.1f}' "
                     f"stroke='#e4e4e4'/><text x='{left - 6}' y='{y(10 ** d) + 4:.1f}' "
                     f"text-anchor='end'>{label}</text>")
    for i, ((side, key), color) in enumerate(SERIES.items()):
        points = [(x(m["minute"]), y(m["lag_us"][side][key])) for m in minutes if side in m["lag_us"]]
        if points:
            parts.append(f"<polyline fill='none' stroke='{color}' stroke-width='2' points='"
                         + " ".join(f"{px:.1f},{py:.1f}" for px, py in points) + "'/>")
        parts.append(f"<rect x='{left + i * pw / 6:.1f}' y='10' width='14' height='4' fill='{color}'/>"
                     f"<text x='{left + i * pw / 6 + 18:.1f}' y='16'>{side} {key}</text>")
    parts.append(f"<line x1='{left}' x2='{left + pw}' y1='{top + ph}' y2='{top + ph}' stroke='#000'/>"
                 f"<text x='{left + pw / 2:.1f}' y='{height - 8}' text-anchor='middle'>minute of the run</text>"
                 "</svg>")
    return "".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=None,
                    help="the whole run: the bridge phase this long, the native phase a tenth of it")
    ap.add_argument("--minutes", type=int, default=60, help="the bridge phase (without --hours)")
    ap.add_argument("--native-minutes", type=int, default=6, help="the native semi-sync phase (without --hours)")
    ap.add_argument("--rate", type=int, default=2000, help="transactions/s offered")
    ap.add_argument("--semi-sync", default="received", choices=["received", "applied"])
    ap.add_argument("--ack-timeout-ms", type=int, default=10)
    ap.add_argument("--state-dir", default=".sandbox")
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--primary-nice", type=int, default=0,
                    help="run the bridge's primary side at this nice value (e.g. -10; root), the result file named so")
    ap.add_argument("--replica-nice", type=int, default=0,
                    help="run the bridge's replica side at this nice value (e.g. -10; root: over tcp its receiver "
                         "answers before a semi-sync ACK), the result file named so")
    ap.add_argument("--realtime-priority", type=int, default=0, metavar="PRIORITY",
                    help="start both bridge ends with --realtime-priority PRIORITY (root), the result file named so")
    ap.add_argument("--hogs", type=int, default=0, metavar="N",
                    help="N busy loops (nice 0) beside everything during both phases: a busy host")
    args = ap.parse_args()
    if args.hours is not None:
        args.minutes, args.native_minutes = max(1, round(args.hours * 60)), max(1, round(args.hours * 6))
    run(args.minutes, args.native_minutes, args.rate, args.semi_sync, args.state_dir, args.ack_timeout_ms,
        log=lambda m: print(m, file=sys.stderr, flush=True), primary_nice=args.primary_nice,
        transport=args.transport, replica_nice=args.replica_nice, hogs=args.hogs,
        realtime_priority=args.realtime_priority)


if __name__ == "__main__":
    main()
