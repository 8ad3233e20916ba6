"""Replica node: owns the ring host, the control listener and the apply loop.

Threads: the listener's (bridge.node.listener: control, data and admin connections) and the apply loop
(``run``). A new primary session (hello) pauses the apply loop between
transactions, resets the ring and restarts numbering at applied_seq + 1, so
frames at or below the applied seq are never applied twice.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time

from bridge.apply import lane, modes
from bridge.apply.applier import Applier
from bridge.apply.parallel import ParallelApplier
from bridge.apply.protocol import ApplierLike
from bridge.config import SECRET_ENV, ReplicaConfig, is_loopback
from bridge.errors import BridgeError, ConfigError, EndCode, RemoteProtocolError, TransportError
from bridge.model import GtidSet
from bridge.node import admin, realtime
from bridge.node.applying import ApplyLoop
from bridge.node.counters import ReplicaCounts
from bridge.node.fencing import WriterSeat
from bridge.node.halt import Halt
from bridge.node.listener import Listener
from bridge.node.progress import Progress
from bridge.node.scope import Picked, Scope
from bridge.node.session import HostsRing, Session
from bridge.ops.metrics import STAGES, GcPauses, MetricsServer, Stages
from bridge.ops.statusdoc import ReplicaStatus
from bridge.ring.consumer import RingConsumer
from bridge.transport import make_host, native_parts, receiver, tls
from bridge.transport.sockets import ControlConnection
from bridge.wire import control, native

log = logging.getLogger(__name__)


HALTED_WAIT_S = 0.5  # how often a stopped apply loop looks at its stop flag
NO_SESSION_WAIT_S = 1.0  # a safety bound: a new session and a stop wake the apply loop at once


def check_listen(cfg: ReplicaConfig) -> None:
    """Beyond loopback, the control channel needs a secret and TLS (or the user's word)."""
    if not cfg.secret and not is_loopback(cfg.listen[0]):
        raise ConfigError(f"listen on {cfg.listen[0]}:{cfg.listen[1]}: beyond loopback the control channel "
                          f"needs a shared secret (set {SECRET_ENV} or --secret-file on both sides)")
    if cfg.tls is None and not cfg.insecure_transport and not is_loopback(cfg.listen[0]):
        raise ConfigError(f"listen on {cfg.listen[0]}:{cfg.listen[1]}: beyond loopback every replicated row would "
                          "cross the network in clear text: give --tls-cert, --tls-key and --tls-ca (both sides), "
                          "or --insecure-transport on a network you trust")


class ReplicaNode(ApplyLoop, HostsRing):
    def __init__(self, cfg: ReplicaConfig) -> None:
        check_listen(cfg)
        self.cfg = cfg
        # first: a busy port is refused before anything else is touched
        self._listener = Listener(cfg.listen, cfg.secret, tls.prepare(cfg.tls, server_side=True))
        try:
            self.applier: ApplierLike = Applier(cfg.target, cfg.channel) if cfg.workers <= 1 else \
                ParallelApplier(cfg.target, cfg.channel, cfg.workers)
        except BridgeError:
            self._listener.close()
            raise
        if cfg.apply_mode != "auto":  # refuse at start what every session would refuse
            try:
                self.applier.preflight(cfg.apply_mode)
            except BridgeError:
                self.applier.close()
                self._listener.close()
                raise
        else:
            try:  # auto: binlog mode for a primary of this flavor, the usual case
                self.applier.preflight("binlog")
            except ConfigError as exc:
                log.warning("a %s primary will be refused until this is fixed: %s", self.applier.server.flavor.kind,
                            exc)
        try:  # what the channel replicates (bridge.filter): recorded on the replica, or given and recorded now
            self.scope = Scope.load(self.applier, cfg.channel, cfg.target, cfg.channel_filter)
            self.applier.rules = self.scope.rules
            self.accounts_replayed = self.applier.use_account_statements(cfg.account_statements)
        except BridgeError:
            self.applier.close()
            self._listener.close()
            raise
        self.host = make_host(cfg.transport, cfg.ring_bytes, cfg.rdma, cfg.listen[0])
        self.current: Session | None = None  # the primary side's session (bridge.node.session)
        self.counts = ReplicaCounts()
        self._pending: list[Picked] = []  # work whose apply lost the replica connection: retried first
        self._stash = None  # a decoded frame that could not join the last group
        self._progress = Progress()
        self._reported_groups = 0
        self.last_lag_s: float | None = None  # the last heartbeat's, when it was applied
        self._heartbeat_written_us: float | None = None  # when the last heartbeat applied was written on the primary
        self.stages = Stages(STAGES["replica"])
        self.gc_pauses = GcPauses(self.stages)
        self.metrics = MetricsServer(cfg.metrics, "replica", self.status) if cfg.metrics else None
        self._lock = threading.Lock()
        self._session_waiting = threading.Event()
        self._stop = threading.Event()
        self._woken = threading.Event()  # a session opened or a stop: the apply loop without a session looks
        self.address = self._listener.address
        self.writers = WriterSeat(cfg.channel)  # which primary side may feed the ring (bridge.node.fencing)
        self.halt: Halt | None = None  # applying stopped on this error (bridge.node.halt)
        self._unhalted = threading.Event()  # set by resume and skip
        self._until = GtidSet.parse(cfg.until_gtid) if cfg.until_gtid else None  # --until-gtid, until reached
        self._not_before = 0.0  # --delay: the next transaction is due then (wall clock, s)
        self.last_gtid_applied = ""
        # the common case in one call per group (bridge.apply.lane): one connection, applied as it comes
        self._lane = lane.LaneRunner(self.applier) if cfg.workers <= 1 and not cfg.delay_s else None

    # --- lifecycle -------------------------------------------------------

    def start(self) -> None:
        self.applier.record_stop(None)  # a stop recorded by an earlier run: this one applies again first
        if self.metrics is not None:
            self.metrics.start()
        self._listener.start(self)
        native.announce(log, ("hot path", *((lane.PART,) if self._lane is not None else ()),
                              *((receiver.PART,) if self.cfg.transport == "tcp" else ()),
                              *native_parts(self.cfg.transport)))
        if self.cfg.tls is None and not is_loopback(self.address[0]):
            log.warning("--insecure-transport: the control and data connections on %s:%d carry every replicated row "
                        "in clear text", *self.address)
        log.info("account management statements (CREATE USER, GRANT, ...) are %s (--account-statements %s)",
                 "replayed, as a native replica does" if self.accounts_replayed else
                 "left out: the apply user may not manage accounts here (grant it CREATE USER ... WITH GRANT OPTION "
                 "to replay them) or they were asked to be left out", self.cfg.account_statements)
        if self.cfg.delay_s:
            log.info("--delay: each transaction is applied %.0fs after the primary side read it; lag is measured "
                     "against that (lag_beyond_delay_seconds)", self.cfg.delay_s)
        log.info("replica listening on %s:%d%s, transport %s, ring %d bytes, channel %r at seq %d (%s), "
                 "replicating %s", *self.address, " (TLS, peers verified)" if self.cfg.tls else "",
                 self.cfg.transport, self.cfg.ring_bytes, self.cfg.channel, self.applier.position.applied_seq,
                 self.applier.position.gtid_set or "no gtid yet", self.scope.describe())

    def run(self) -> None:
        """Apply loop until ``stop``: finishes the transaction in flight."""
        idle_since = None
        while not self._stop.is_set():
            self._report_progress()
            if self.halt is not None:  # stopped, not dead: wait for resume, skip or SIGTERM
                self._unhalted.wait(HALTED_WAIT_S)
                self._unhalted.clear()
                continue
            if self.step():
                idle_since = None
                continue
            if self._not_before:  # --delay: the next transaction is not due yet
                wait, self._not_before = self._not_before - time.time(), 0.0
                self._stop.wait(min(max(wait, 0.0), HALTED_WAIT_S))
                continue
            now = time.monotonic()
            idle_since = idle_since or now
            if now - idle_since < self.cfg.spin_s:
                time.sleep(0)  # --spin-us: on Linux a zero sleep lasts the timer slack, ~50-70 µs
                continue
            try:
                self._idle_wait()
            except OSError:
                if not self._stop.is_set():
                    raise  # else close() took the doorbell away while this thread waited on it

    def _idle_wait(self) -> None:
        """Sleep until the primary side wakes this side (the ring's doorbell; rdma: a write
        with immediate data), or poll where the host cannot be woken (pyverbs' queue pair).
        Without a session, until one opens or the node stops."""
        session = self.current
        if session is None:
            self._woken.clear()
            if self.current is None and not self._stop.is_set():
                self._woken.wait(NO_SESSION_WAIT_S)
            return
        consumer = session.consumer
        try:
            if self.host.sleep(lambda: consumer.published or bool(self._pending or self._stash) or
                               self._stop.is_set()):
                return
        except TransportError as exc:  # rdma: the session's queue pair failed
            with self._lock:
                if self.current is session:
                    self._end_session(str(exc), EndCode.ERROR)
            return
        time.sleep(self.cfg.poll_idle_s)

    def _report_progress(self) -> None:
        self.stages.tick()  # the last minute's latency windows
        report = self._progress.due(self.counts.transactions_applied)
        if report and report[0]:
            applied, elapsed = report
            pos = self.applier.position
            log.info("applied %d transactions in the last %.0fs (%.0f txn/s) in %d groups, at seq %d (%s)%s",
                     applied, elapsed, applied / elapsed, self.counts.groups_applied - self._reported_groups,
                     pos.applied_seq, pos.gtid_set, self._parallel_summary())
        if report:
            self._reported_groups = self.counts.groups_applied

    def status(self) -> ReplicaStatus:
        pos = self.applier.position
        stats = self.applier.stats
        session = self.current
        consumer = session.consumer if session is not None else None
        counters = {**self.counts.status(), **self.applier.account_statements, "applied_seq": pos.applied_seq,
                    "ring_backlog_frames": consumer.backlog_frames if consumer else 0,
                    "ring_backlog_bytes": consumer.backlog_bytes if consumer else 0,
                    "apply_conflicts": stats.conflicts if stats else 0,
                    "apply_effective_parallelism": round(stats.effective_parallelism, 3) if stats else 1.0}
        if self._heartbeat_written_us is not None:  # pt-heartbeat's lag: it grows while nothing is applied
            lag_s = max(0.0, (time.time_ns() / 1000 - self._heartbeat_written_us) / 1e6)
            counters["last_lag_seconds"] = round(lag_s, 6)
            if self.cfg.delay_s:
                counters["lag_beyond_delay_seconds"] = round(max(0.0, lag_s - self.cfg.delay_s), 6)
        return {"role": "replica", "target": str(self.cfg.target), "channel": self.cfg.channel,
                "listen": f"{self.address[0]}:{self.address[1]}", "transport": self.cfg.transport,
                "workers": self.cfg.workers, "apply_mode": session.apply_mode if session else self.cfg.apply_mode,
                "replicates": self.scope.describe(),
                "session": session is not None, "gtid_set": str(pos.gtid_set),
                "apply_stopped": self.halt.status() if self.halt else None, "delay_s": self.cfg.delay_s,
                "scheduling": realtime.scheduling(),
                "counters": counters, "stages": self.stages.summary(),
                **({"rdma": self.host.route} if session is not None and getattr(self.host, "route", None) else {})}

    def _parallel_summary(self) -> str:
        stats = self.applier.stats
        if stats is None:
            return ""
        return (f"; {self.cfg.workers} workers: {stats.segments} segments, {stats.conflicts} waited on a "
                f"conflict, {stats.fallbacks} serial fallbacks, effective parallelism "
                f"{stats.effective_parallelism:.2f}")

    def resume(self) -> Halt | None:
        """Apply again from the transaction applying stopped at (`rdma-bridge resume`)."""
        with self._lock:
            halt = self.halt
            if halt is not None:
                self._stop_at(None)
                log.info("resume: applying again from seq %d (%s)", halt.seq, halt.gtid)
                self._tell_primary({"type": "apply_resumed"})
        self._unhalted.set()
        return halt

    def skip(self, gtid: str, by: str) -> Halt:
        """Skip the one transaction applying stopped at (`rdma-bridge skip --gtid`):
        the position moves past it, rdma_bridge.skipped records it, applying goes on."""
        with self._lock:
            halt = self.halt
            if halt is None:
                raise ConfigError(f"skip {gtid}: applying is not stopped on replica {self.cfg.target}; nothing to "
                                  "skip")
            halt.check_skip(gtid)
            skipped = self._pending[0].item if self._pending and self._pending[0].frame.seq == halt.seq else None
            self.applier.skip(halt.seq, halt.gtid, halt.error, by, skipped)
            if skipped is not None:
                self._pending = self._pending[1:]
                if self.consumer is not None:
                    self.consumer.acknowledge(halt.seq)
            self._stop_at(None)
            log.warning("skipped seq %d (%s) by %s: it stopped applying with: %s", halt.seq, halt.gtid, by,
                        halt.error)
            self._tell_primary({"type": "apply_resumed"})
        self._unhalted.set()
        return halt

    def _stop_at(self, halt: Halt | None) -> None:
        """Applying stops there (or goes on: None), in memory and on the replica."""
        self.halt = halt
        self.applier.record_stop(halt.status() if halt else None)

    def _tell_primary(self, msg: dict) -> None:
        if self.current is not None:
            self.current.tell(msg)

    def stop(self) -> None:
        self._stop.set()
        self._woken.set()
        self.host.interrupt()  # an idle apply loop asleep on the host looks at the stop now

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            if self.current is not None:
                self.current.end()
                self.current = None
            self.host.close()
            self.applier.close()
        if self.metrics is not None:
            self.metrics.close()
        self.gc_pauses.close()

    # --- connections -----------------------------------------------------

    def serve_admin(self, conn: ControlConnection, msg: dict, proof: str) -> None:
        admin.serve(self, conn, proof)

    def serve_control(self, conn: ControlConnection, msg: dict, proof: str) -> None:
        if msg.get("transport") != self.cfg.transport:
            raise RemoteProtocolError(f"handshake: primary wants transport {msg.get('transport')!r}, "
                                 f"this replica serves {self.cfg.transport!r}")
        welcome = self._new_session(conn, msg, proof)
        conn.send(welcome)
        writer = self.writers.current
        log.info("session %s (epoch %d): primary side %s at %s resumes after seq %d", self.session, welcome["epoch"],
                 writer, conn.peer, welcome["applied_seq"])
        try:
            conn.sock.settimeout(None)
            while True:
                conn.recv()  # heartbeats (bridge.node.fencing) and future control messages
                self.writers.heard(writer.id)
        except (BridgeError, OSError) as exc:  # OSError: the session was ended (its connection closed) meanwhile
            log.info("session %s: control channel ended: %s", self.session, exc)
        finally:
            self.writers.gone(writer.id)

    def _new_session(self, conn: ControlConnection, msg: dict, proof: str) -> dict:
        if not msg.get("take_over"):
            self.writers.wait_for_leaving(msg)
        self._session_waiting.set()
        self.host.interrupt()  # an idle apply lane holds the node's lock while it sleeps: it lets go now
        try:
            return self._open_session(conn, msg, proof)
        finally:
            self._session_waiting.clear()

    def _open_session(self, conn: ControlConnection, msg: dict, proof: str) -> dict:
        with self._lock:
            mode = modes.choose(self.cfg.apply_mode, str(msg.get("flavor", "")), self.applier.server.flavor.kind)
            self.applier.preflight(mode)
            fenced = self.writers.admit(msg)
            if self.current is not None:
                self.current.end(f"fenced: the primary side {self.writers.current} took channel "
                                 f"{self.cfg.channel!r} over" if fenced else "", EndCode.FENCED)
            if fenced:
                log.warning("channel %r taken over: primary side %s fenced off by %s", self.cfg.channel, fenced,
                            self.writers.current)
            pos = self.applier.reload_position()  # the database, not memory, says where we are
            if not self.applier.has_position:
                pos = self.applier.init_position(GtidSet.parse(msg.get("start_gtid", "")),
                                                 explicit=msg.get("start_explicit") is True)
            epoch = self.applier.next_epoch()
            self.applier.set_mode(mode, msg.get("flavor") == self.applier.server.flavor.kind, _collation_names(msg))
            self.host.fence()  # fresh ring memory: no writer of an earlier session reaches it
            self._pending, self._stash = [], None
            self.current = Session(
                id=secrets.token_hex(8), epoch=epoch, control=conn, apply_mode=mode,
                consumer=RingConsumer(self.host.region, expected_seq=pos.applied_seq + 1, epoch=epoch),
                has_format=self.applier.format is not None)
            self.host.interrupt()  # a general path asleep on the last session's ring looks at this one
            self._woken.set()  # ... and one that waited for a session
            return control.welcome(auth=proof, **{
                    "ring_bytes": self.cfg.ring_bytes, "transport": self.cfg.transport,
                    "params": {**self.host.params(), "session": self.current.id},
                    "applied_seq": pos.applied_seq, "gtid_set": str(pos.gtid_set), "channel": self.cfg.channel,
                    "apply_mode": mode, "format": self.applier.format.id if self.applier.format else "",
                    "epoch": epoch, "apply_stopped": self.halt.message() if self.halt else None,
                    "delay_s": self.cfg.delay_s, "server": self.applier.server.identity})

    def _end_session(self, reason: str, code: EndCode = EndCode.BAD_FRAME) -> None:
        log.error("session %s ended: %s", self.session, reason)
        self.applier.abort_open()
        ended, self.current = self.current, None
        if ended is not None:
            ended.end(reason, code)

    @property
    def consumer(self) -> RingConsumer | None:
        return self.current.consumer if self.current is not None else None


def _collation_names(hello: dict) -> dict[int, str]:
    """The primary's names of its collation ids, as its hello lists them."""
    given = hello.get("collations")
    if not isinstance(given, dict):
        raise RemoteProtocolError("hello: no collations (a primary side of this protocol version always lists them)")
    return {int(i): str(name) for i, name in given.items() if str(i).isdigit()}
