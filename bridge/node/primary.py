"""Primary node: binlog → assembler → frames → the replica's ring.

``connect`` does the handshake (learns the replica's applied seq and GTID set),
the preflight of the primary and opens the transport and the binlog stream at
that GTID set; ``step`` moves one binlog event; ``run`` loops until ``stop``.
Recovery, in ``run``, with bounded backoff: a lost link (control channel closed,
transport error) keeps the binlog stream and, in a new session, resends the
frames past the replica's applied seq from the local ring; when the ring no
longer holds them all (or the binlog stream itself was lost), everything is
reopened and the binlog is re-read from the replica's recorded GTID set. Either
way the replica's position decides, so nothing is lost or doubled.
When the ring is full it waits for the replica's ack up to the backpressure
timeout, then fails with the backlog named; the binlog is the durable buffer,
so a restart resumes from the replica's position and nothing is lost.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import threading
import time

from bridge import serverinfo
from bridge.config import PrimaryConfig, backoff_s
from bridge.metrics import STAGES, GcPauses, MetricsServer, Stages
from bridge.errors import BackpressureTimeout, BridgeError, EndCode, RingFull, SourceConnectionLost, TransportError
from bridge.model import Chunk, GtidSet, Transaction
from bridge.source.behind import BehindMonitor, Reading
from bridge.source.heartbeat import HeartbeatWriter
from bridge.source.semisync import SemiSyncMonitor, check_enabled
from bridge.node.acking import SemiSyncAcks
from bridge.node.counters import PrimaryCounts
from bridge.node.link import Link
from bridge.node.progress import Progress
from bridge.node.shipping import ShipLoop, event_of
from bridge.ring.producer import RingProducer
from bridge.source import preflight
from bridge.source.assembler import TransactionAssembler
from bridge.source.events import GtidStart
from bridge.source import lanes
from bridge.source.reader import BinlogReader
from bridge.statusdoc import PrimaryStatus
from bridge.transport import check_available, open_remote, tls
from bridge.transport.sockets import ControlConnection, connect
from bridge.wire import binlog, control, native
from bridge.wire.codec import encode_chunk, encode_transaction
from bridge.wire.frame import FrameKind

log = logging.getLogger(__name__)
ACK_POLL_S = 0.0005
ACK_REFRESH_S = 0.05  # how often the ring backlog (status, metrics) learns the replica's ack
BACKPRESSURE_LOG_S = 5.0
APPLY_STOPPED_LOG_S = 30.0  # while the replica side's applying is stopped, a reminder this often


class PrimaryNode(ShipLoop):
    """Who touches what. The node's own thread (``run``) is the only writer of ``link``,
    ``reader``, ``producer``, ``assembler`` and the session state, and replaces each whole
    (never mutated in place from elsewhere). ``apply_stopped`` is written only by the
    link's watcher thread (``Link._watch`` through ``_apply_state``), as one reference
    assignment. The metrics thread (``status``), the behind monitor (``_reading``) and the
    semi-sync monitor (``_degradation_reason``) only read, each taking a local reference
    first (``producer = self.producer``), so a concurrent replacement shows them either the
    old object or the new one, never a mix."""

    def __init__(self, cfg: PrimaryConfig) -> None:
        check_available(cfg.transport)
        self.cfg = cfg
        self.tls = tls.prepare(cfg.tls, server_side=False)  # None: plain TCP to the replica side
        self.counts = PrimaryCounts()
        self.last_gtid = ""
        self._stop = threading.Event()
        self.link: Link | None = None  # the session with the replica side (the last one, once down)
        self.reader: BinlogReader | None = None
        self.producer: RingProducer | None = None
        self.assembler = TransactionAssembler()
        self._unplaced: tuple[FrameKind, bytes, str] | None = None  # read, but not in the ring when the link fell
        # who this primary side is, for the replica side's one-writer check (bridge.node.fencing)
        self.writer = {"id": secrets.token_hex(8), "host": socket.gethostname(), "pid": os.getpid(),
                       "source": str(cfg.source), "server_id": cfg.server_id,
                       "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        self._progress = Progress()
        self.stages = Stages(STAGES["primary"])
        self.gc_pauses = GcPauses(self.stages)
        self.metrics = MetricsServer(cfg.metrics, "primary", self.status) if cfg.metrics else None
        self.heartbeat = HeartbeatWriter(cfg.source, cfg.heartbeat_row_s, self.report_as) \
            if cfg.heartbeat_row_s > 0 else None
        self._services_started = False
        self._ack_refresh_at = 0.0
        self._waiting_for_space = False
        self.apply_stopped: dict | None = None  # the replica side stopped applying (bridge.node.halt): wait
        self.replica_delay_s = 0.0  # start-replica --delay: a full ring is expected, not a slow replica
        self._bad_frame_at: int | None = None  # applied seq when the replica last refused a frame
        self.semi_sync = SemiSyncMonitor(cfg.source, self._degradation_reason) if cfg.semi_sync != "off" else None
        self.acks = SemiSyncAcks(cfg.semi_sync, self.counts, self._stop)  # asked for, not yet covered
        self.behind = BehindMonitor(cfg.source, self._reading, cfg.behind_poll_s)
        self.apply_mode = ""  # the replica's choice for this session: binlog (raw row events) or sql
        self._format_sent: binlog.FormatDescription | None = None  # the last one that went into the ring
        self._collation_names: dict[str, str] = {}  # the primary's collations by id, for the replica side's messages

    @property
    def remote(self):
        """The replica's ring while the link is open; None otherwise."""
        link = self.link
        return link.remote if link is not None else None

    @property
    def report_as(self) -> str:
        """How this bridge names itself to the primary (SHOW SLAVE HOSTS): by the replica it feeds."""
        return f"rdma-bridge {self.cfg.replica[0]}:{self.cfg.replica[1]}"

    def start_services(self) -> None:
        """The metrics endpoint and the semi-sync monitor (both optional, both only read); once."""
        if self._services_started:
            return
        self._services_started = True
        native.announce(log)
        lanes.announce(log)
        for service in (self.metrics, self.semi_sync, self.behind):
            if service is not None:
                service.start()

    def _reading(self) -> Reading | None:
        """Where this side is, for the behind monitor (its thread): None without a session."""
        reader, producer = self.reader, self.producer
        if reader is None or producer is None:
            return None
        return Reading(self.last_gtid, reader.log_file, reader.commit_pos, producer.backlog_frames, producer.used,
                       producer.write_seq - producer.backlog_frames)

    def _start_writing(self) -> None:
        """The heartbeat writer, the only thing this side writes to the primary: once the
        preflight and the replica side have accepted this primary side, so a refused
        start changes nothing anywhere."""
        if self.heartbeat is not None and not self.heartbeat.started:
            self.heartbeat.start()

    def _degradation_reason(self) -> str:
        """Why semi-sync went async, as this bridge sees it at the moment of the switch."""
        if self._stop.is_set():
            return "bridge stopped"
        link = self.link
        if link is None or link.remote is None or link.down:
            return "link down"
        if self._waiting_for_space:
            return "backpressure"
        return "ack timeout"

    def status(self) -> PrimaryStatus:
        producer = self.producer
        return {"role": "primary", "source": str(self.cfg.source),
                "replica": f"{self.cfg.replica[0]}:{self.cfg.replica[1]}", "transport": self.cfg.transport,
                "apply_mode": self.apply_mode,
                "connected": self.remote is not None, "last_gtid": self.last_gtid,
                "apply_stopped": self.apply_stopped, "replica_delay_s": self.replica_delay_s,
                "behind": self.behind.status(),
                "counters": {**self.counts.status(),
                             "ring_backlog_frames": producer.backlog_frames if producer else 0,
                             "ring_backlog_bytes": producer.used if producer else 0},
                "heartbeat": self.heartbeat.status() if self.heartbeat else None,
                "semi_sync": {"mode": self.cfg.semi_sync, "acks_sent": self.counts.acks_sent,
                              "acks_skipped": self.counts.acks_skipped, **self.semi_sync.status()}
                if self.semi_sync else {"mode": "off"},
                "stages": self.stages.summary()}

    def connect(self) -> None:
        settings = self._preflight()
        welcome = self._handshake(settings["version"])
        resume = GtidSet.parse(welcome["gtid_set"])
        # the primary's position read again: the replica may have applied more since the preflight
        now = self._preflight(check=False)
        preflight.check_position({**settings, **now}, resume, self.cfg.source)
        preflight.check_not_purged(GtidSet.parse(now["binlog_start"]), resume, self.cfg.source)
        self.assembler = TransactionAssembler(chunk_bytes=min(self.cfg.chunk_bytes, welcome["ring_bytes"] // 4))
        self.producer = RingProducer(welcome["ring_bytes"], next_seq=welcome["applied_seq"] + 1,
                                     epoch=welcome["epoch"])
        self.link.remote = open_remote(self.cfg.transport, welcome["params"], self.cfg.replica,
                                       welcome["ring_bytes"], self.cfg.secret, self.tls)
        self.apply_mode, self._format_sent = welcome["apply_mode"], None
        self.acks.floor = welcome["applied_seq"]
        self.reader = BinlogReader(self.cfg.source, self.cfg.server_id, str(resume), self.cfg.heartbeat_s,
                                   mariadb=binlog.flavor_of(settings["version"]) == "mariadb", report_as=self.report_as,
                                   semi_sync=self.cfg.semi_sync != "off", raw_rows=self.apply_mode == "binlog")
        self.counts.binlog_reopens += 1
        log.info("streaming %s from %s after seq %d to replica %s:%d over %s, apply mode %s", self.cfg.source,
                 resume or "the start of the binlog", welcome["applied_seq"], *self.cfg.replica, self.cfg.transport,
                 self.apply_mode)
        self._start_writing()

    def _preflight(self, check: bool = True) -> dict:
        """The primary's settings, refused with the fix where unsafe (before this side
        writes anything anywhere); ``check=False``: only read them."""
        conn = preflight.connect(self.cfg.source, "primary")
        try:
            settings = preflight.read_settings(conn)
            settings["binlog_start"] = preflight.binlog_start(conn)
            if not check:
                return settings
            with conn.cursor() as cur:  # the replica side names an id its server lacks by the primary's name
                self._collation_names = {str(i): name for i, (name, _) in serverinfo.read_collations(cur).items()}
            preflight.check_primary(settings, self.cfg.server_id, self.cfg.source)
            preflight.check_server_id_free(conn, self.cfg.server_id, self.cfg.source, self.report_as)
            if self.cfg.semi_sync != "off":
                self.acks.timeout_s = check_enabled(conn, self.cfg.source) / 1000
        finally:
            conn.close()
        return settings

    def _handshake(self, version: str) -> dict:
        conn = ControlConnection(connect(self.cfg.replica, self.cfg.connect_timeout_s, self.tls))
        try:
            welcome = self._hello(conn, version)
        except BaseException:
            conn.close()
            raise
        self._server_version = version
        self._apply_state(welcome.get("apply_stopped"))
        self.replica_delay_s = float(welcome.get("delay_s") or 0.0)
        self.link = Link(conn, f"{self.cfg.replica[0]}:{self.cfg.replica[1]}", self._apply_state)
        return welcome

    def _hello(self, conn: ControlConnection, version: str) -> dict:
        return control.check_hello(control.client_handshake(
            conn, self.cfg.secret, "control", transport=self.cfg.transport,
            start_gtid=self.cfg.start_gtid or "",
            start_explicit=self.cfg.start_gtid is not None,  # else a new channel must not replay into existing data
            doorbell=True,  # this side rings the ring's doorbell (older ones did not: the replica polls)
            flavor=binlog.flavor_of(version), server_version=version,  # the replica picks the apply mode
            writer=self.writer, take_over=self.cfg.take_over,  # one writer per ring (bridge.node.fencing)
            collations=self._collation_names),
            expect_type="welcome")

    def _apply_state(self, stopped: dict | None) -> None:
        """The replica side stopped applying (it says where and why) or goes on again."""
        if stopped and not self.apply_stopped:
            log.warning("the replica side stopped applying at seq %s (%s): %s; waiting (the ring fills, then this "
                        "side waits as long as it takes) for `rdma-bridge resume` or `skip` there",
                        stopped.get("seq"), stopped.get("gtid"), stopped.get("error"))
        elif self.apply_stopped and not stopped:
            log.info("the replica side applies again")
        self.apply_stopped = stopped or None

    def resume_link(self) -> None:
        """A new session on a kept binlog stream: resend what the replica lacks from
        the ring, or fall back to re-reading the binlog."""
        bad_frame = self.link is not None and self.link.code == EndCode.BAD_FRAME
        welcome = self._handshake(self._server_version)
        applied = welcome["applied_seq"]
        frames = self.producer.unacked(applied) if welcome["ring_bytes"] == self.producer.size else None
        repeated = bad_frame and self._bad_frame_at == applied  # the ring's own copy was refused again
        self._bad_frame_at = applied if bad_frame else None
        # the ring's frames name their FORMAT_DESCRIPTION only where it changed: a replica
        # that lost the one in force, or changed its apply mode, needs the binlog again
        stale = welcome["format"] != (self._format_sent.id if self._format_sent else "") or \
            welcome["apply_mode"] != self.apply_mode
        if frames is None or repeated or stale:
            log.info("%s after seq %d: re-reading the binlog", "the replica refused the resent frame again"
                     if repeated else "the replica's apply mode or binlog format differs" if stale else
                     "the ring no longer holds every frame", applied)
            self.disconnect()
            self.connect()
            return
        unplaced, self._unplaced = self._unplaced, None
        try:  # all or nothing: a resend cut short must not leave a gap in the seqs
            self.producer = RingProducer(welcome["ring_bytes"], next_seq=applied + 1, epoch=welcome["epoch"])
            self.link.remote = open_remote(self.cfg.transport, welcome["params"], self.cfg.replica,
                                           welcome["ring_bytes"], self.cfg.secret, self.tls)
            for frame in frames:
                self._place(frame.kind, frame.payload, f"resend of seq {frame.seq}")
            if unplaced is not None:
                self._place(*unplaced)
        except TransportError:
            self.disconnect()  # the next attempt re-reads the binlog from the replica's position
            raise
        self.acks.floor = applied
        self.counts.frames_resent += len(frames)
        log.info("link to replica resumed after seq %d: %d frames resent from the ring", applied, len(frames))
        if self.semi_sync is not None and not self.assembler.in_transaction:
            self.acks.note(self.reader, self.link, self.producer.write_seq)  # asked with the frame the link lost

    def run(self) -> None:
        """Stream until ``stop``, recovering from lost links and binlog streams."""
        self.start_services()
        attempt = 0
        while not self._stop.is_set():
            try:
                self._check_fenced()  # the replica side said so while this side was retrying
                if self.reader is None:
                    self.connect()
                elif self.remote is None:
                    self.resume_link()
                attempt = 0
                while not self._stop.is_set():
                    self.step()
            except (TransportError, SourceConnectionLost) as exc:
                if isinstance(exc, TransportError) and self.reader is not None:
                    self._drop_link()  # keep the binlog stream: resume_link resends from the ring
                else:
                    self.disconnect()
                attempt += 1
                if attempt > self.cfg.reconnect_attempts:
                    raise
                self._backoff(attempt, exc)

    def _check_fenced(self) -> None:
        """Another primary side took the channel (the replica side said so, code fenced):
        stop writing, whatever else failed meanwhile. Over rdma the old queue pair is
        closed at once, so a placement may fail before the message is read."""
        if self.link is not None and self.link.fenced:
            self.link.raise_if_down()  # fenced: the link went down with that code

    def _backoff(self, attempt: int, exc: BridgeError) -> None:
        delay = backoff_s(attempt, self.cfg.reconnect_backoff_s, self.cfg.reconnect_backoff_max_s)
        what = "session lost" if self.counts.binlog_reopens else "cannot start"  # no session yet: nothing was lost
        log.warning("%s (%s); attempt %d/%d in %.1fs", what, exc, attempt, self.cfg.reconnect_attempts, delay)
        self.counts.reconnects += 1
        self._stop.wait(delay)

    def _report_progress(self) -> None:
        report = self._progress.due(self.counts.transactions_shipped)
        if report and report[0]:
            shipped, elapsed = report
            log.info("shipped %d transactions in the last %.0fs (%.0f txn/s), last %s, ring backlog %d frames",
                     shipped, elapsed, shipped / elapsed, self.last_gtid,
                     self.producer.backlog_frames if self.producer else 0)

    def step(self) -> Transaction | Chunk | None:
        """Read the binlog (one event, or a whole transaction: ``_read``); ship the
        transaction it completes, if any."""
        self._report_progress()
        now = time.monotonic()
        if now >= self._ack_refresh_at and self.remote is not None:
            self._ack_refresh_at = now + ACK_REFRESH_S
            self.producer.acknowledge(self.remote.last_ack())
        link = self.link
        link.raise_if_down()
        link.say_alive()
        reader = self.reader  # close() from another thread may drop it mid-step
        if self.acks:
            self.acks.wait(reader, link)
        if self._runs(reader):
            if self._ship_lane(reader):
                return None
            run = reader.take_run(self._place_run)
            if run is not None:
                self._ship_run(run, reader)
                self._note_ack(reader, link)
                return None
        item = self._read(reader)
        if item is not None and (isinstance(item, Transaction) or item.index == 0) and \
                event_of(reader.format) != event_of(self._format_sent):
            item = dataclasses.replace(item, format_event=event_of(reader.format))
            self._format_sent = reader.format
        confirm = self.acks.confirm and item is not None and reader.ack_wanted  # ask the replica at once
        if isinstance(item, Chunk):
            self._place(FrameKind.CHUNK, encode_chunk(item), item.gtid, confirm)
            self.counts.transactions_shipped += item.last
        elif item is not None:
            read_ns = time.time_ns()  # the commit event was just read
            self._place(FrameKind.TXN, encode_transaction(item, (read_ns, time.time_ns())), item.gtid, confirm)
            self.stages.record("place", (time.time_ns() - read_ns) / 1000)
            if item.is_heartbeat:
                self.counts.heartbeats_shipped += 1
            else:
                self.counts.transactions_shipped += 1
        self._note_ack(reader, link)
        return item

    def _note_ack(self, reader: BinlogReader, link: Link) -> None:
        if self.semi_sync is not None and not self.assembler.in_transaction:
            self.acks.note(reader, link, self.producer.write_seq)

    def _read(self, reader: BinlogReader) -> Transaction | Chunk | None:
        """What the binlog completes next, if anything: a common transaction whole in
        one call where its packets are all buffered, else event by event."""
        chunk_bytes, idle = self.assembler.chunk_bytes, not self.assembler.in_transaction
        whole = reader.next_transaction(chunk_bytes) if idle else None
        if whole is None:
            event = reader.next_event()
            if idle and type(event) is GtidStart and not event.standalone:
                whole = reader.rest_of_transaction(event.gtid, chunk_bytes)  # its GTID came alone
            if whole is None:
                return self.assembler.feed(event) if event is not None else None
        self.counts.taken_whole += 1
        return whole

    def _place(self, kind: FrameKind, payload: bytes, gtid: str, confirm: bool = False) -> None:
        """Append to the ring and write to the replica's; ``confirm``: an ACK waits on it."""
        try:
            placements = self._append(kind, payload, gtid)
        except TransportError:
            self._unplaced = (kind, payload, gtid)
            raise
        if placements is None:
            return  # stopping: not shipped; the replica's position says where to resume
        with memoryview(self.producer.region) as region:  # no copy of a megabyte chunk
            for p in placements:
                self.remote.write(p.offset, region[p.offset:p.offset + p.length])
        self.remote.publish(self.producer.write_seq, self.producer.head, confirm)
        self.last_gtid = gtid

    def _append(self, kind: FrameKind, payload: bytes, gtid: str):
        """Append to the ring, waiting for the replica's ack while it is full: up to
        the backpressure timeout (0: for as long as it takes, logged every few seconds)."""
        timeout = self.cfg.backpressure_timeout_s
        started = time.monotonic()
        next_log = started + BACKPRESSURE_LOG_S
        while True:
            try:
                placements = self.producer.append(kind, payload)
                self._waiting_for_space = False
                return placements
            except RingFull as full:
                self._waiting_for_space = True
                if self.link.down:
                    raise TransportError(f"ship {gtid}: link to replica lost: {self.link.reason}") from full
                self.producer.acknowledge(self.remote.read_ack())
                self.link.say_alive()  # a long wait must not look like a dead writer (bridge.node.fencing)
                if self.acks and self.reader is not None:
                    self.acks.settle(self.reader, self.link)  # what is placed may be acknowledged meanwhile
                if self.apply_stopped or self.replica_delay_s:  # stopped or delayed on purpose: no timeout
                    next_log = self._remind_waiting(next_log)
                    started = time.monotonic()  # the backpressure timeout counts once applying goes on
                    if self._stop.wait(ACK_POLL_S):
                        return None
                    continue
                waited = time.monotonic() - started
                if timeout > 0 and waited > timeout:
                    raise BackpressureTimeout(
                        f"ship {gtid}: ring full for {timeout:.1f}s with {self.producer.backlog_frames} frames "
                        f"({self.producer.used} bytes) unapplied: the replica applies slower than the primary "
                        f"writes; restart resumes from the replica's position. {full}") from full
                if time.monotonic() > next_log:
                    log.warning("ring full for %.0fs: %d frames (%d bytes) wait for the replica's apply",
                                waited, self.producer.backlog_frames, self.producer.used)
                    next_log += BACKPRESSURE_LOG_S
                if self._stop.is_set():
                    return None
                time.sleep(ACK_POLL_S)

    def _remind_waiting(self, next_log: float) -> float:
        """A reminder every 30 s of why this side waits for ring space."""
        now = time.monotonic()
        if now <= next_log:
            return next_log
        stopped = self.apply_stopped
        if stopped:
            log.warning("ring full with %d frames: the replica side stopped applying at seq %s (%s): %s; waiting "
                        "for `rdma-bridge resume` or `skip` there", self.producer.backlog_frames, stopped.get("seq"),
                        stopped.get("gtid"), stopped.get("error"))
        else:
            log.info("ring full with %d frames: the replica side applies %.0fs behind on purpose (--delay)",
                     self.producer.backlog_frames, self.replica_delay_s)
        return now + APPLY_STOPPED_LOG_S

    def stop(self) -> None:
        self._stop.set()

    def _drop_link(self) -> None:
        """Close the session with the replica; keep the binlog stream and the ring."""
        if self.link is not None:
            self.link.close()

    def disconnect(self) -> None:
        self._drop_link()
        self.acks.drop()  # asked on the dump connection that closes now
        reader, self.reader, self.producer, self._unplaced = self.reader, None, None, None
        if reader is not None:
            reader.close()

    def close(self) -> None:
        self._stop.set()
        self.disconnect()
        for service in (self.heartbeat, self.semi_sync, self.behind, self.metrics, self.gc_pauses):
            if service is not None:
                service.close()
