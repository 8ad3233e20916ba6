"""One primary side, several replica sides: one binlog dump read once, each transaction
framed once and placed in every streaming member's ring (bridge.node.member).

A member that cannot keep up never holds the others back: its frames wait in memory
(``Member.offer``) and go as its replica side frees ring space; once they pass a bound
(``MEMBER_QUEUE_BYTES``, or older than ``--backpressure-timeout``) or its link goes down,
it is detached and a catch-up takes it over: a single-replica ``PrimaryNode`` with a
dump of its own (server id ``--server-id`` + 1 + its index), started from its replica's
own position as any restart is, so nothing is lost or doubled. After each transaction
the catch-up ships, it compares where its dump stands with where the shared stream
stands (binlog file and offset after the last transaction: both read the same binlog,
so equal positions mean the same transactions shipped); the one that finds them equal
hands the member back to the shared stream, under one lock that the shared stream also
holds while it places a transaction, so the next transaction goes to it from the
shared stream and none twice. A catch-up ahead of the shared stream waits for it.

Semi-sync: the shared dump is the one semi-sync replica; an ACK goes once
``--semi-sync-quorum`` streaming members cover the transaction (bridge.node.acking); a
member catching up, down or with queued frames does not count. At start the first
member whose replica side answers leads: the shared dump starts at its position, and
every other member starts as a catch-up. A lost shared dump starts everything over the
same way (each replica side's position decides).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from bridge.config import PrimaryConfig, backoff_s
from bridge.errors import BridgeError, ConfigError, Fenced, SourceConnectionLost, TransportError
from bridge.model import Chunk, Transaction
from bridge.node.fanship import FanShipLoop
from bridge.node.member import CATCHING_UP, DOWN, FENCED, REFUSED, STREAMING, Member
from bridge.node.primary import ACK_REFRESH_S, PrimaryNode
from bridge.node.reporting import routed
from bridge.node.shipping import event_of
from bridge.wire.frame import FrameKind

log = logging.getLogger(__name__)
MEMBER_QUEUE_BYTES = 64 << 20  # frames a member may have waiting in memory before it is detached
PARKED_POLL_S = 0.001  # a catch-up ahead of the shared stream looks again this often


class OnePerServer(ConfigError):
    """Two replica sides of one fan-out apply into the same replica server."""


class FanOutNode(FanShipLoop, PrimaryNode):
    def __init__(self, cfg: PrimaryConfig) -> None:
        super().__init__(cfg)
        self.members = [self.member] + [Member(address, cfg, self.tls, self._stop) for address in cfg.replicas[1:]]
        for index, member in enumerate(self.members):
            member.index, member.check = index, self._one_per_server
        self.acks.quorum = cfg.semi_sync_quorum
        self._lock = threading.Lock()  # the shared stream's placing and position vs. a catch-up's hand-back
        self._threads: list[threading.Thread] = []
        self.shared_mode = ""  # the shared dump's apply mode (the leader's): a member of another never rejoins

    # -- the shared stream -------------------------------------------------------------

    def _open_session(self) -> None:
        if self.reader is None:
            self.connect()  # each member's link is looked after in ``step``

    def _recover(self, exc: TransportError | SourceConnectionLost) -> None:
        """What reaches here is the shared dump lost or no member to lead: start over,
        each replica side's position deciding (a member's link failure detaches only it)."""
        self.disconnect()

    def connect(self) -> None:
        """The first member whose replica side answers leads (the shared dump starts at its
        position); every other one catches up from its own."""
        error: BridgeError | None = TransportError("no replica side to feed: each is fenced off or refused")
        for member in self.members:
            if member.state in (FENCED, REFUSED):
                continue  # out of this fan-out for good
            self.member = member
            try:
                super().connect()
            except TransportError as exc:  # this replica side does not answer: the next one may lead
                member.forget()
                error = exc
                continue
            member.state = STREAMING
            self.position, self.shared_mode = None, member.apply_mode
            for other in self.members:
                if other is not member and other.state not in (FENCED, REFUSED):
                    self._detach(other, "joins from its own position")
            return
        self.member = self.members[0]
        raise error

    def step(self) -> Transaction | Chunk | None:
        self._report_progress()
        now = time.monotonic()
        refresh = now >= self._ack_refresh_at
        if refresh:
            self._ack_refresh_at = now + ACK_REFRESH_S
        for member in self.members:
            if member.state == STREAMING:
                self._look_after(member, now, refresh)
        reader = self.reader
        if self.acks:
            self.acks.wait(reader, self._counted())
        if self.shared_mode == "binlog" and not self.assembler.in_transaction and self._lane_everywhere(reader):
            return None
        if self.shared_mode == "binlog" and not self.assembler.in_transaction and \
                not any(m.parked for m in self.members) and self._run_everywhere(reader):
            if self.semi_sync is not None:
                self.acks.note(reader, self._counted())
            return None
        item = self._read(reader)
        if item is not None:
            self._place_everywhere(item, reader)
        if self.semi_sync is not None and not self.assembler.in_transaction:
            self.acks.note(reader, self._counted())
        return item

    def _look_after(self, member: Member, now: float, refresh: bool) -> None:
        """A streaming member between transactions: its link, its queue, how far behind it is."""
        try:
            member.link.raise_if_down()
            member.link.say_alive()
            if refresh and member.producer.backlog_frames:  # all acknowledged: nothing to learn, no answer to ask
                member.producer.acknowledge(member.remote.last_ack())
            member.drain()
        except TransportError as exc:
            self._detach(member, str(exc))
            return
        if not member.queue:
            return
        timeout = self.cfg.backpressure_timeout_s
        if member.queued_bytes > MEMBER_QUEUE_BYTES:
            self._detach(member, f"{member.queued_bytes} bytes wait for its ring")
        elif timeout > 0 and now - member.queued_since > timeout:
            self._detach(member, f"its ring has been full for {timeout:g}s ({len(member.queue)} frames wait)")

    def _counted(self) -> tuple[Member | None, ...]:
        """The members an ACK may count on now: streaming, nothing queued."""
        return tuple(m if m.state == STREAMING and not m.queue else None for m in self.members)

    def _place_everywhere(self, item: Transaction | Chunk, reader) -> None:
        """One transaction (or chunk), framed once per binlog format a member was sent
        last, offered to every streaming member; then, at a transaction's end, where the
        shared stream stands and the hand-back of a catch-up that stands there too."""
        confirm = self.acks.confirm and reader.ack_wanted
        read_ns = time.time_ns()
        fresh = isinstance(item, Transaction) or item.index == 0
        framed: dict[bytes, bytes] = {}
        with self._lock:
            for member in self.members:
                if member.state != STREAMING:
                    continue
                fmt = event_of(reader.format) if fresh and event_of(reader.format) != \
                    event_of(member.format_sent) else b""
                payload = framed.get(fmt)
                if payload is None:
                    payload = framed[fmt] = self._frame(dataclasses.replace(item, format_event=fmt)
                                                        if fmt else item, read_ns)
                if fmt:
                    member.format_sent = reader.format
                try:
                    member.offer(FrameKind.CHUNK if isinstance(item, Chunk) else FrameKind.TXN, payload, item.gtid,
                                 confirm)
                except TransportError as exc:
                    self._detach(member, str(exc))
            self.last_gtid = item.gtid
            if isinstance(item, Transaction) or item.last:
                self._passed(reader)
        self._count_shipped(item, read_ns)

    def _passed(self, reader) -> None:
        """Under the lock, at a transaction's end: where the shared stream stands, and the
        hand-back of a catch-up that stands there too."""
        self.position = (reader.log_file, reader.commit_pos)
        for member in self.members:
            catch_up = member.catch_up
            if member.state == CATCHING_UP and catch_up is not None and catch_up.position == self.position and \
                    member.apply_mode == self.shared_mode:
                self._hand_back(member)

    # -- detach, catch up, hand back -----------------------------------------------------

    def _detach(self, member: Member, why: str) -> None:
        """Out of the shared stream; a catch-up feeds it from its replica side's position."""
        if member.state == STREAMING:
            log.warning("replica %s leaves the shared stream (%s); it catches up on its own", member.name, why)
        member.forget()
        member.state = CATCHING_UP
        cfg = dataclasses.replace(self.cfg, replica=member.address, replicas=(member.address,), transports=(),
                                  transport=member.transport,
                                  server_id=self.cfg.server_id + 1 + member.index, semi_sync="off",
                                  semi_sync_quorum=1, metrics=None, heartbeat_row_s=0.0)
        node = PrimaryNode(cfg, member=member, writer=self.writer, on_transaction=self._arrived)
        member.catch_up = node
        thread = threading.Thread(target=self._catch_up, args=(member, node), daemon=True,
                                  name=f"catch-up-{member.index}")
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _one_per_server(self, member: Member) -> None:
        """Refused: a second replica side applying into a replica server another member
        applies into (the same transactions would apply there twice)."""
        for other in self.members:
            if other is not member and member.server and other.server == member.server and \
                    other.state not in (FENCED, REFUSED):
                raise OnePerServer(f"replica sides {other.name} and {member.name} both apply into the replica "
                                   f"server {member.server}: one fan-out feeds each replica server once; "
                                   "drop one --replica")

    def _catch_up(self, member: Member, node: PrimaryNode) -> None:
        """A member's own dump until it is handed back (or this side stops)."""
        attempt = 0
        try:
            while not self._stop.is_set() and not node._stop.is_set():
                try:
                    node.stream()
                except (Fenced, OnePerServer) as exc:
                    log.error("replica %s: %s; it stays out of this fan-out", member.name, exc)
                    member.state = FENCED if isinstance(exc, Fenced) else REFUSED
                    return
                except BridgeError as exc:
                    attempt += 1
                    member.state = DOWN if member.remote is None else member.state
                    delay = backoff_s(attempt, self.cfg.reconnect_backoff_s, self.cfg.reconnect_backoff_max_s)
                    log.warning("replica %s: catching up failed (%s); again in %.1fs", member.name, exc, delay)
                    node.disconnect()
                    if self._stop.wait(delay):
                        return
                    if member.state == DOWN:
                        member.state = CATCHING_UP
        finally:
            reader, node.reader = node.reader, None  # the member's link and ring stay (handed back)
            if reader is not None:
                reader.close()
            if self._stop.is_set() and member.state != STREAMING:
                node.disconnect()

    def _arrived(self, node: PrimaryNode) -> None:
        """A catch-up shipped a whole transaction: handed back where the shared stream
        stands at the same place; waits where it is ahead."""
        member = node.member
        try:
            while not self._stop.is_set():
                with self._lock:
                    if member.state == STREAMING:
                        return  # the shared stream took it back at this position
                    shared = self.position
                    if member.apply_mode != self.shared_mode:
                        return  # never back (another apply mode than the shared dump's): it keeps its own
                    if shared is not None and node.position == shared:
                        self._hand_back(member)
                        return
                    if shared is not None and node.position < shared:
                        return  # behind: read on
                    member.parked = True  # ahead: the shared stream steps one transaction at a time to here
                member.link.say_alive()
                time.sleep(PARKED_POLL_S)
        finally:
            member.parked = False

    def _hand_back(self, member: Member) -> None:
        """Under the lock: the member streams from the shared stream from its next transaction."""
        node, member.catch_up = member.catch_up, None
        node.stop()
        member.state = STREAMING
        log.info("replica %s caught up at %s:%d; it rejoins the shared stream", member.name, *self.position)

    # -- stop ------------------------------------------------------------------------------

    def disconnect(self) -> None:
        for member in self.members:
            node = member.catch_up
            if node is not None:
                node.stop()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads = []
        for member in self.members:
            member.catch_up = None
            member.forget()
            if member.state not in (FENCED, REFUSED):
                member.state = DOWN
        super().disconnect()

    def status(self) -> dict:
        out = super().status()
        out["replicas"] = [self._member_status(m) for m in self.members]
        return out

    def _member_status(self, member: Member) -> dict:
        producer, catch_up = member.producer, member.catch_up
        return {"replica": member.name, "transport": member.transport, "state": member.state,
                "connected": member.remote is not None,
                "last_gtid": member.last_gtid, "apply_stopped": member.apply_stopped,
                "position": "%s:%d" % (catch_up.position if catch_up is not None and catch_up.position else
                                       self.position if member.state == STREAMING and self.position else ("", 0)),
                "behind_s": member.behind_s(),
                "ring_backlog_frames": producer.backlog_frames if producer else 0,
                "ring_backlog_bytes": producer.used if producer else 0,
                "queued_frames": len(member.queue), "queued_bytes": member.queued_bytes, **routed(member.remote)}
