"""The replica side in apply mode relay: the ring's transactions are served to the
replica server's own replication threads (bridge.relay), which apply them as a native
replica does. This side writes nothing to the replica server; it points the server's
channel at its relay (unless told not to) and reads what the server has executed.

Threads: the listener's (control and data connections, as in every apply mode), the
relay's (one per connected replica), the watcher (what the replica server executed, its
channel's status) and the loop (``run``): frames from the ring into the feed
(bridge.relay.feed), each acknowledged once it is there; the feed keeps each transaction
until the server has executed it, or, past about a ring's worth of bytes, until every
open dump has sent it. A dump that asks for something older than the feed keeps (the
replica server lost its relay log) ends the session: the primary side reads the binlog
again from the replica server's executed GTIDs, as at every new session. Nothing is lost
or applied twice: the replica server's own GTID state decides what it is sent.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time

from bridge.apply import modes
from bridge.config import ReplicaConfig, is_loopback
from bridge.errors import (
    BridgeError,
    ConfigError,
    CorruptFrame,
    EndCode,
    RemoteProtocolError,
    TargetConnectionLost,
    TransportError,
)
from bridge.model import Gtid, GtidSet
from bridge.node.counters import ReplicaCounts
from bridge.node.fencing import WriterSeat
from bridge.node.listener import Listener
from bridge.node.progress import Progress
from bridge.node.relayprogress import RelayProgress
from bridge.node.replica import check_listen
from bridge.node.session import HostsRing, Session
from bridge.ops.metrics import STAGES, GcPauses, MetricsServer, Stages
from bridge.ops.statusdoc import ReplicaStatus
from bridge.relay.answers import SourceFacts
from bridge.relay.channel import RelayChannel
from bridge.relay.feed import TransactionFeed
from bridge.relay.server import DumpRequest, FeedError, FeedGone, RelayServer, relay_tls_context
from bridge.relay.target import ChannelStatus, RelayTarget
from bridge.ring.consumer import RingConsumer
from bridge.transport import make_host, tls
from bridge.transport.sockets import ControlConnection
from bridge.wire import control
from bridge.wire.codec import decode_chunk, decode_transaction
from bridge.wire.frame import FrameKind

log = logging.getLogger("bridge.node.replica")

RELAY_USER = "rdma_relay"  # the user the replica server logs in to the relay as
TAKE_AT_ONCE = 256  # frames moved into the feed before the loop looks at anything else
WATCH_WAIT_S = 1.0  # the watcher's longest wait for the server to execute a transaction, and its status period
WATCH_POLL_S = 0.02  # how often the watcher reads what the server executed while transactions are outstanding
NO_SESSION_WAIT_S = 1.0
SLEEP_S = 0.5  # an idle loop's longest sleep on the ring (a new frame, a session or a stop wakes it)


class RelayNode(HostsRing):
    def __init__(self, cfg: ReplicaConfig) -> None:
        check_listen(cfg)
        given = [name for name, on in (("--workers", cfg.workers > 1), ("--delay", cfg.delay_s),
                                       ("--until-gtid", cfg.until_gtid), ("--include/--exclude", cfg.channel_filter))
                 if on]
        if given:
            raise ConfigError(f"apply mode relay: {', '.join(given)} belong to the replica server in this mode (its "
                              "replica_parallel_workers or slave_parallel_threads, SOURCE_DELAY, START REPLICA UNTIL, "
                              "replicate-* filters): set them there")
        if not cfg.relay_configure and not cfg.relay_password:
            raise ConfigError("--relay-configure no: give --relay-password-file, the password the replica server's "
                              "channel logs in to the relay with (the one in your CHANGE ... TO)")
        if not cfg.relay_configure and not cfg.relay_listen[1]:
            raise ConfigError("--relay-configure no: give --relay-listen a port (your CHANGE ... TO names it)")
        if cfg.tls is None and not cfg.insecure_transport and not is_loopback(cfg.relay_listen[0]):
            raise ConfigError(f"--relay-listen {cfg.relay_listen[0]}: beyond loopback the replica server's connection "
                              "carries every row in clear text: give --tls-cert, --tls-key and --tls-ca (the relay "
                              "offers that certificate, the channel checks it against the CA), or --insecure-transport")
        self.cfg = cfg
        self._listener = Listener(cfg.listen, cfg.secret, tls.prepare(cfg.tls, server_side=True))
        self.target: RelayTarget | None = None
        self._watching: RelayTarget | None = None
        self.relay: RelayServer | None = None
        try:
            self.target = RelayTarget(cfg.target, cfg.channel)
            self._watching = RelayTarget(cfg.target, cfg.channel)
            password = cfg.relay_password or secrets.token_urlsafe(24)  # made anew at each start, set by configure
            self.relay = RelayServer(cfg.relay_listen, None, self, RELAY_USER, password,
                                     relay_tls_context(cfg.tls.cert, cfg.tls.key) if cfg.tls else None, pushed=True)
        except BaseException:
            self._close_parts()
            raise
        host = cfg.relay_listen[0] if cfg.relay_listen[0] not in ("", "0.0.0.0", "::") else "127.0.0.1"
        self.channel = RelayChannel(self.target.flavor, cfg.channel, host, self.relay.address[1], RELAY_USER,
                                    heartbeat_s=1.0, tls_ca=cfg.tls.ca if cfg.tls else None)
        self.feed = TransactionFeed(b"", 0, GtidSet())
        self.host = make_host(cfg.transport, cfg.ring_bytes, cfg.rdma, cfg.listen[0])
        self.address = self._listener.address
        self.writers = WriterSeat(cfg.channel)
        self.current: Session | None = None
        self.counts = ReplicaCounts()
        self.stages = Stages(STAGES["replica"])
        self.gc_pauses = GcPauses(self.stages)
        self.metrics = MetricsServer(cfg.metrics, "replica", self.status) if cfg.metrics else None
        self._progress = Progress()
        self._lock = threading.Lock()
        self._tell_lock = threading.Lock()
        self._fed = threading.Event()  # a whole transaction went into the feed (the watcher looks)
        self._precise = False  # the primary side's semi-sync waits for applied: watch each transaction
        self._stop = threading.Event()
        self._woken = threading.Event()
        self._epoch = int(time.time()) & 0x3FFFFFFF  # grows from one start to the next, and with each session
        self.taken_seq = 0  # the last frame moved into the feed (the ring's seqs go on across sessions)
        self.last_gtid = ""  # the last whole transaction in the feed
        self.executed = GtidSet()  # the replica server's, as the watcher last read it
        self._forgotten = GtidSet()  # what the feed was last told to forget
        self.channel_status = ChannelStatus(False)
        self._told_stopped: dict | None = None
        self.progress = RelayProgress(self._tell_primary)  # semi-sync: what the server received and executed
        self.feed.on_received = self.progress.received_up_to
        self._watcher = threading.Thread(target=self._watch, name="relay-watcher", daemon=True)

    @property
    def _configure_text(self) -> str:
        return self.channel.printed()

    # --- lifecycle -------------------------------------------------------

    def start(self) -> None:
        if self.metrics is not None:
            self.metrics.start()
        self.relay.start()
        if self.cfg.relay_configure:  # before the listener: a session's open reads the server on the same connection
            self.target.configure(self.channel, self.relay.password)
            log.info("relay: the replica server's channel %r points at %s:%d (CHANGE ... TO and START, done here); "
                     "its own IO and SQL threads apply what this side receives", self.cfg.channel,
                     self.channel.host, self.channel.port)
        else:
            log.info("relay: --relay-configure no: point the replica server's channel at this side with\n%s",
                     self._configure_text)
        self.executed = self.target.executed()
        self._listener.start(self)
        self._watcher.start()
        log.info("replica listening on %s:%d%s, transport %s, ring %d bytes, apply mode relay: serving replica %s "
                 "on %s:%d, which has executed %s", *self.address, " (TLS, peers verified)" if self.cfg.tls else "",
                 self.cfg.transport, self.cfg.ring_bytes, self.cfg.target, *self.relay.address,
                 self.executed or "no gtid yet")

    def run(self) -> None:
        while not self._stop.is_set():
            self._report_progress()
            session = self.current
            if session is None:
                self._woken.clear()
                if self.current is None and not self._stop.is_set():
                    self._woken.wait(NO_SESSION_WAIT_S)
                continue
            if self._take(session):
                self.relay.push()  # the new transactions to the server's IO thread, from this thread
                continue
            if not self._has_room and self.relay.push():  # full: what was not sent goes; then it can be trimmed
                continue
            self._forget()
            try:
                if not self.host.sleep(lambda: session.consumer.published and self._has_room or
                                       self._stop.is_set() or self._woken.is_set(), SLEEP_S):
                    time.sleep(self.cfg.poll_idle_s)
            except TransportError as exc:
                with self._lock:
                    if self.current is session:
                        self._end_session(str(exc), EndCode.ERROR)
            except OSError:
                if not self._stop.is_set():
                    raise
            self._woken.clear()

    @property
    def _has_room(self) -> bool:
        return self.feed.bytes <= self.cfg.ring_bytes

    def _take(self, session: Session) -> bool:
        """Frames from the ring into the feed, while it has room; True when any moved."""
        moved = 0
        with self._lock:
            if self.current is not session:
                return False
            if not self._has_room:
                self.feed.trim(self.cfg.ring_bytes)
            while moved < TAKE_AT_ONCE and self._has_room:
                try:
                    frame = session.consumer.poll()
                    if frame is None:
                        break
                    if frame.kind == FrameKind.TXN:
                        item = decode_transaction(frame.payload)
                    elif frame.kind == FrameKind.CHUNK:
                        item = decode_chunk(frame.payload)
                    else:
                        raise RemoteProtocolError(f"frame seq {frame.seq}: kind {frame.kind.name} is not expected in "
                                                  "the ring")
                    self.feed.append(item)
                except (CorruptFrame, RemoteProtocolError, FeedError) as exc:
                    self.counts.corrupt_frames += isinstance(exc, CorruptFrame)
                    self._end_session(f"bad frame: {exc}")
                    return False
                session.consumer.acknowledge(frame.seq)
                self.taken_seq = frame.seq
                moved += 1
                if frame.kind == FrameKind.TXN or item.last:
                    self.last_gtid = item.gtid
                    self.counts.transactions_applied += 1
                    self._fed.set()
                    self.progress.noted(item.gtid, frame.seq)
                    if frame.kind == FrameKind.TXN and item.stamps:
                        read_ns, ship_ns = item.stamps
                        now = time.time_ns()
                        self.stages.record("deliver", (now - ship_ns) / 1000)
                        self.stages.record("bridge", (now - read_ns) / 1000)
        return moved > 0

    def _forget(self) -> None:
        executed = self.executed
        if executed is not self._forgotten:
            self._forgotten = executed
            self.feed.forget(executed)

    def _report_progress(self) -> None:
        self.stages.tick()
        report = self._progress.due(self.counts.transactions_applied)
        if report and report[0]:
            taken, elapsed = report
            st = self.channel_status
            log.info("relayed %d transactions in the last %.0fs (%.0f txn/s), last %s; replica IO %s, SQL %s, "
                     "executed %s", taken, elapsed, taken / elapsed, self.last_gtid, st.io_running, st.sql_running,
                     self.executed)

    # --- the replica server ---------------------------------------------

    def _watch(self) -> None:
        """What the replica server executed (waiting for the feed's last transaction), and its
        channel's status, for the loop, ``status`` and the primary side."""
        next_status = 0.0
        watching = self._watching  # a connection of its own: its waits block
        while not self._stop.is_set():
            try:
                last = self.last_gtid
                if not last or self.executed.contains(Gtid.parse(last)):  # nothing outstanding: until more comes
                    self._fed.wait(WATCH_WAIT_S)
                    self._fed.clear()
                elif self._precise:  # semi-sync applied: each transaction's execution as it happens
                    watching.wait_executed(last, WATCH_WAIT_S)
                elif self._stop.wait(WATCH_POLL_S):  # else a look now and then (one query) frees the feed
                    return
                if self._stop.is_set():
                    return
                executed = watching.executed()
                if executed != self.executed:
                    self.executed = executed
                    self.progress.executed(executed)
                    self._woken.set()
                    self.host.interrupt()
                if time.monotonic() >= next_status:
                    next_status = time.monotonic() + WATCH_WAIT_S
                    self._channel_changed(watching.status())
            except BridgeError as exc:
                log.warning("relay: reading the replica server %s: %s", self.cfg.target, exc)
                self._stop.wait(WATCH_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - pymysql's errors: the next look tries again
                log.warning("relay: reading the replica server %s: %s", self.cfg.target, exc)
                self._stop.wait(WATCH_WAIT_S)

    def _channel_changed(self, st: ChannelStatus) -> None:
        """The channel's status as last read; the primary side is told when the server
        stopped applying on an error (it then waits for as long as it takes, as for a
        replica side stopped on an error) and when it applies again."""
        was, self.channel_status = self.channel_status, st
        if st.stopped:
            code, why = st.cause
            stopped = {"type": "apply_stopped", "seq": self.taken_seq, "gtid": self.last_gtid,
                       "code": code, "error": f"the replica server's channel stopped: {why}",
                       "until": False}
            if self._told_stopped is None or self._told_stopped["error"] != stopped["error"]:
                (log.error if code else log.warning)(
                    "relay: the replica server's channel %r %s; %s", self.cfg.channel, stopped["error"][30:],
                    "fix the cause there and START REPLICA (MariaDB: START SLAVE), as on any replica" if code else
                    "the primary side waits until it runs again")
                self._told_stopped = stopped
                self._tell_primary(stopped)
        elif self._told_stopped is not None:
            self._told_stopped = None
            log.info("relay: the replica server's channel %r applies again", self.cfg.channel)
            self._tell_primary({"type": "apply_resumed"})
        if was.exists and not st.exists:
            log.warning("relay: the replica server has no channel %r any more (RESET REPLICA ALL?)", self.cfg.channel)

    def _tell_primary(self, msg: dict) -> None:
        """One message to the primary side (from the watcher, the relay's sessions, the
        loop: one at a time on its control connection)."""
        session = self.current
        if session is not None:
            with self._tell_lock:
                session.tell(msg)

    # --- the feed the relay serves ----------------------------------------

    def open(self, request: DumpRequest):
        """A dump of the replica server (the relay's ``Feed``): from the feed, or, where it
        asks for what the feed no longer keeps, from the binlog again (the session ends,
        the primary side comes back reading from the server's executed GTIDs; the
        replica reconnects meanwhile, as after a lost connection)."""
        try:
            return self.feed.open(request)
        except FeedError as exc:
            with self._lock:
                if self.current is not None:
                    log.info("relay: %s: the primary side reads the binlog again from the replica server's "
                             "executed GTIDs", exc)
                    self._end_session(f"the replica server asks for transactions before the relay's: {exc}",
                                      EndCode.ERROR)
            raise FeedGone(str(exc)) from exc

    # --- connections -----------------------------------------------------

    def serve_admin(self, conn: ControlConnection, msg: dict, proof: str) -> None:
        conn.send(control.welcome(auth=proof))
        command = conn.recv()
        conn.send(control.error(f"{command.get('type')}: apply mode relay: the replica server applies; use its own "
                                "START REPLICA / SET GLOBAL gtid_slave_pos / sql_slave_skip_counter there",
                                EndCode.ERROR))
        conn.close()

    def serve_control(self, conn: ControlConnection, msg: dict, proof: str) -> None:
        if msg.get("transport") != self.cfg.transport:
            raise RemoteProtocolError(f"handshake: primary wants transport {msg.get('transport')!r}, "
                                      f"this replica serves {self.cfg.transport!r}")
        if not msg.get("take_over"):
            self.writers.wait_for_leaving(msg)
        self.host.interrupt()
        welcome = self._open_session(conn, msg, proof)
        conn.send(welcome)
        writer = self.writers.current
        log.info("session %s (epoch %d): primary side %s at %s; the relay serves from %s", self.current.id,
                 welcome["epoch"], writer, conn.peer, welcome["gtid_set"] or "the start of the binlog")
        try:
            conn.sock.settimeout(None)
            while True:
                msg = conn.recv()
                self.writers.heard(writer.id)
                if msg.get("type") == "source_refused":  # the primary purged what the replica server lacks
                    self.relay.refuse(int(msg.get("code") or 1236), str(msg.get("text", "")))
                    log.error("relay: the primary refuses the replica server's position with error %d: %s; its IO "
                              "thread is told so (Last_IO_Error)", *self.relay.refusal)
                    break  # the primary side's last word: its end waits for this one to close (Link.say_last)
        except (BridgeError, OSError) as exc:
            log.info("session: control channel ended: %s", exc)
        finally:
            self.writers.gone(writer.id)
            conn.close()

    def _open_session(self, conn: ControlConnection, msg: dict, proof: str) -> dict:
        with self._lock:
            modes.choose("relay", str(msg.get("flavor", "")), self.target.flavor.kind)
            if not isinstance(msg.get("source"), dict):
                raise RemoteProtocolError("hello: the primary side did not say its server's facts (apply mode relay "
                                          "needs a primary side of this release)")
            facts = SourceFacts.from_json(msg["source"])
            fenced = self.writers.admit(msg)
            if self.current is not None:
                self.current.end(f"fenced: the primary side {self.writers.current} took channel "
                                 f"{self.cfg.channel!r} over" if fenced else "", EndCode.FENCED)
            try:
                executed = self.target.executed()  # the server, not memory, says where to resume
            except TargetConnectionLost as exc:  # down (restarting, say): what it had executed it still has
                executed = self.executed
                log.warning("%s; the session resumes from what it had executed when last read (%s)", exc,
                            executed or "nothing")
            self.executed = executed
            start = GtidSet.parse(str(msg.get("start_gtid") or ""))
            if msg.get("start_explicit") and start and not executed.contains_all(start):
                log.warning("apply mode relay: the replica server's own GTIDs (%s) say where it resumes, not the "
                            "primary side's --start-gtid %s: set them there (MySQL: SET GLOBAL gtid_purged; MariaDB: "
                            "SET GLOBAL gtid_slave_pos), as for a native replica", executed or "empty", start)
            self.feed.server_id, self.feed.mid_file = facts.server_id, facts.flavor.dump_starts_mid_file
            self.feed.restart(executed)
            self.progress.restart(self.taken_seq)
            self.relay.facts, self.relay.refusal = facts, None
            self._precise = msg.get("semi_sync") == "applied"
            self._epoch += 1
            self.host.fence()
            self.current = Session(
                id=secrets.token_hex(8), epoch=self._epoch, control=conn, apply_mode="relay",
                consumer=RingConsumer(self.host.region, expected_seq=self.taken_seq + 1, epoch=self._epoch),
                has_format=False)
            self.host.interrupt()
            self._woken.set()
            return control.welcome(auth=proof, **{
                "ring_bytes": self.cfg.ring_bytes, "transport": self.cfg.transport,
                "params": {**self.host.params(), "session": self.current.id},
                "applied_seq": self.taken_seq, "gtid_set": str(executed), "channel": self.cfg.channel,
                "apply_mode": "relay", "format": "", "epoch": self._epoch,
                "apply_stopped": self._told_stopped, "delay_s": 0.0, "server": self.target.identity})

    def _end_session(self, reason: str, code: EndCode = EndCode.BAD_FRAME) -> None:
        log.error("session %s ended: %s", self.session, reason)
        ended, self.current = self.current, None
        if ended is not None:
            ended.end(reason, code)

    # --- status and the end -----------------------------------------------

    def status(self) -> ReplicaStatus:
        session = self.current
        consumer = session.consumer if session is not None else None
        counters = {**self.counts.status(), "account_statements_replayed": 0, "account_statements_left_out": 0,
                    "applied_seq": self.taken_seq,
                    "ring_backlog_frames": consumer.backlog_frames if consumer else 0,
                    "ring_backlog_bytes": consumer.backlog_bytes if consumer else 0,
                    "apply_conflicts": 0, "apply_effective_parallelism": 1.0}
        st = self.channel_status
        if st.seconds_behind is not None:
            counters["last_lag_seconds"] = float(st.seconds_behind)
        stopped = self._told_stopped
        return {"role": "replica", "target": str(self.cfg.target), "channel": self.cfg.channel,
                "listen": f"{self.address[0]}:{self.address[1]}", "transport": self.cfg.transport,
                "workers": 1, "apply_mode": "relay", "replicates": "every table (the replica server's filters apply)",
                "session": session is not None, "gtid_set": str(self.executed),
                "apply_stopped": {"seq": stopped["seq"], "gtid": stopped["gtid"], "error": stopped["error"],
                                  "code": stopped["code"], "until": False, "since": "", "stopped_for_s": 0.0}
                if stopped else None,
                "delay_s": 0.0, "scheduling": "normal", "counters": counters, "stages": self.stages.summary(),
                "relay": {"listen": f"{self.relay.address[0]}:{self.relay.address[1]}",
                          "configured": self.cfg.relay_configure, "dumps_served": self.relay.served,
                          "feed_transactions": self.feed.kept, "feed_bytes": self.feed.bytes,
                          "channel": st.to_json() if st.exists else None},
                **({"rdma": self.host.route} if session is not None and getattr(self.host, "route", None) else {})}

    def stop(self) -> None:
        self._stop.set()
        self._woken.set()
        self._fed.set()
        self.host.interrupt()

    def close(self) -> None:
        self._stop.set()
        self._fed.set()
        self._listener.close()
        self.feed.close()
        if self._watcher.is_alive():
            self._watcher.join(WATCH_WAIT_S + 1)  # its connection closes below
        with self._lock:
            if self.current is not None:
                self.current.end()
                self.current = None
            self.host.close()
        self._close_parts()
        if self.metrics is not None:
            self.metrics.close()
        self.gc_pauses.close()

    def _close_parts(self) -> None:
        if self.relay is not None:
            self.relay.close()
        for target in (self.target, self._watching):
            if target is not None:
                target.close()
        self._listener.close()
