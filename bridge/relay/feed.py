"""The relay's feed of the primary's transactions as they arrived whole (``Verbatim``
changes, bridge.source.verbatim): kept in order until the replica server holds them,
served to each dump from the first transaction its GTID position lacks, after the
ROTATE and FORMAT_DESCRIPTION a source opens a dump with (and again where the primary's
binlog file changes between two transactions)."""

from __future__ import annotations

import threading
from collections import deque

from bridge.model import Chunk, Gtid, GtidSet, Transaction, Verbatim
from bridge.relay import events
from bridge.relay.server import DumpRequest, FeedError
from bridge.wire.binlog import split_events


class TransactionFeed:
    """``format_event``: the primary's FORMAT_DESCRIPTION (checksum included, as its
    binlog has it); ``server_id``: the primary's, for the events the relay makes;
    ``before``: the GTIDs of everything before the feed's first transaction (where the
    primary side's dump began). A dump from a position that lacks any of those is
    refused: serving it from here would skip them."""

    def __init__(self, format_event: bytes, server_id: int, before: GtidSet) -> None:
        self.format_event, self.server_id = format_event, server_id
        self.before = before  # grows with what ``forget`` drops
        self._items: deque[Transaction | Chunk] = deque()
        self._first = 0  # the index of _items[0] since the feed began
        self._changed = threading.Condition()
        self._closed = False

    def append(self, item: Transaction | Chunk) -> None:
        if not all(type(c) is Verbatim for c in item.changes):
            raise FeedError(f"relay: transaction {item.gtid} did not arrive verbatim (is the primary side's "
                            "apply mode relay?)")
        with self._changed:
            self._items.append(item)
            self._changed.notify_all()

    def forget(self, held: GtidSet) -> int:
        """Drop the transactions at the front that ``held`` (the replica server's GTIDs)
        has; returns how many."""
        dropped = 0
        with self._changed:
            while self._items and _held(held, self._items[0]):
                item = self._items.popleft()
                self.before = self.before.add(Gtid.parse(item.gtid))
                self._first += 1
                dropped += 1
        return dropped

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def open(self, request: DumpRequest) -> _Stream:
        with self._changed:
            if not request.gtids.contains_all(self.before):
                missing = self.before.minus(request.gtids) if self.before.mysql else self.before
                raise FeedError(f"relay: the replica's position ({request.gtids or 'empty'}) lacks transactions the "
                                f"relay no longer keeps ({missing})")
            at = self._first
            while at - self._first < len(self._items) and _held(request.gtids, self._items[at - self._first]):
                at += 1
        return _Stream(self, at, request.checksum)

    def _item(self, at: int, timeout_s: float) -> Transaction | Chunk | None:
        with self._changed:
            if at < self._first:
                raise FeedError(f"relay: the transactions after position {at} are no longer kept")
            if at - self._first >= len(self._items):
                self._changed.wait(timeout_s)
            if self._closed:
                raise FeedError("relay: the feed closed")
            if at - self._first < len(self._items):
                return self._items[at - self._first]
            return None


def _held(gtids: GtidSet, item: Transaction | Chunk) -> bool:
    return bool(gtids) and gtids.contains(Gtid.parse(item.gtid))


class _Stream:
    """One dump's place in the feed."""

    def __init__(self, feed: TransactionFeed, at: int, checksum: bool) -> None:
        self.feed, self.at, self.checksum = feed, at, checksum
        self.file: str | None = None
        self._pending: deque[bytes] = deque()

    def next(self, timeout_s: float) -> bytes | None:
        if not self._pending:
            item = self.feed._item(self.at, timeout_s)
            if item is None:
                return None
            self.at += 1
            for change in item.changes:
                if change.file != self.file:  # a dump's start, or the primary's next binlog file
                    self.file = change.file
                    self._pending.append(events.rotate(change.file, 4, self.feed.server_id, self.checksum))
                    self._pending.append(_unpositioned(self.feed.format_event))
                self._pending.extend(split_events(change.data))
        return self._pending.popleft()

    def close(self) -> None:
        self._pending.clear()


def _unpositioned(format_event: bytes) -> bytes:
    """The FORMAT_DESCRIPTION as a source sends it after a dump's ROTATE: its next
    position 0 (the replica does not move its position for it). Its checksum covers the
    header: it is made again where the event has one."""
    return events.with_next_position(format_event, 0)
