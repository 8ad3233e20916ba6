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
from collections.abc import Callable

from bridge.config import PrimaryConfig, backoff_s
from bridge.errors import BinlogPurged, BridgeError, ConfigError, EndCode, SourceConnectionLost, TransportError
from bridge.model import Chunk, GtidSet, Transaction
from bridge.node import reporting
from bridge.node.acking import SemiSyncAcks
from bridge.node.counters import PrimaryCounts
from bridge.node.link import Link
from bridge.node.member import Member
from bridge.node.progress import Progress
from bridge.node.shipping import ShipLoop, event_of
from bridge.ops.metrics import STAGES, GcPauses, MetricsServer, Stages
from bridge.ops.statusdoc import PrimaryStatus
from bridge.relay.answers import SourceFacts
from bridge.server import catalog
from bridge.server.flavor import Flavor
from bridge.source import lanes, preflight
from bridge.source.assembler import TransactionAssembler
from bridge.source.behind import BehindMonitor
from bridge.source.events import GtidStart, VerbatimRead
from bridge.source.heartbeat import HeartbeatWriter
from bridge.source.reader import BinlogReader, dump_refusal
from bridge.source.semisync import SemiSyncMonitor, check_enabled
from bridge.source.verbatim import VerbatimGrouper
from bridge.transport import check_available, native_parts, tls
from bridge.transport.sockets import ControlConnection, connect
from bridge.wire import binlog, control, native
from bridge.wire.codec import encode_chunk, encode_transaction
from bridge.wire.frame import FrameKind

log = logging.getLogger(__name__)
ACK_REFRESH_S = 0.05  # how often the ring backlog (status, metrics) learns the replica's ack, while it has one


class PrimaryNode(ShipLoop):
    """Who touches what. The node's own thread (``run``) is the only writer of
    ``reader``, ``assembler``, the session state and the member's ``link`` and
    ``producer`` (bridge.node.member), and replaces each whole (never mutated in place
    from elsewhere). The member's ``apply_stopped`` is written only by the link's watcher
    thread, as one reference assignment. The metrics thread (``status``), the behind
    monitor and the semi-sync monitor (what they ask: bridge.node.reporting) only read,
    each taking a local reference first (``producer = member.producer``), so a concurrent
    replacement shows them either the old object or the new one, never a mix."""

    def __init__(self, cfg: PrimaryConfig, member: Member | None = None, writer: dict | None = None,
                 on_transaction: Callable[[PrimaryNode], None] | None = None) -> None:
        """``member``, ``writer``, ``on_transaction``: a fan-out's catch-up (bridge.node.fanout)
        feeds one of its members from a dump of its own, as the fan-out's writer, and
        hears of each transaction it completes."""
        for transport in cfg.transports_used:
            check_available(transport)
        self.cfg = cfg
        self.tls = tls.prepare(cfg.tls, server_side=False)  # None: plain TCP to the replica side
        self.counts = PrimaryCounts()
        self.last_gtid = ""
        self.flavor: Flavor | None = None  # the primary's, read at the preflight
        self.position: tuple[str, int] | None = None  # binlog file and offset after the last transaction shipped
        self._on_transaction = on_transaction
        self._stop = threading.Event()
        self.member = member or Member(cfg.replica, cfg, self.tls, self._stop)  # the replica side this side feeds
        self.reader: BinlogReader | None = None
        self.assembler = TransactionAssembler()
        # who this primary side is, for the replica side's one-writer check (bridge.node.fencing)
        self.writer = writer or {"id": secrets.token_hex(8), "host": socket.gethostname(), "pid": os.getpid(),
                                 "source": str(cfg.source), "server_id": cfg.server_id,
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        self._progress = Progress()
        self.stages = Stages(STAGES["primary"])
        self.gc_pauses = GcPauses(self.stages)
        self.metrics = MetricsServer(cfg.metrics, "primary", self.status) if cfg.metrics else None
        self.heartbeat = HeartbeatWriter(cfg.source, cfg.heartbeat_row_s, self.report_as, cfg.heartbeat_table) \
            if cfg.heartbeat_row_s > 0 else None
        self._services_started = False
        self._ack_refresh_at = 0.0
        self.semi_sync = SemiSyncMonitor(cfg.source, lambda: reporting.degradation_reason(self)) \
            if cfg.semi_sync != "off" else None
        self.acks = SemiSyncAcks(cfg.semi_sync, self.counts, self._stop)  # asked for, not yet covered
        self.behind = BehindMonitor(cfg.source, lambda: reporting.reading(self), cfg.behind_poll_s)
        self._collation_names: dict[str, str] = {}  # the primary's collations by id, for the replica side's messages
        self._source: SourceFacts | None = None  # the primary as a replica side in relay mode presents it

    @property
    def link(self) -> Link | None:
        return self.member.link

    @property
    def producer(self):
        return self.member.producer

    @property
    def remote(self):
        """The replica's ring while the link is open; None otherwise."""
        return self.member.remote

    @property
    def report_as(self) -> str:
        """How this bridge names itself to the primary (SHOW SLAVE HOSTS): by the replica it feeds."""
        return f"rdma-bridge {self.cfg.replica[0]}:{self.cfg.replica[1]}"

    def start_services(self) -> None:
        """The metrics endpoint and the semi-sync monitor (both optional, both only read); once."""
        if self._services_started:
            return
        self._services_started = True
        native.announce(log, ("hot path", lanes.PART,
                              *dict.fromkeys(p for t in self.cfg.transports_used for p in native_parts(t))))
        for service in (self.metrics, self.semi_sync, self.behind):
            if service is not None:
                service.start()

    def _start_writing(self) -> None:
        """The heartbeat writer, the only thing this side writes to the primary: once the
        preflight and the replica side have accepted this primary side, so a refused
        start changes nothing anywhere."""
        if self.heartbeat is not None and not self.heartbeat.started:
            self.heartbeat.start()

    def status(self) -> PrimaryStatus:
        return reporting.primary_status(self)  # the metrics thread's (bridge.node.reporting)

    def connect(self) -> None:
        settings = self._preflight()
        member = self.member
        welcome = self._handshake(settings["version"])
        resume = GtidSet.parse(welcome["gtid_set"])
        # the primary's position read again: the replica may have applied more since the preflight
        now = self._preflight(check=False)
        preflight.check_position({**settings, **now}, resume, self.cfg.source)
        try:
            preflight.check_not_purged(GtidSet.parse(now["binlog_start"]), resume, self.cfg.source)
        except BinlogPurged:
            if welcome["apply_mode"] == "relay":  # the replica server's IO thread gets the primary's own error
                refusal = dump_refusal(self.cfg.source, self.cfg.server_id, str(resume), self.flavor)
                if refusal is not None:
                    member.link.say_last({"type": "source_refused", "code": refusal[0], "text": refusal[1]})
            raise
        chunk_bytes = min(self.cfg.chunk_bytes, welcome["ring_bytes"] // 4)
        relay = welcome["apply_mode"] == "relay"
        if relay and len(self.cfg.replicas) > 1:
            raise ConfigError(f"the replica side at {member.address[0]}:{member.address[1]} runs apply mode relay, "
                              "which a fan-out (several --replica) does not serve yet: feed it from a primary side "
                              "of its own")
        # relay: the events whole, grouped into transactions as they are (bridge.source.verbatim)
        self.assembler = VerbatimGrouper(_checksum_bytes(settings), chunk_bytes) if relay else \
            TransactionAssembler(chunk_bytes=chunk_bytes)
        member.open(welcome)
        self.reader = BinlogReader(self.cfg.source, self.cfg.server_id, str(resume), self.cfg.heartbeat_s,
                                   flavor=self.flavor, report_as=self.report_as,
                                   semi_sync=self.cfg.semi_sync != "off", raw_rows=member.apply_mode == "binlog",
                                   verbatim=relay)
        self.counts.binlog_reopens += 1
        log.info("streaming %s from %s after seq %d to replica %s:%d over %s, apply mode %s", self.cfg.source,
                 resume or "the start of the binlog", welcome["applied_seq"], *member.address, member.transport,
                 member.apply_mode)
        self._start_writing()

    def _preflight(self, check: bool = True) -> dict:
        """The primary's settings, refused with the fix where unsafe (before this side
        writes anything anywhere); ``check=False``: only read them."""
        conn = preflight.connect(self.cfg.source, "primary")
        try:
            self.flavor = Flavor.of(conn)
            settings = preflight.read_settings(conn)
            self._source = SourceFacts.of_primary(settings)  # what a replica side in relay mode answers with
            settings["binlog_start"] = preflight.binlog_start(conn)
            if not check:
                return settings
            with conn.cursor() as cur:  # the replica side names an id its server lacks by the primary's name
                self._collation_names = {str(i): name for i, (name, _) in catalog.read_collations(cur).items()}
            preflight.check_primary(settings, self.cfg.server_id, self.cfg.source)
            preflight.check_server_id_free(conn, self.cfg.server_id, self.cfg.source, self.report_as,
                                            grace_s=1.0 + 4 * self.cfg.heartbeat_s)
            if self.cfg.semi_sync != "off":
                self.acks.timeout_s = check_enabled(conn, self.cfg.source) / 1000
        finally:
            conn.close()
        return settings

    def _handshake(self, version: str) -> dict:
        conn = ControlConnection(connect(self.member.address, self.cfg.connect_timeout_s, self.tls))
        try:
            welcome = self._hello(conn, version)
        except BaseException:
            conn.close()
            raise
        self._server_version = version
        self.member.attach(conn, welcome)
        return welcome

    def _hello(self, conn: ControlConnection, version: str) -> dict:
        return control.check_hello(control.client_handshake(
            conn, self.cfg.secret, "control", transport=self.member.transport,
            start_gtid=self.cfg.start_gtid or "",
            start_explicit=self.cfg.start_gtid is not None,  # else a new channel must not replay into existing data
            flavor=self.flavor.kind, server_version=version,  # the replica picks the apply mode
            writer=self.writer, take_over=self.cfg.take_over,  # one writer per ring (bridge.node.fencing)
            collations=self._collation_names, semi_sync=self.cfg.semi_sync,
            source=self._source.with_semi_sync(self.cfg.semi_sync != "off").to_json()),  # apply mode relay
            expect_type="welcome")

    def resume_link(self) -> None:
        """A new session on a kept binlog stream: resend what the replica lacks from
        the ring, or fall back to re-reading the binlog."""
        member = self.member
        bad_frame = member.link is not None and member.link.code == EndCode.BAD_FRAME
        welcome = self._handshake(self._server_version)
        applied = welcome["applied_seq"]
        frames = member.producer.unacked(applied) if welcome["ring_bytes"] == member.producer.size else None
        repeated = bad_frame and member.bad_frame_at == applied  # the ring's own copy was refused again
        member.bad_frame_at = applied if bad_frame else None
        # the ring's frames name their FORMAT_DESCRIPTION only where it changed: a replica
        # that lost the one in force, or changed its apply mode, needs the binlog again
        stale = welcome["format"] != (member.format_sent.id if member.format_sent else "") or \
            welcome["apply_mode"] != member.apply_mode
        # relay: the replica side serves from what its server holds; its feed starts again
        if frames is None or repeated or stale or member.apply_mode == "relay":
            log.info("%s after seq %d: re-reading the binlog", "the replica refused the resent frame again"
                     if repeated else "apply mode relay (the replica server's GTIDs say where)"
                     if member.apply_mode == "relay" == welcome["apply_mode"] else
                     "the replica's apply mode or binlog format differs" if stale else
                     "the ring no longer holds every frame", applied)
            self.disconnect()
            self.connect()
            return
        try:  # all or nothing: a resend cut short must not leave a gap in the seqs
            member.resend(welcome, frames, member.unplaced, self._settle)
        except TransportError:
            self.disconnect()  # the next attempt re-reads the binlog from the replica's position
            raise
        self.counts.frames_resent += len(frames)
        log.info("link to replica resumed after seq %d: %d frames resent from the ring", applied, len(frames))
        if self.semi_sync is not None and not self.assembler.in_transaction:
            self.acks.note(self.reader, (member,))  # asked with the frame the link lost

    def run(self) -> None:
        """Stream until ``stop``, recovering from lost links and binlog streams."""
        self.start_services()
        self.stream()

    def stream(self) -> None:
        """``run`` without the services (metrics, monitors): what a fan-out's catch-up runs."""
        attempt = 0
        while not self._stop.is_set():
            try:
                self._open_session()
                attempt = 0
                while not self._stop.is_set():
                    self.step()
            except (TransportError, SourceConnectionLost) as exc:
                self._recover(exc)
                attempt += 1
                if attempt > self.cfg.reconnect_attempts:
                    raise
                self._backoff(attempt, exc)

    def _open_session(self) -> None:
        """What must be open before stepping: the binlog stream and the replica's ring."""
        self._check_fenced()  # the replica side said so while this side was retrying
        if self.reader is None:
            self.connect()
        elif self.remote is None:
            self.resume_link()

    def _recover(self, exc: TransportError | SourceConnectionLost) -> None:
        """After a failure, before the next attempt: a lost link keeps the binlog stream
        (resume_link resends from the ring); anything else reopens both."""
        if isinstance(exc, TransportError) and self.reader is not None:
            self._drop_link()
        else:
            self.disconnect()

    def _check_fenced(self) -> None:
        """Another primary side took the channel (the replica side said so, code fenced):
        stop writing, whatever else failed meanwhile. Over rdma the old queue pair is
        closed at once, so a placement may fail before the message is read."""
        link = self.member.link
        if link is not None and link.fenced:
            link.raise_if_down()  # fenced: the link went down with that code

    def _backoff(self, attempt: int, exc: BridgeError) -> None:
        delay = backoff_s(attempt, self.cfg.reconnect_backoff_s, self.cfg.reconnect_backoff_max_s)
        what = "session lost" if self.counts.binlog_reopens else "cannot start"  # no session yet: nothing was lost
        log.warning("%s (%s); attempt %d/%d in %.1fs", what, exc, attempt, self.cfg.reconnect_attempts, delay)
        self.counts.reconnects += 1
        self._stop.wait(delay)

    def _report_progress(self) -> None:
        self.stages.tick()  # the last minute's latency windows
        report = self._progress.due(self.counts.transactions_shipped)
        if report and report[0]:
            shipped, elapsed = report
            log.info("shipped %d transactions in the last %.0fs (%.0f txn/s), last %s, ring backlog %d frames",
                     shipped, elapsed, shipped / elapsed, self.last_gtid,
                     self.member.producer.backlog_frames if self.member.producer else 0)

    def step(self) -> Transaction | Chunk | None:
        """Read the binlog (one event, or a whole transaction: ``_read``); ship the
        transaction it completes, if any."""
        self._report_progress()
        member = self.member
        now = time.monotonic()
        if now >= self._ack_refresh_at and member.remote is not None and member.producer.backlog_frames:
            self._ack_refresh_at = now + ACK_REFRESH_S  # nothing unacknowledged: no answer asked (tcp: a wakeup less)
            member.producer.acknowledge(member.remote.last_ack())
        link = member.link
        link.raise_if_down()
        link.say_alive()
        reader = self.reader  # close() from another thread may drop it mid-step
        if self.acks:
            self.acks.wait(reader, (member,))
            link.raise_if_down()
        if self._runs(reader, member):
            if self._ship_lane(reader, member):
                return None
            run = reader.take_run(self._place_run)
            if run is not None:
                self._ship_run(run, reader, member)
                self._note_ack(reader, member)
                return None
        item = self._read(reader)
        if item is not None and (isinstance(item, Transaction) or item.index == 0) and \
                event_of(reader.format) != event_of(member.format_sent):
            item = dataclasses.replace(item, format_event=event_of(reader.format))
            member.format_sent = reader.format
        if item is not None:
            confirm = self.acks.confirm and reader.ack_wanted  # ask the replica at once
            read_ns = time.time_ns()  # the commit event (or the chunk's last) was just read
            self._place(FrameKind.CHUNK if isinstance(item, Chunk) else FrameKind.TXN, self._frame(item, read_ns),
                        item.gtid, confirm)
            self._count_shipped(item, read_ns)
            if isinstance(item, Transaction) or item.last:
                self._shipped(reader)
        self._note_ack(reader, member)
        return item

    @staticmethod
    def _frame(item: Transaction | Chunk, read_ns: int) -> bytes:
        """A transaction's or chunk's frame payload (a transaction stamped read -> framed)."""
        if isinstance(item, Chunk):
            return encode_chunk(item)
        return encode_transaction(item, (read_ns, time.time_ns()))

    def _count_shipped(self, item: Transaction | Chunk, read_ns: int) -> None:
        """Counters and the "place" stage of what was just placed."""
        if isinstance(item, Chunk):
            self.counts.transactions_shipped += item.last
            return
        self.stages.record("place", (time.time_ns() - read_ns) / 1000)
        if item.is_heartbeat:
            self.counts.heartbeats_shipped += 1
        else:
            self.counts.transactions_shipped += 1

    def _shipped(self, reader: BinlogReader) -> None:
        """A whole transaction (or run of them) is placed: a catch-up (bridge.node.fanout)
        hears where the binlog stands now; otherwise nothing is done per transaction."""
        if self._on_transaction is not None:
            self.position = (reader.log_file, reader.commit_pos)
            self._on_transaction(self)

    def _note_ack(self, reader: BinlogReader, member: Member) -> None:
        if self.semi_sync is not None and not self.assembler.in_transaction:
            self.acks.note(reader, (member,))

    def _settle(self) -> None:
        """While a placement waits for ring space: what is placed may be acknowledged meanwhile."""
        if self.acks and self.reader is not None:
            self.acks.settle(self.reader, (self.member,))

    def _read(self, reader: BinlogReader) -> Transaction | Chunk | None:
        """What the binlog completes next, if anything: a common transaction whole in
        one call where its packets are all buffered, else event by event."""
        chunk_bytes, idle = self.assembler.chunk_bytes, not self.assembler.in_transaction
        whole = None if not idle else reader.next_verbatim(chunk_bytes) if reader.verbatim else \
            reader.next_transaction(chunk_bytes)
        if whole is None:
            event = reader.next_event()
            if reader.verbatim:  # apply mode relay: the grouper takes every event whole (a heartbeat: nothing)
                if type(event) is not VerbatimRead:
                    return None
                if event.event[4] == binlog.FORMAT_DESCRIPTION:
                    self.assembler.checksum_bytes = reader.format.checksum_bytes
                return self.assembler.feed(event.event)
            if idle and type(event) is GtidStart and not event.standalone:
                whole = reader.rest_of_transaction(event.gtid, chunk_bytes)  # its GTID came alone
            if whole is None:
                return self.assembler.feed(event) if event is not None else None
        self.counts.taken_whole += 1
        return whole

    def _place(self, kind: FrameKind, payload: bytes, gtid: str, confirm: bool = False) -> None:
        """Into the replica's ring; ``confirm``: an ACK waits on it."""
        if self.member.place(kind, payload, gtid, self._settle, confirm):
            self.last_gtid = gtid

    def stop(self) -> None:
        self._stop.set()

    def _drop_link(self) -> None:
        """Close the session with the replica; keep the binlog stream and the ring."""
        self.member.drop_link()

    def disconnect(self) -> None:
        self.member.forget()
        self.acks.drop()  # asked on the dump connection that closes now
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close()

    def close(self) -> None:
        self._stop.set()
        self._report_lane()
        self.disconnect()
        for service in (self.heartbeat, self.semi_sync, self.behind, self.metrics, self.gc_pauses):
            if service is not None:
                service.close()


def _checksum_bytes(settings: dict[str, str]) -> int:
    """The length of each event's checksum in the dump: the dump asks for the primary's own."""
    return 0 if settings.get("binlog_checksum", "").upper() in ("", "NONE") else 4
