"""The relay's feed of the primary's transactions as they arrived whole (``Verbatim``
changes, bridge.source.verbatim): kept in order until the replica server holds them,
served to each dump from the first transaction its GTID position lacks, after the
ROTATE and FORMAT_DESCRIPTION a source opens a dump with (and again where the primary's
binlog file changes between two transactions)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from bridge.model import Chunk, Gtid, GtidSet, Transaction, Verbatim
from bridge.relay import events
from bridge.relay.server import DumpRequest, FeedError, FeedGone
from bridge.wire import binlog


class TransactionFeed:
    """``format_event``: the primary's FORMAT_DESCRIPTION (checksum included, as its
    binlog has it; b"": the first transaction's ``format_event`` brings it);
    ``server_id``: the primary's, for the events the relay makes; ``before``: the GTIDs
    of everything before the feed's first transaction (where the primary side's dump
    began). A dump from a position that lacks any of those is refused: serving it from
    here would skip them. ``restart`` begins the feed again at another position (a new
    session of the primary side): each open dump finds its place in it by what it has
    sent, and goes on without reconnecting, unless it stopped inside a transaction."""

    def __init__(self, format_event: bytes, server_id: int, before: GtidSet) -> None:
        self.format_event, self.server_id = format_event, server_id
        self.before = before  # grows with what ``forget`` drops
        self._items: deque[tuple[Transaction | Chunk, bytes]] = deque()  # each with the FORMAT_DESCRIPTION in force
        self._first = 0  # the index of _items[0] since the feed began
        self._changed = threading.Condition()
        self._closed = False
        self.generation = 0  # how many times the feed began again
        self.bytes = 0  # of the events kept
        self._streams: set[_Stream] = set()  # the dumps open
        self.on_received: Callable[[str], None] = lambda gtid: None  # a replica's semi-sync ACK, up to this GTID
        self.mid_file = False  # a dump starts as the primary's own does (Flavor.dump_starts_mid_file)

    def append(self, item: Transaction | Chunk) -> None:
        if not all(type(c) is Verbatim for c in item.changes):
            raise FeedError(f"relay: transaction {item.gtid} did not arrive verbatim (is the primary side's "
                            "apply mode relay?)")
        with self._changed:
            if item.format_event and item.format_event != self.format_event:  # the same bytes: the same object
                self.format_event = item.format_event
            elif not self.format_event:
                raise FeedError(f"relay: transaction {item.gtid} came before any FORMAT_DESCRIPTION")
            self._items.append((item, self.format_event))
            self.bytes += _size(item)
            self._changed.notify_all()

    def forget(self, held: GtidSet) -> int:
        """Drop the transactions at the front that ``held`` (the replica server's GTIDs)
        has; returns how many."""
        with self._changed:
            return self._drop(lambda item: _held(held, item[0]))

    def trim(self, limit_bytes: int) -> int:
        """Past ``limit_bytes``, drop the transactions at the front that every open dump
        has sent: a dump that needs them again later (the replica lost its relay log) is
        refused (``open``), and the primary side reads them again."""
        with self._changed:
            served = min((s.at for s in self._streams if s.generation == self.generation), default=self._first)
            return self._drop(lambda item: self.bytes > limit_bytes and self._first < served)

    def _drop(self, drops) -> int:
        dropped = 0
        while self._items and drops(self._items[0]):
            item = self._items.popleft()[0]
            self.bytes -= _size(item)
            if type(item) is Transaction or item.last:
                self.before = self.before.add(Gtid.parse(item.gtid))
            self._first += 1
            dropped += 1
        return dropped

    @property
    def kept(self) -> int:
        """Transactions (and chunks) kept."""
        return len(self._items)

    def restart(self, before: GtidSet) -> None:
        """Begin again after ``before`` (a new session re-reads the primary's binlog
        from there), every transaction kept dropped."""
        with self._changed:
            self._first += len(self._items)
            self._items.clear()
            self.bytes, self.before = 0, before
            self.generation += 1
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def open(self, request: DumpRequest) -> _Stream:
        with self._changed:
            stream = _Stream(self, request.gtids, request.checksum)
            stream.at, stream.catching_up = self._place(stream.sent), True
            self._streams.add(stream)
        return stream

    def _place(self, sent: GtidSet) -> int:
        """The index of the first transaction ``sent`` lacks; FeedError when it lacks
        one from before the feed. Under the lock."""
        if not sent.contains_all(self.before):
            missing = self.before.minus(sent) if self.before.mysql else self.before
            raise FeedError(f"relay: the replica's position ({sent or 'empty'}) lacks transactions the "
                            f"relay no longer keeps ({missing})")
        at = self._first
        while at - self._first < len(self._items) and _held(sent, self._items[at - self._first][0]):
            at += 1
        front = self._items[at - self._first][0] if at - self._first < len(self._items) else None
        if type(front) is Chunk and front.index > 0:  # its first chunks were served and dropped (``trim``)
            raise FeedError(f"relay: the replica's position ({sent or 'empty'}) lacks the start of transaction "
                            f"{front.gtid}, which the relay no longer keeps")
        return at

    def _item(self, stream: _Stream, timeout_s: float) -> tuple[Transaction | Chunk, bytes] | None:
        with self._changed:
            if stream.generation != self.generation:  # the feed began again: the dump finds its place
                if stream.inside:
                    raise FeedGone("relay: the primary side's session changed inside a transaction")
                stream.at, stream.generation = self._place(stream.sent), self.generation
                stream.catching_up = True  # what the new session brings may still be what it sent
            if stream.at < self._first:
                raise FeedError(f"relay: the transactions after position {stream.at} are no longer kept")
            if stream.at - self._first >= len(self._items) and timeout_s > 0:
                self._changed.wait(timeout_s)
            if self._closed:
                raise FeedGone("relay: the feed closed")
            if stream.generation == self.generation and stream.at - self._first < len(self._items):
                return self._items[stream.at - self._first]
            return None


def _held(gtids: GtidSet, item: Transaction | Chunk) -> bool:
    return bool(gtids) and gtids.contains(Gtid.parse(item.gtid))


def _size(item: Transaction | Chunk) -> int:
    return sum(len(c.data) for c in item.changes)


class _Stream:
    """One dump's place in the feed: ``at`` its index, ``sent`` the GTIDs the replica has
    (asked with, and sent since)."""

    def __init__(self, feed: TransactionFeed, sent: GtidSet, checksum: bool) -> None:
        self.feed, self.sent, self.checksum = feed, sent, checksum
        self.at, self.generation = 0, feed.generation
        self.inside = False  # some chunks of a transaction sent, not its last
        self.catching_up = False  # since the feed began again: skip what it sent, up to the first it lacks
        self.file: str | None = None
        self.format = b""
        self._pending: deque[bytes] = deque()
        self._ends: str | None = None  # the transaction the last event in ``_pending`` ends
        self.ack_gtid: str | None = None

    def received(self, gtid: str) -> None:
        self.feed.on_received(gtid)

    def next(self, timeout_s: float) -> bytes | None:
        self.ack_gtid = None
        while not self._pending:
            taken = self.feed._item(self, timeout_s)
            if taken is None:
                return None
            item, format_event = taken
            self.at += 1
            if self.catching_up:  # the feed began again behind this dump: what it sent is never sent twice
                if not self.inside and _held(self.sent, item):
                    continue
                self.catching_up = False  # the first it lacks: everything after it is newer
            for change in item.changes:
                if change.file != self.file or format_event is not self.format:
                    # a dump's start, the primary's next binlog file, or its format changed: as the
                    # primary's own dump starts (Flavor.dump_starts_mid_file)
                    self.file, self.format = change.file, format_event
                    at = binlog.next_position(change.data) - binlog.event_size(change.data, 0) \
                        if self.feed.mid_file else 4
                    self._pending.append(events.rotate(change.file, at, self.feed.server_id, self.checksum))
                    self._pending.append(events.with_next_position(format_event, 0) if self.feed.mid_file
                                         else format_event)
                self._pending.append(change.data)  # the dump packs them in one call
            self.inside = type(item) is Chunk and not item.last
            if not self.inside:
                self.sent = self.sent.add(Gtid.parse(item.gtid))
            self._ends = None if self.inside else item.gtid
        event = self._pending.popleft()
        if not self._pending:
            self.ack_gtid = self._ends
        return event

    def close(self) -> None:
        self._pending.clear()
        with self.feed._changed:
            self.feed._streams.discard(self)

