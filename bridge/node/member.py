"""One replica side a primary side feeds (bridge.node.primary holds one per ``--replica``).

A member is what the primary side knows of one replica side: its session (``Link``),
the mirror of its ring (``RingProducer``) and the ring itself once opened, where it
stood when the session began (its applied seq: covered, whatever its ring says), the
binlog format and apply mode it was sent, and what it said about itself (applying
stopped, or applying behind on purpose with ``--delay``). ``place`` puts one frame in
its ring, waiting for space as the backpressure rules say. In a fan-out
(bridge.node.fanout) ``offer`` never waits: what finds no space is queued in memory and
``drain`` places it as the replica side frees space.

Who touches what: the node's thread (``PrimaryNode.run``) replaces ``link`` and
``producer`` whole; the link's watcher thread writes only ``apply_stopped``, as one
reference assignment; the metrics thread and the monitors only read, each taking a
local reference first, so a concurrent replacement shows them the old object or the
new one, never a mix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from bridge.config import PrimaryConfig
from bridge.errors import BackpressureTimeout, RingFull, TransportError
from bridge.node.link import Link
from bridge.ring.producer import RingProducer
from bridge.transport import open_remote
from bridge.transport.sockets import ControlConnection
from bridge.wire import binlog
from bridge.wire.frame import FrameKind

log = logging.getLogger(__name__)
ACK_POLL_S = 0.0005
BACKPRESSURE_LOG_S = 5.0
APPLY_STOPPED_LOG_S = 30.0  # while the replica side's applying is stopped, a reminder this often
PUBLISHES_KEPT = 4096  # publishes remembered for how long the oldest unapplied frame has waited
# a member's state in a fan-out
STREAMING, CATCHING_UP, DOWN, FENCED, REFUSED = "streaming", "catching up", "down", "fenced", "refused"


class Member:
    def __init__(self, address: tuple[str, int], cfg: PrimaryConfig, tls, stop: threading.Event) -> None:
        self.address = address
        self.name = f"{address[0]}:{address[1]}"  # host:port of the replica side, for messages and status
        self.cfg, self.tls, self._stop = cfg, tls, stop
        self.transport = cfg.transport_of(address)
        self.link: Link | None = None  # the session with the replica side (the last one, once down)
        self.producer: RingProducer | None = None  # the mirror of its ring
        self.apply_stopped: dict | None = None  # the replica side stopped applying (bridge.node.halt): wait
        self.replica_delay_s = 0.0  # start-replica --delay: a full ring is expected, not a slow replica
        self.apply_mode = ""  # the replica's choice for this session: binlog (raw row events) or sql
        self.format_sent: binlog.FormatDescription | None = None  # the last one that went into the ring
        self.ack_floor = 0  # the replica's applied seq when the session began
        self.bad_frame_at: int | None = None  # applied seq when the replica last refused a frame
        self.unplaced: tuple[FrameKind, bytes, str] | None = None  # read, but not in the ring when the link fell
        self.waiting_for_space = False
        self.last_gtid = ""  # the last transaction placed in its ring
        self.server = ""  # the replica server it applies into (its welcome says: host, port, server id)
        self.check: Callable[[Member], None] | None = None  # a fan-out's refusal of a second side on one server
        # its part in a fan-out (bridge.node.fanout)
        self.index = 0  # its place among the --replica options
        self.state = DOWN
        self.catch_up = None  # the PrimaryNode feeding it from a dump of its own while it is not streaming
        self.queue: deque[tuple[FrameKind, bytes, str, bool]] = deque()  # read, no space in its ring yet
        self.queued_bytes = 0
        self.queued_since = 0.0  # when the queue last became non-empty
        self.parked = False  # its catch-up is ahead of the shared stream and waits for it there
        self.published: deque[tuple[int, float]] = deque(maxlen=PUBLISHES_KEPT)  # (write_seq, when) per publish

    @property
    def remote(self):
        """The replica's ring while the link is open; None otherwise."""
        link = self.link
        return link.remote if link is not None else None

    def attach(self, conn: ControlConnection, welcome: dict) -> None:
        """A new session: the replica side welcomed this primary side on ``conn``."""
        self.server = str(welcome.get("server") or "")
        if self.check is not None:
            try:
                self.check(self)
            except BaseException:
                conn.close()
                raise
        self._apply_state(welcome.get("apply_stopped"))
        self.replica_delay_s = float(welcome.get("delay_s") or 0.0)
        self.link = Link(conn, self.name, self._apply_state)

    def open(self, welcome: dict) -> None:
        """The ring, fresh: the next frame is the one after the replica's applied seq."""
        self._open_ring(welcome)
        self.apply_mode, self.format_sent = welcome["apply_mode"], None
        self.ack_floor = welcome["applied_seq"]

    def _open_ring(self, welcome: dict) -> None:
        remote = open_remote(self.transport, welcome["params"], self.address, welcome["ring_bytes"],
                             self.cfg.secret, self.tls, self.cfg.rdma)
        self.producer = RingProducer(welcome["ring_bytes"], next_seq=welcome["applied_seq"] + 1,
                                     epoch=welcome["epoch"], region=remote.producer_region())
        self.link.remote = remote

    def resend(self, welcome: dict, frames: list, unplaced, settle: Callable[[], None]) -> None:
        """A new session on a kept binlog stream: ``frames`` (the ring's copies past the
        replica's applied seq) and what the lost link left unplaced, all or nothing."""
        self.unplaced = None
        self._open_ring(welcome)
        for frame in frames:
            self.place(frame.kind, frame.payload, f"resend of seq {frame.seq}", settle)
        if unplaced is not None:
            self.place(*unplaced, settle)
        self.ack_floor = welcome["applied_seq"]

    def _apply_state(self, stopped: dict | None) -> None:
        """The replica side stopped applying (it says where and why) or goes on again."""
        if stopped and not self.apply_stopped:
            log.warning("the replica side %s stopped applying at seq %s (%s): %s; waiting (the ring fills, then "
                        "this side waits as long as it takes) for `rdma-bridge resume` or `skip` there",
                        self.name, stopped.get("seq"), stopped.get("gtid"), stopped.get("error"))
        elif self.apply_stopped and not stopped:
            log.info("the replica side %s applies again", self.name)
        self.apply_stopped = stopped or None

    def covered(self, confirm: bool, seq: int) -> int:
        """The highest seq this replica side covers: holds in its ring (``confirm``,
        asked up to ``seq``) or committed; its applied seq at the session's start at least.
        A link that went down says nothing more: the replica side may be gone with its
        ring (over rdma a write may still complete into a dead process's memory)."""
        link = self.link
        remote = link.remote if link is not None and not link.down else None
        if remote is None:
            return self.ack_floor
        if self.apply_mode == "relay":  # the replica server's own: its semi-sync ACK, its executed GTIDs
            return max(self.ack_floor, link.relay_received if confirm else link.relay_applied)
        try:
            return max(self.ack_floor, remote.held(seq) if confirm else remote.last_ack())
        except TransportError as exc:  # its data connection closed: the link is down from now on, and
            link.fail(str(exc))  # its owner sees it (a fan-out detaches only this member, a single side recovers)
            return self.ack_floor

    def place(self, kind: FrameKind, payload: bytes, gtid: str, settle: Callable[[], None],
              confirm: bool = False) -> bool:
        """Append to the ring and write to the replica's; ``confirm``: an ACK waits on
        it; ``settle`` is called while it waits for space. False: stopping, not placed."""
        try:
            placements = self._append(kind, payload, gtid, settle)
        except TransportError:
            self.unplaced = (kind, payload, gtid)
            raise
        if placements is None:
            return False  # stopping: not shipped; the replica's position says where to resume
        self.publish(placements, gtid, confirm)
        return True

    def publish(self, placements, gtid: str, confirm: bool = False) -> None:
        """What the mirror holds new (``placements``) copied to the replica's ring and
        published, ``gtid`` the last transaction among them."""
        remote, producer = self.remote, self.producer
        with memoryview(producer.region) as region:  # no copy of a megabyte chunk
            for p in placements:
                remote.write(p.offset, region[p.offset:p.offset + p.length])
        remote.publish(producer.write_seq, producer.head, confirm)
        self.last_gtid = gtid
        self.note_published()

    def note_published(self) -> None:
        """Its ring's write_seq was just published: when, for ``behind_s``."""
        seq, published = self.producer.write_seq, self.published
        if not published or published[-1][0] < seq:
            published.append((seq, time.monotonic()))

    def behind_s(self) -> float | None:
        """How long the oldest frame in its ring that it has not applied has been there
        (as of the last acknowledgement this side read; 0: none; None: no ring open,
        so unknown)."""
        producer, published = self.producer, self.published
        if producer is None:
            return None
        oldest = producer.oldest_unacked
        if oldest is None:
            return 0.0
        try:
            while published[0][0] < oldest:
                published.popleft()
            return round(time.monotonic() - published[0][1], 3)
        except IndexError:
            return 0.0

    def _append(self, kind: FrameKind, payload: bytes, gtid: str, settle: Callable[[], None]):
        """Append to the ring, waiting for the replica's ack while it is full: up to
        the backpressure timeout (0: for as long as it takes, logged every few seconds)."""
        timeout = self.cfg.backpressure_timeout_s
        started = time.monotonic()
        next_log = started + BACKPRESSURE_LOG_S
        producer = self.producer
        while True:
            try:
                placements = producer.append(kind, payload)
                self.waiting_for_space = False
                return placements
            except RingFull as full:
                self.waiting_for_space = True
                if self.link.down:
                    raise TransportError(f"ship {gtid}: link to replica {self.name} lost: {self.link.reason}") \
                        from full
                producer.acknowledge(self.remote.read_ack())
                self.link.say_alive()  # a long wait must not look like a dead writer (bridge.node.fencing)
                settle()  # what is placed may be acknowledged meanwhile
                if self.apply_stopped or self.replica_delay_s:  # stopped or delayed on purpose: no timeout
                    next_log = self._remind_waiting(next_log)
                    started = time.monotonic()  # the backpressure timeout counts once applying goes on
                    if self._stop.wait(ACK_POLL_S):
                        return None
                    continue
                waited = time.monotonic() - started
                if timeout > 0 and waited > timeout:
                    raise BackpressureTimeout(
                        f"ship {gtid}: ring full for {timeout:.1f}s with {producer.backlog_frames} frames "
                        f"({producer.used} bytes) unapplied at replica {self.name}: the replica applies "
                        f"slower than the primary writes; restart resumes from the replica's position. {full}") \
                        from full
                if time.monotonic() > next_log:
                    log.warning("ring of replica %s full for %.0fs: %d frames (%d bytes) wait for its apply",
                                self.name, waited, producer.backlog_frames, producer.used)
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
            log.warning("ring full with %d frames: the replica side %s stopped applying at seq %s (%s): %s; waiting "
                        "for `rdma-bridge resume` or `skip` there", self.producer.backlog_frames, self.name,
                        stopped.get("seq"), stopped.get("gtid"), stopped.get("error"))
        else:
            log.info("ring full with %d frames: the replica side %s applies %.0fs behind on purpose (--delay)",
                     self.producer.backlog_frames, self.name, self.replica_delay_s)
        return now + APPLY_STOPPED_LOG_S

    def offer(self, kind: FrameKind, payload: bytes, gtid: str, confirm: bool = False) -> None:
        """Fan-out: into the ring now where it has space and nothing waits before it,
        else queued; never waits."""
        if not self.queue and self._place_now(kind, payload, gtid, confirm):
            return
        self.enqueue(kind, payload, gtid, confirm)

    def enqueue(self, kind: FrameKind, payload: bytes, gtid: str, confirm: bool = False) -> None:
        """Fan-out: behind whatever its queue holds, whatever space its ring has now."""
        if not self.queue:
            self.queued_since = time.monotonic()
        self.queue.append((kind, payload, gtid, confirm))
        self.queued_bytes += len(payload)

    def drain(self) -> None:
        """Fan-out: the queued frames the ring has space for now, in order."""
        queue = self.queue
        while queue:
            if not self._place_now(*queue[0]):
                return
            self.queued_bytes -= len(queue.popleft()[1])

    def _place_now(self, kind: FrameKind, payload: bytes, gtid: str, confirm: bool) -> bool:
        producer, remote = self.producer, self.remote
        if remote is None:
            raise TransportError(f"link to replica {self.name} lost: {self.link.reason if self.link else ''}")
        try:
            placements = producer.append(kind, payload)
        except RingFull:
            producer.acknowledge(remote.last_ack())  # never waits: the answer asked for now comes later
            try:
                placements = producer.append(kind, payload)
            except RingFull:
                return False
        self.publish(placements, gtid, confirm)
        return True

    def drop_link(self) -> None:
        """Close the session with the replica side; keep the ring's mirror."""
        if self.link is not None:
            self.link.close()

    def forget(self) -> None:
        """The binlog stream is reopened: the ring's mirror and what was unplaced go."""
        self.drop_link()
        self.producer, self.unplaced = None, None
        self.published.clear()
        self.queue.clear()
        self.queued_bytes = 0
