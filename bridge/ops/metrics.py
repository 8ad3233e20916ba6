"""Observability: per-stage latency histograms (HDR), a Prometheus endpoint and a
JSON status document per node.

Stages, per transaction (µs; points in time taken with the wall clock of the host
that takes them):

    place    primary   ship start (encoding begins) -> frame placed in the replica
                       ring, flush done
    deliver  replica   ship start -> picked up by the replica's consumer
    apply    replica   picked up -> committed on the replica
    bridge   replica   commit read from the primary's binlog -> committed on the replica
    lag      replica   heartbeat row written on the primary -> committed on the replica
    gc       both      one pause of Python's cyclic garbage collector (every thread of
                       the process waits while it runs; not per transaction)

``deliver``, ``bridge`` and ``lag`` subtract a primary-host time from a replica-host
time: across hosts they are only as good as the clock sync (PTP/chrony) between
them; on one host they are exact. Everything else is measured on one host.

Each node serves, on its metrics address (loopback by default):
    /metrics   Prometheus text format (names in METRICS and STAGE_METRICS below): each
               stage as a histogram (``_bucket{le}``, ``_sum``, ``_count``; log-spaced
               buckets from 1 µs to 10 s), so that Prometheus computes any window's
               quantiles (``histogram_quantile(0.99, rate(..._bucket[1m]))``)
    /status    the node's status as JSON, with each stage's histogram (HDR, base64), its
               lifetime quantiles and the last minute's
"""

from __future__ import annotations

import base64
import bisect
import gc
import json
import logging
import math
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hdrh.histogram import HdrHistogram

from bridge import __version__
from bridge.errors import ConfigError
from bridge.ops.statusdoc import StatusDocument
from bridge.wire import native
from bridge.wire.control import PROTOCOL_VERSION

log = logging.getLogger(__name__)
LOWEST_US, HIGHEST_US, DIGITS = 1, 3_600_000_000, 3  # 1 µs .. 1 h, 3 significant digits
PERCENTILES = (50.0, 99.0, 99.9)
# the Prometheus histogram's upper bounds, µs: 1, 2.5 and 5 per decade from 1 µs to 10 s
BUCKETS_US = tuple(m * 10 ** e for e in range(7) for m in (1, 2.5, 5)) + (10_000_000,)
WINDOW_S, WINDOWS = 10, 6  # the last minute's quantiles: the samples of six windows of ten seconds
STAGES = {
    "primary": ("place", "ack", "gc"),
    "replica": ("deliver", "apply", "bridge", "lag", "gc"),
}

# status key -> (Prometheus name, type, help). Keys a node does not report are skipped.
METRICS = {
    "transactions_shipped": ("rdma_bridge_transactions_shipped_total", "counter",
                             "Transactions placed in the replica's ring (primary side)."),
    "frames_resent": ("rdma_bridge_frames_resent_total", "counter",
                      "Frames resent from the local ring after a link loss."),
    "binlog_reopens": ("rdma_bridge_binlog_reopens_total", "counter", "Times the binlog stream was (re)opened."),
    "reconnects": ("rdma_bridge_reconnects_total", "counter",
                   "Reconnects: to the replica bridge (primary side) or to the replica server (replica side)."),
    "ring_backlog_frames": ("rdma_bridge_ring_backlog_frames", "gauge", "Frames in the ring not yet applied."),
    "ring_backlog_bytes": ("rdma_bridge_ring_backlog_bytes", "gauge", "Ring bytes not yet applied."),
    "transactions_applied": ("rdma_bridge_transactions_applied_total", "counter",
                             "Transactions committed on the replica."),
    "heartbeats_applied": ("rdma_bridge_heartbeats_applied_total", "counter",
                           "Heartbeat rows committed on the replica (not in transactions_applied)."),
    "heartbeats_shipped": ("rdma_bridge_heartbeats_shipped_total", "counter",
                           "Heartbeat rows placed in the replica's ring (not in transactions_shipped)."),
    "rows_applied": ("rdma_bridge_rows_applied_total", "counter",
                     "Row changes committed on the replica (apply mode sql)."),
    "row_events_applied": ("rdma_bridge_row_events_applied_total", "counter",
                           "Binlog row events committed on the replica (apply mode binlog; each holds one or more "
                           "rows of one statement)."),
    "groups_applied": ("rdma_bridge_groups_applied_total", "counter",
                       "Replica transactions that applied groups of source transactions."),
    "corrupt_frames": ("rdma_bridge_corrupt_frames_total", "counter",
                       "Frames refused by the consumer (bad crc, torn, out of sequence)."),
    "apply_conflicts": ("rdma_bridge_apply_conflicts_total", "counter",
                        "Parallel segments that waited for an earlier conflicting segment."),
    "apply_effective_parallelism": ("rdma_bridge_apply_effective_parallelism", "gauge",
                                    "Busy time of the apply workers over wall time (1 = serial)."),
    "applied_seq": ("rdma_bridge_applied_seq", "gauge", "Frame seq of the last committed transaction."),
    "account_statements_replayed": ("rdma_bridge_account_statements_replayed_total", "counter",
                                    "CREATE USER, GRANT and the like replayed (start-replica --account-statements)."),
    "account_statements_left_out": ("rdma_bridge_account_statements_left_out_total", "counter",
                                    "CREATE USER, GRANT and the like not replayed: the apply user may not manage "
                                    "accounts, or --account-statements leave-out."),
    "last_lag_seconds": ("rdma_bridge_lag_seconds", "gauge",
                         "Seconds since the last heartbeat the replica applied was written on the primary "
                         "(pt-heartbeat: grows while nothing is applied, up to one heartbeat interval while it is)."),
    "lag_beyond_delay_seconds": ("rdma_bridge_lag_beyond_delay_seconds", "gauge",
                                 "start-replica --delay: the lag past the delay asked for."),
}
STAGE_METRICS = {
    "histogram": "rdma_bridge_stage_seconds",  # _bucket {stage, le}, _sum, _count
    "quantiles": "rdma_bridge_stage_latency_seconds",  # {stage, quantile}: 0.5, 0.99, 0.999 and 1 (max), since start
    "count": "rdma_bridge_stage_samples",  # a counter: rdma_bridge_stage_samples_total {stage}
}


SIGNIFICANT_BITS = 11  # a recorded value keeps this many bits: under 0.05% off, finer than HDR's 3 digits


class GcPauses:
    """Each pause of the cyclic garbage collector, recorded in the ``gc`` stage: it
    stops the whole process, so it is tail latency whatever stage it falls in."""

    def __init__(self, stages: Stages) -> None:
        self._stages, self._started = stages, 0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self._stages.record("gc", (time.perf_counter_ns() - self._started) / 1000)
            self._started = 0

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


class Stages:
    """HDR histograms of the stages of one node, since its start and over the last minute.
    Recording is on the hot path (a few per transaction), so it only counts the value,
    rounded down to 11 significant bits, in a plain dict (~0.3 µs); the HDR histograms,
    the Prometheus buckets, the sums and the current ten-second window (the last minute
    is six of them) take those counts when a summary is asked for or a window ends
    (``tick``). One thread records per stage; a fold swaps the dict away whole, so at
    worst a sample recorded in that instant is not counted."""

    def __init__(self, names) -> None:
        self._lock = threading.Lock()
        self._names = tuple(names)
        self._hist = {name: HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS) for name in names}
        self._pending: dict[str, dict[int, int]] = {name: {} for name in names}
        self._buckets = {name: [0] * (len(BUCKETS_US) + 1) for name in names}  # the last one: past 10 s
        self._sum_us = {name: 0 for name in names}
        self._recent: deque[tuple[int, dict[str, dict[int, int]]]] = deque(maxlen=WINDOWS + 2)
        self._window = -1  # the current window: int(time.monotonic()) // WINDOW_S

    def record(self, stage: str, micros: float, count: int = 1) -> None:
        value = int(micros)
        if value < LOWEST_US:
            value = LOWEST_US
        elif value > HIGHEST_US:
            value = HIGHEST_US
        shift = value.bit_length() - SIGNIFICANT_BITS
        if shift > 0:
            value = value >> shift << shift
        counts = self._pending[stage]
        counts[value] = counts.get(value, 0) + count

    def tick(self) -> None:
        """At a ten-second window's end, what was recorded goes into the histograms and
        that window (the node's loop calls it as it goes: the last minute is exact to
        within one turn of it)."""
        if int(time.monotonic()) // WINDOW_S != self._window:
            with self._lock:
                self._fold()

    def _fold(self) -> None:
        """The counts recorded since the last fold into the lifetime histograms, buckets
        and sums, and into the current window (a new one once ten seconds passed)."""
        window = int(time.monotonic()) // WINDOW_S
        if window != self._window:
            self._recent.append((window, {name: {} for name in self._names}))
            self._window = window
        current = self._recent[-1][1]
        for name, h in self._hist.items():
            counts, self._pending[name] = self._pending[name], {}
            buckets, recent = self._buckets[name], current[name]
            for value, n in counts.items():
                h.record_value(value, n)
                buckets[bisect.bisect_left(BUCKETS_US, value)] += n
                self._sum_us[name] += value * n
                recent[value] = recent.get(value, 0) + n

    def summary(self, with_histograms: bool = True) -> dict:
        """{stage: {count, p50, p99, p999, max (µs), sum_us, buckets, last_minute, hdr}}."""
        with self._lock:
            self._fold()
            recent = self._last_minute()
            out = {}
            for name, h in self._hist.items():
                entry = _figures(h)
                entry["sum_us"] = self._sum_us[name]
                entry["buckets"] = list(self._buckets[name])
                entry["last_minute"] = recent[name]
                if with_histograms:
                    entry["hdr"] = base64.b64encode(h.encode()).decode("ascii")
                out[name] = entry
            return out

    def _last_minute(self) -> dict:
        """Each stage's count, quantiles and max over the windows of the last minute."""
        oldest = int(time.monotonic()) // WINDOW_S - WINDOWS + 1
        merged = {name: HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS) for name in self._names}
        for window, stages in self._recent:
            if window >= oldest:
                for name, counts in stages.items():
                    for value, n in counts.items():
                        merged[name].record_value(value, n)
        return {name: _figures(h) for name, h in merged.items()}


def _figures(h: HdrHistogram) -> dict:
    """count, p50, p99, p999 and max (µs) of a histogram."""
    n = h.get_total_count()
    out = {"count": n, "max": h.get_max_value() if n else 0}
    for p in PERCENTILES:
        out[_pname(p)] = h.get_value_at_percentile(p) if n else 0
    return out


def _pname(p: float) -> str:
    return "p" + f"{p:g}".replace(".", "")  # 50 -> p50, 99.9 -> p999


def decode_histogram(text: str) -> HdrHistogram:
    return HdrHistogram.decode(base64.b64decode(text))


def buckets(text: str, per_decade: int = 10) -> list[tuple[float, float, int]]:
    """A histogram as log-spaced buckets: (low µs, high µs, count), empty ones dropped."""
    h = decode_histogram(text)
    counts: dict[int, int] = {}
    for item in h.get_recorded_iterator():
        value = max(1, item.value_iterated_to)
        b = int(math.log10(value) * per_decade)
        counts[b] = counts.get(b, 0) + item.count_at_value_iterated_to
    return [(10 ** (b / per_decade), 10 ** ((b + 1) / per_decade), n) for b, n in sorted(counts.items())]


def prometheus_text(role: str, st: StatusDocument) -> str:
    """The Prometheus text exposition format (0.0.4) of a node's status. Written here,
    not with prometheus_client, whose import alone costs a node ~10 MB of RSS; the
    tests parse this output with prometheus_client's parser."""
    lines: list[str] = []

    def family(name: str, kind: str, doc: str, samples: list[tuple[dict, float]]) -> None:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {float(value)!r}")

    family("rdma_bridge_up", "gauge", "1 while the node runs.", [({"role": role}, 1)])
    family("rdma_bridge_build_info", "gauge", "Always 1: the release, the wire protocol version (both ends must "
           "speak the same) and the parts this process runs compiled.",
           [({"role": role, "version": __version__, "protocol": PROTOCOL_VERSION,
              "compiled": ",".join(native.compiled_parts()) or "none"}, 1)])
    cpu = os.times()
    family("process_cpu_seconds_total", "counter", "User and system CPU time of the process, in seconds.",
           [({"role": role}, cpu.user + cpu.system)])
    family("process_resident_memory_bytes", "gauge", "Resident memory of the process, in bytes.",
           [({"role": role}, _resident_bytes())])
    family("rdma_bridge_info", "gauge", "Always 1: what this node serves (the replica side's channel, the primary "
           "side's replica side), for alerts and dashboards to name it.",
           [({"role": role, "channel": st.get("channel", ""), "replica": st.get("replica", "")}, 1)])
    for key, (name, kind, doc) in METRICS.items():
        value = st.get("counters", {}).get(key)
        if value is not None:
            family(name, kind, doc, [({"role": role}, value)])
    if "apply_stopped" in st:
        stopped = st["apply_stopped"]
        family("rdma_bridge_apply_stopped", "gauge", "1 while applying is stopped on an error (code: the server's "
               "error number; `rdma-bridge resume` or `skip` go on), 0 while it applies.",
               [({"role": role, "code": stopped.get("code", 0) if stopped else ""}, 1 if stopped else 0)])
    relay = st.get("relay")
    if relay:
        channel = relay.get("channel") or {}
        family("rdma_bridge_relay_channel_running", "gauge", "Apply mode relay: 1 while the replica server's own "
               "replication thread (io, sql) runs, as SHOW REPLICA STATUS says (io Connecting: 0).",
               [({"role": role, "thread": t}, 1 if channel.get(f"{t}_running") == "Yes" else 0) for t in ("io", "sql")])
        if channel.get("seconds_behind") is not None:
            family("rdma_bridge_relay_seconds_behind_source", "gauge", "Apply mode relay: the replica server's "
                   "Seconds_Behind_Source (Seconds_Behind_Master).", [({"role": role}, channel["seconds_behind"])])
        family("rdma_bridge_relay_feed_bytes", "gauge", "Apply mode relay: bytes of the transactions the replica "
               "side keeps for the replica server (until it executed them, or its IO thread was sent them).",
               [({"role": role}, relay["feed_bytes"])])
    behind = st.get("behind")
    if behind:
        family("rdma_bridge_behind_transactions", "gauge", "Transactions the primary committed that the replica "
               "has not (not yet read from the binlog, plus in the ring).", [({"role": role}, behind["transactions"])])
        family("rdma_bridge_behind_bytes", "gauge", "Binlog bytes the replica has not applied (unread binlog plus "
               "ring backlog).", [({"role": role}, behind["bytes"])])
        for key, name, doc in (("apply_rate_tps", "rdma_bridge_apply_rate", "Transactions the replica commits per "
                                "second (last 10 s)."),
                               ("write_rate_tps", "rdma_bridge_primary_write_rate", "Transactions the primary "
                                "commits per second (last 10 s)."),
                               ("catch_up_eta_s", "rdma_bridge_catch_up_eta_seconds", "Seconds until the replica "
                                "has caught up at the current rates (absent while it is not catching up).")):
            if behind.get(key) is not None:
                family(name, "gauge", doc, [({"role": role}, behind[key])])
        if behind.get("primary_transactions") is not None:
            family("rdma_bridge_primary_transactions_total", "counter", "Transactions the primary has committed, "
                   "by its GTID position (rate() of it is the primary's write rate; the replica side's "
                   "rdma_bridge_transactions_applied_total, the apply rate).",
                   [({"role": role}, behind["primary_transactions"])])
    semi = st.get("semi_sync") or {}
    if semi.get("state"):
        family("rdma_bridge_semi_sync_on", "gauge", "1 while the primary runs semi-sync (an ACK is awaited), "
               "0 while it has degraded to async.", [({"role": role}, semi["state"] == "sync")])
        family("rdma_bridge_semi_sync_async_streak_seconds", "gauge", "How long the current async streak is.",
               [({"role": role}, semi["async_streak_s"])])
        family("rdma_bridge_semi_sync_async_seconds_total", "counter", "Total time the primary was async.",
               [({"role": role}, semi["async_total_s"])])
        family("rdma_bridge_semi_sync_degradations_total", "counter", "Switches from semi-sync to async, by reason.",
               [({"role": role, "reason": r}, n) for r, n in semi["degradations"].items()])
        family("rdma_bridge_semi_sync_acks_total", "counter", "Semi-sync ACKs sent to the primary.",
               [({"role": role}, semi["acks_sent"])])
        family("rdma_bridge_semi_sync_acks_skipped_total", "counter", "ACKs the primary asked for and did not get: "
               "the replica side did not hold (received) or commit (applied) the transaction within the "
               "primary's timeout.", [({"role": role}, semi["acks_skipped"])])
    members = st.get("replicas")
    if members:
        states = ("streaming", "catching up", "down", "fenced", "refused")
        family("rdma_bridge_replica_state", "gauge", "Fan-out: 1 for each replica side's current state (streaming "
               "from the shared read, catching up from a dump of its own, down, fenced or refused).",
               [({"role": role, "replica": m["replica"], "state": state}, m["state"] == state)
                for m in members for state in states])
        for key, name, doc in (("behind_s", "rdma_bridge_replica_behind_seconds",
                                "Fan-out: how long the oldest frame in each replica side's ring that it has not "
                                "applied has been there (0: it has applied everything placed)."),
                               ("ring_backlog_frames", "rdma_bridge_replica_ring_backlog_frames",
                                "Fan-out: frames placed in each replica side's ring and not yet applied."),
                               ("ring_backlog_bytes", "rdma_bridge_replica_ring_backlog_bytes",
                                "Fan-out: bytes placed in each replica side's ring and not yet applied."),
                               ("queued_bytes", "rdma_bridge_replica_queued_bytes",
                                "Fan-out: bytes read for a replica side that wait in the primary side's memory for "
                                "space in its ring (past a bound, or the backpressure timeout, it catches up on "
                                "its own).")):
            family(name, "gauge", doc, [({"role": role, "replica": m["replica"]}, m[key]) for m in members
                                        if m[key] is not None])
    stages = {stage: s for stage, s in st.get("stages", {}).items() if "buckets" in s}
    if stages:
        name = STAGE_METRICS["histogram"]
        lines.append(f"# HELP {name} Per-stage latency in seconds (docs/observability.md lists the stages); "
                     "histogram_quantile() over rate() of the buckets gives any window's quantiles.")
        lines.append(f"# TYPE {name} histogram")
        for stage, s in stages.items():
            labels = f'role="{role}",stage="{_escape(stage)}"'
            seen = 0
            for bound, n in zip((*BUCKETS_US, math.inf), s["buckets"]):
                seen += n
                le = "+Inf" if bound == math.inf else f"{bound / 1e6:g}"
                lines.append(f'{name}_bucket{{{labels},le="{le}"}} {float(seen)!r}')
            lines.append(f"{name}_sum{{{labels}}} {s['sum_us'] / 1e6!r}")
            lines.append(f"{name}_count{{{labels}}} {float(seen)!r}")
    quantiles, counts = [], []
    for stage, s in st.get("stages", {}).items():
        for p in PERCENTILES:
            quantiles.append(({"role": role, "stage": stage, "quantile": f"{p / 100:g}"}, s[_pname(p)] / 1e6))
        quantiles.append(({"role": role, "stage": stage, "quantile": "1"}, s["max"] / 1e6))
        counts.append(({"role": role, "stage": stage}, s["count"]))
    family(STAGE_METRICS["quantiles"], "gauge", "Per-stage latency quantiles in seconds since the process started "
           "(quantile 1 is the max); for a window, histogram_quantile() over rdma_bridge_stage_seconds_bucket.",
           quantiles)
    family(STAGE_METRICS["count"] + "_total", "counter", "Samples recorded per stage.", counts)
    return "\n".join(lines) + "\n"


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def not_ready(st: dict) -> str:
    """Why a node is not ready (a readiness probe's 503), "" when it is: the replica side
    in a session and applying, the primary side connected to its replica side and that
    one applying."""
    if st.get("role") == "replica" and not st.get("session"):
        return "no session: no primary side feeds this replica side"
    if st.get("role") == "primary" and not st.get("connected"):
        return "not connected to the replica side"
    stopped = st.get("apply_stopped")
    if stopped:
        return f"applying stopped: {stopped.get('error', '')}"
    return ""


class MetricsServer:
    """/metrics and /status on ``address`` in a daemon thread."""

    def __init__(self, address: tuple[str, int], role: str, status: Callable[[], dict]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                path = self.path.split("?")[0]
                if path == "/metrics":
                    body, ctype = prometheus_text(role, status()).encode(), "text/plain; version=0.0.4; charset=utf-8"
                elif path == "/status":
                    body, ctype = json.dumps(status()).encode(), "application/json"
                elif path in ("/ready", "/live"):  # a readiness probe; a liveness probe (this answers: alive)
                    why = not_ready(status()) if path == "/ready" else ""
                    body, ctype = (why or "ok").encode() + b"\n", "text/plain; charset=utf-8"
                    if why:
                        self.send_response(503)
                        self.send_header("Content-Type", ctype)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                        return
                else:
                    self.send_error(404, "try /metrics, /status, /ready or /live")
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt, *args) -> None:
                log.debug("metrics %s: " + fmt, self.client_address[0], *args)

        try:
            self._server = ThreadingHTTPServer(address, Handler)
        except OSError as exc:
            raise ConfigError(f"metrics endpoint {address[0]}:{address[1]}: {exc.strerror}; pass another "
                              "--metrics HOST:PORT, or --metrics off") from exc
        self._server.daemon_threads = True
        self._server.timeout = None  # each wait lasts until a request or ``close``: an idle endpoint never polls
        self._closing = threading.Event()
        self.address = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._serve, name=f"{role}-metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics and /status (probes: /ready, /live)", *self.address)
        return self

    def _serve(self) -> None:
        while not self._closing.is_set():
            self._server.handle_request()

    def close(self) -> None:
        self._closing.set()
        try:
            self._server.socket.shutdown(socket.SHUT_RDWR)  # wakes the wait (its accept then fails)
        except OSError:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._server.server_close()
