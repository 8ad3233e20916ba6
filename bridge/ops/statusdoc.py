"""The status document, typed: what each side's ``status()`` returns, ``/status``
serves as JSON, ``/metrics`` renders for Prometheus (bridge.ops.metrics) and
`rdma-bridge status` / `report` read back (bridge.ops.report). One definition of its
keys for all of them; a test holds the running nodes' documents to it.

Pure types, no I/O. Times in the names' units (``_s`` seconds, stage figures µs).
"""

from __future__ import annotations

from typing import Literal, TypedDict, get_args, get_origin, get_type_hints, is_typeddict


class Quantiles(TypedDict):
    count: int
    p50: float
    p99: float
    p999: float
    max: float


class StageSummary(TypedDict, total=False):
    count: int
    p50: float
    p99: float
    p999: float
    max: float
    sum_us: int  # every sample's value added up (Prometheus' _sum)
    buckets: list[int]  # samples per bound of bridge.ops.metrics.BUCKETS_US, then past the last
    last_minute: Quantiles  # the same figures over the last minute only
    hdr: str  # the HDR histogram, base64 (absent where a summary is asked without)


class ApplyStopped(TypedDict, total=False):
    """Where and why applying stopped (bridge.node.halt); the primary side holds the
    part it is told: seq, gtid, code, error."""
    seq: int
    gtid: str
    error: str
    code: int
    until: bool
    since: str
    stopped_for_s: float


class Behind(TypedDict):
    """How far behind the replica is, measured by the primary side (bridge.source.behind)."""
    transactions: int
    bytes: int
    primary_transactions: int  # grows by one per transaction the primary commits (a counter)
    apply_rate_tps: float | None
    write_rate_tps: float | None
    catch_up_eta_s: float | None


class ReplicaCounters(TypedDict, total=False):
    transactions_applied: int
    heartbeats_applied: int
    rows_applied: int
    row_events_applied: int
    groups_applied: int
    corrupt_frames: int
    reconnects: int
    applied_seq: int
    ring_backlog_frames: int
    ring_backlog_bytes: int
    apply_conflicts: int
    apply_effective_parallelism: float
    last_lag_seconds: float  # once a heartbeat row was applied: now - its write time on the primary
    account_statements_replayed: int  # CREATE USER, GRANT, ... (start-replica --account-statements)
    account_statements_left_out: int
    lag_beyond_delay_seconds: float  # with --delay: the lag past the delay


class RdmaRoute(TypedDict):
    """Where an rdma queue pair runs and how its packets are marked (bridge.transport.rdma)."""
    device: str
    port: int
    gid_index: int
    gid: str  # the IPv4 address of an IPv4-mapped GID, else the IPv6 text
    link_layer: Literal["Ethernet", "InfiniBand"]
    roce_v2: bool
    chosen_by: str  # the control connection's address, --gid-index, or the best of the table (and why)
    traffic_class: int
    service_level: int


class RdmaRouted(TypedDict, total=False):
    rdma: RdmaRoute  # over rdma, while a session runs


class RelayChannelStatus(TypedDict):
    """The replica server's channel as SHOW REPLICA STATUS shows it (apply mode relay)."""
    io_running: str  # Yes, No, Connecting
    sql_running: str
    io_errno: int
    io_error: str
    sql_errno: int
    sql_error: str
    seconds_behind: int | None  # Seconds_Behind_Source; None while the SQL thread is stopped
    retrieved_gtid_set: str  # MySQL: Retrieved_Gtid_Set; MariaDB: Gtid_IO_Pos
    executed_gtid_set: str
    worker_errno: int  # MySQL: the first failing applier worker's error (0: none, or MariaDB)
    worker_error: str


class RelayServing(TypedDict):
    listen: str  # where the replica server's channel connects
    configured: bool  # this side points the channel at itself at start (--relay-configure yes)
    dumps_served: int  # dumps the replica server's IO thread opened
    feed_transactions: int  # transactions (and chunks) the feed keeps
    feed_bytes: int
    channel: RelayChannelStatus | None  # None: the server has no such channel


class Relayed(TypedDict, total=False):
    relay: RelayServing  # apply mode relay only


class ReplicaStatus(RdmaRouted, Relayed):
    role: Literal["replica"]
    target: str  # the URL, password masked
    channel: str
    listen: str
    transport: str
    workers: int
    apply_mode: str
    replicates: str  # the channel's filter (bridge.filter), e.g. "every table"
    session: bool
    gtid_set: str
    apply_stopped: ApplyStopped | None
    delay_s: float  # start-replica --delay (0: none)
    scheduling: str  # "SCHED_FIFO <priority>" under --realtime-priority, else "normal"
    counters: ReplicaCounters
    stages: dict[str, StageSummary]


class PrimaryCounters(TypedDict):
    transactions_shipped: int
    heartbeats_shipped: int
    frames_resent: int
    binlog_reopens: int
    reconnects: int
    ring_backlog_frames: int
    ring_backlog_bytes: int


class HeartbeatWriting(TypedDict):
    interval_s: float
    written: int
    failures: int
    state: str


class SemiSync(TypedDict, total=False):
    mode: str  # off | received | applied; the rest only when not off
    acks_sent: int
    acks_skipped: int
    state: str  # sync | async
    async_streak_s: float
    async_total_s: float
    degradations: dict[str, int]
    recoveries: int
    last_reason: str
    last_change: str
    primary: dict[str, int]


class FanOutMember(RdmaRouted):
    """One replica side of a fan-out (bridge.node.fanout)."""
    replica: str  # its host:port
    transport: Literal["shm", "tcp", "rdma"]  # what its ring is written over
    state: Literal["streaming", "catching up", "down", "fenced", "refused"]
    connected: bool
    last_gtid: str  # the last transaction placed in its ring
    apply_stopped: ApplyStopped | None
    position: str  # binlog file:offset after the last transaction it was sent (":0": none yet)
    behind_s: float | None  # how long the oldest frame in its ring it has not applied has waited (None: no ring)
    ring_backlog_frames: int
    ring_backlog_bytes: int
    queued_frames: int  # read, waiting in the primary side's memory for space in its ring
    queued_bytes: int


class FanOut(TypedDict, total=False):
    replicas: list[FanOutMember]  # fan-out only: every replica side, in --replica order


class PrimaryStatus(FanOut, RdmaRouted):
    role: Literal["primary"]
    source: str  # the URL, password masked
    replica: str
    transport: str
    apply_mode: str
    connected: bool
    last_gtid: str
    apply_stopped: ApplyStopped | None
    replica_delay_s: float  # the replica side applies this far behind on purpose (its --delay)
    scheduling: str  # "SCHED_FIFO <priority>" under --realtime-priority, else "normal"
    behind: Behind | None
    counters: PrimaryCounters
    heartbeat: HeartbeatWriting | None
    semi_sync: SemiSync
    stages: dict[str, StageSummary]


StatusDocument = ReplicaStatus | PrimaryStatus


def deviations(doc: dict, kind: type) -> set[str]:
    """Where ``doc`` leaves its definition ``kind``, nested documents too: keys it
    does not declare ("+key") and required keys missing ("-key"). Empty: it keeps to it."""
    hints = get_type_hints(kind)
    out = {f"+{key}" for key in doc if key not in hints} | {f"-{key}" for key in kind.__required_keys__ - set(doc)}
    for key, value in doc.items():
        for path, nested, part in _nested(key, hints.get(key), value):
            out |= {f"{d[0]}{path}.{d[1:]}" for d in deviations(part, nested)}
    return out


def _nested(key: str, hint, value):
    """(path, TypedDict, document) for the parts of ``value`` a TypedDict defines:
    ``X`` or ``X | None`` itself, each value of ``dict[str, X]``, each item of ``list[X]``."""
    if isinstance(value, list) and get_origin(hint) is list and is_typeddict(get_args(hint)[0]):
        yield from ((f"{key}[{i}]", get_args(hint)[0], v) for i, v in enumerate(value) if isinstance(v, dict))
        return
    if not isinstance(value, dict):
        return
    if get_origin(hint) is dict:
        _, item = get_args(hint)
        if is_typeddict(item):
            yield from ((f"{key}.{k}", item, v) for k, v in value.items() if isinstance(v, dict))
        return
    for candidate in (hint, *get_args(hint)):
        if is_typeddict(candidate):
            yield key, candidate, value
            return
