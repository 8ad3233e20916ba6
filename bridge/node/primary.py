"""Primary node: binlog → assembler → frames → the replica's ring.

``connect`` does the handshake (learns the replica's applied seq and GTID set),
the preflight of the primary and opens the transport and the binlog stream at
that GTID set; ``step`` moves one binlog event; ``run`` loops until ``stop``.
A lost link (control channel closed, transport error) or a lost binlog stream
ends the session; ``run`` reconnects with bounded backoff, and every session
resumes from the replica's recorded position, so nothing is lost or doubled.
When the ring is full it waits for the replica's ack up to the backpressure
timeout, then fails with the backlog named; the binlog is the durable buffer,
so a restart resumes from the replica's position and nothing is lost.
"""

from __future__ import annotations

import logging
import threading
import time

from bridge.config import PrimaryConfig
from bridge.errors import BackpressureTimeout, BridgeError, RingFull, SourceConnectionLost, TransportError
from bridge.model import Chunk, GtidSet, Transaction
from bridge.ring.producer import RingProducer
from bridge.source import preflight
from bridge.source.assembler import TransactionAssembler
from bridge.source.reader import BinlogReader
from bridge.transport import open_remote
from bridge.transport.sockets import ControlConnection, connect
from bridge.wire import control
from bridge.wire.codec import encode_chunk, encode_transaction
from bridge.wire.frame import FrameKind

log = logging.getLogger(__name__)
ACK_POLL_S = 0.0005
BACKPRESSURE_LOG_S = 5.0


class PrimaryNode:
    def __init__(self, cfg: PrimaryConfig) -> None:
        self.cfg = cfg
        self.shipped = 0
        self.last_gtid = ""
        self._stop = threading.Event()
        self._control: ControlConnection | None = None
        self.remote = None
        self.reader: BinlogReader | None = None
        self.producer: RingProducer | None = None
        self.assembler = TransactionAssembler()
        self.reconnects = 0
        self._link_down = threading.Event()
        self._link_reason = ""

    @property
    def report_as(self) -> str:
        """How this bridge names itself to the primary (SHOW SLAVE HOSTS): by the replica it feeds."""
        return f"rdma-bridge {self.cfg.replica[0]}:{self.cfg.replica[1]}"

    def connect(self) -> None:
        settings = self._preflight()
        welcome = self._handshake()
        resume = GtidSet.parse(welcome["gtid_set"])
        preflight.check_position(settings, resume, self.cfg.source)
        self.assembler = TransactionAssembler(chunk_bytes=min(self.cfg.chunk_bytes, welcome["ring_bytes"] // 4))
        self.producer = RingProducer(welcome["ring_bytes"], next_seq=welcome["applied_seq"] + 1)
        self.remote = open_remote(self.cfg.transport, welcome["params"], self.cfg.replica, welcome["ring_bytes"])
        self.reader = BinlogReader(self.cfg.source, self.cfg.server_id, str(resume), self.cfg.heartbeat_s,
                                   mariadb="mariadb" in settings["version"].lower(), report_as=self.report_as)
        log.info("streaming %s from %s after seq %d to replica %s:%d over %s", self.cfg.source,
                 resume or "the start of the binlog", welcome["applied_seq"], *self.cfg.replica, self.cfg.transport)

    def _preflight(self) -> dict:
        conn = preflight.connect(self.cfg.source, "primary")
        try:
            settings = preflight.read_settings(conn)
            preflight.check_primary(settings, self.cfg.server_id, self.cfg.source)
            preflight.check_server_id_free(conn, self.cfg.server_id, self.cfg.source, self.report_as)
        finally:
            conn.close()
        return settings

    def _handshake(self) -> dict:
        self._control = ControlConnection(connect(self.cfg.replica, self.cfg.connect_timeout_s))
        self._control.send(control.hello("control", transport=self.cfg.transport, start_gtid=self.cfg.start_gtid))
        welcome = control.check_hello(self._control.recv(), expect_type="welcome")
        self._control.sock.settimeout(None)
        self._link_down.clear()
        threading.Thread(target=self._watch_control, args=(self._control,), name="primary-control",
                         daemon=True).start()
        return welcome

    def _watch_control(self, conn: ControlConnection) -> None:
        """The replica only speaks to end a session (error) or by closing it."""
        try:
            while True:
                msg = conn.recv()
                if msg.get("type") == "error":
                    raise TransportError(f"replica ended the session: {msg.get('reason')}")
        except BridgeError as exc:
            if conn is self._control:
                self._link_reason = str(exc)
                self._link_down.set()

    def run(self) -> None:
        """Stream until ``stop``, reconnecting after a lost link or binlog stream."""
        attempt = 0
        while not self._stop.is_set():
            try:
                if self.reader is None:
                    self.connect()
                attempt = 0
                while not self._stop.is_set():
                    self.step()
            except (TransportError, SourceConnectionLost) as exc:
                self.disconnect()
                attempt += 1
                if attempt > self.cfg.reconnect_attempts:
                    raise
                self._backoff(attempt, exc)

    def _backoff(self, attempt: int, exc: BridgeError) -> None:
        delay = min(self.cfg.reconnect_backoff_max_s, self.cfg.reconnect_backoff_s * 2 ** (attempt - 1))
        log.warning("session lost (%s); reconnect attempt %d/%d in %.1fs", exc, attempt,
                    self.cfg.reconnect_attempts, delay)
        self.reconnects += 1
        self._stop.wait(delay)

    def step(self) -> Transaction | Chunk | None:
        """Read one binlog event; ship the transaction it completes, if any."""
        if self._link_down.is_set():
            raise TransportError(f"link to replica {self.cfg.replica[0]}:{self.cfg.replica[1]}: {self._link_reason}")
        event = self.reader.next_event()
        item = self.assembler.feed(event) if event is not None else None
        if isinstance(item, Chunk):
            self._place(FrameKind.CHUNK, encode_chunk(item), item.gtid)
            self.shipped += item.last
        elif item is not None:
            self._place(FrameKind.TXN, encode_transaction(item), item.gtid)
            self.shipped += 1
        return item

    def _place(self, kind: FrameKind, payload: bytes, gtid: str) -> None:
        placements = self._append(kind, payload, gtid)
        if placements is None:
            return  # stopping: not shipped; the replica's position says where to resume
        for p in placements:
            self.remote.write(p.offset, self.producer.region[p.offset:p.offset + p.length])
        self.remote.publish(self.producer.write_seq, self.producer.head)
        self.last_gtid = gtid

    def _append(self, kind: FrameKind, payload: bytes, gtid: str):
        """Append to the ring, waiting for the replica's ack while it is full: up to
        the backpressure timeout (0: for as long as it takes, logged every few seconds)."""
        timeout = self.cfg.backpressure_timeout_s
        started = time.monotonic()
        next_log = started + BACKPRESSURE_LOG_S
        while True:
            try:
                return self.producer.append(kind, payload)
            except RingFull as full:
                if self._link_down.is_set():
                    raise TransportError(f"ship {gtid}: link to replica lost: {self._link_reason}") from full
                self.producer.acknowledge(self.remote.read_ack())
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

    def stop(self) -> None:
        self._stop.set()

    def disconnect(self) -> None:
        parts, self.reader, self.remote, self._control = (self.reader, self.remote, self._control), None, None, None
        for part in parts:
            if part is not None:
                part.close()

    def close(self) -> None:
        self._stop.set()
        self.disconnect()
