"""Parallel apply: N replica connections, commits in source order, position exact.

A window of consecutive row-only transactions is cut by the writeset scheduler into
at most N consecutive segments. Each segment runs on its own connection as one
replica transaction; a segment that conflicts with an earlier one starts only after
that one commits. Segment k commits (with the position row: seq and GTID set through
its last transaction) only after segment k-1 committed, so the replica only ever
shows a prefix of the primary's history and the position row is exact at every
commit. DDL, chunked transactions and single-segment windows go through the first
connection alone: they are barriers. A MySQL replica that keeps the primary's GTIDs
(bridge.apply.applier, ``keeps_gtids``) commits one transaction per GTID in order, so
there every window is applied serially.

If a segment fails (a lock wait on a later segment's row that the writesets did not
predict, a deadlock, or any other error), the segments after it roll back
(they cannot have committed) and the uncommitted rest of the window is applied again
one segment at a time on the first connection: a real error repeats there and is
raised with its context; a lock conflict there is retried a few times.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bridge.apply import scheduler
from bridge.apply.applier import Applier, Position
from bridge.config import MysqlUrl
from bridge.errors import ApplyError, LockConflict, TargetConnectionLost
from bridge.model import Chunk, GtidSet, Transaction

log = logging.getLogger(__name__)
LOCK_WAIT_TIMEOUT_S = 2  # a worker blocked by a later worker's lock gives up this soon
SERIAL_LOCK_RETRIES = 5


@dataclass
class ParallelStats:
    windows: int = 0
    parallel_windows: int = 0
    segments: int = 0
    conflicts: int = 0  # segments that waited for an earlier one to commit
    fallbacks: int = 0  # windows finished serially after a segment failed
    serial_windows: int = 0  # windows whose segments all chained: applied as one transaction
    busy_s: float = 0.0  # time segments spent executing and committing
    wall_s: float = 0.0  # time parallel windows took

    @property
    def effective_parallelism(self) -> float:
        return self.busy_s / self.wall_s if self.wall_s else 1.0


class _Window:
    """Commit turns of one window's segments."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.committed = -1  # index of the last committed segment
        self.failed_at: int | None = None
        self.error: BaseException | None = None
        self.busy_s = 0.0

    def wait_until(self, predicate) -> None:
        with self.cond:
            self.cond.wait_for(predicate)

    def aborted_before(self, index: int) -> bool:
        return self.failed_at is not None and self.failed_at < index

    def fail(self, index: int, exc: BaseException) -> None:
        with self.cond:
            if self.failed_at is None or index < self.failed_at:
                self.failed_at, self.error = index, exc
            self.cond.notify_all()

    def commit_done(self, index: int, busy_s: float) -> None:
        with self.cond:
            self.committed = index
            self.busy_s += busy_s
            self.cond.notify_all()


class ParallelApplier:
    """The Applier interface over ``workers`` connections (the first one is also the
    serial applier for barriers)."""

    def __init__(self, url: MysqlUrl, channel: str = "default", workers: int = 2, mode: str = "sql") -> None:
        if workers < 2:
            raise ValueError("ParallelApplier needs at least 2 workers; use Applier")
        self.url, self.channel, self.workers = url, channel, workers
        self.main = Applier(url, channel, lock_wait_timeout_s=LOCK_WAIT_TIMEOUT_S, mode=mode)
        self.others = self._workers()
        self.stats = ParallelStats()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="apply-worker")

    # --- the Applier interface ---------------------------------------------

    @property
    def position(self) -> Position:
        return self.main.position

    @property
    def has_position(self) -> bool:
        return self.main.has_position

    @property
    def format(self):
        return self.main.format

    @property
    def server(self):
        return self.main.server

    @property
    def mode(self) -> str:
        return self.main.mode

    @property
    def conn(self):
        return self.main.conn

    @property
    def rules(self):
        return self.main.rules

    @rules.setter
    def rules(self, rules) -> None:
        self.main.rules = rules

    def set_mode(self, mode: str, same_flavor: bool, primary_collations: dict[int, str] | None = None) -> None:
        for applier in (self.main, *self.others):
            applier.set_mode(mode, same_flavor, primary_collations)

    def preflight(self, mode: str) -> None:
        self.main.preflight(mode)

    def format_for(self, item):
        return self.main.format_for(item)

    def unique_keys(self, schema: str, table: str):
        return self.main.unique_keys(schema, table)

    def _workers(self) -> list[Applier]:
        others = [Applier(self.url, self.channel, lock_wait_timeout_s=LOCK_WAIT_TIMEOUT_S, mode=self.main.mode,
                          holds_channel=False) for _ in range(self.workers - 1)]
        for worker in others:
            worker.set_mode(self.main.mode, self.main.same_flavor)
        return others

    @property
    def in_transaction(self) -> bool:
        return self.main.in_transaction

    def init_position(self, gtid_set: GtidSet, explicit: bool) -> Position:
        return self.main.init_position(gtid_set, explicit)

    def next_epoch(self) -> int:
        return self.main.next_epoch()

    def reload_position(self) -> Position:
        return self.main.reload_position()

    def abort_open(self) -> None:
        self.main.abort_open()

    def apply(self, seq: int, txn: Transaction) -> None:
        if txn.is_barrier:
            self.main.apply(seq, txn)
        else:
            self.apply_group([(seq, txn)])

    def skip(self, seq: int, gtid: str, error: str, by: str, item=None) -> None:
        self.main.skip(seq, gtid, error, by, item)

    def record_stop(self, stopped: dict | None) -> None:
        self.main.record_stop(stopped)

    def use_account_statements(self, choice: str) -> bool:
        return self.main.use_account_statements(choice)

    @property
    def account_statements(self) -> dict:
        return self.main.account_statements

    def apply_chunk(self, seq: int, chunk: Chunk) -> None:
        self.main.apply_chunk(seq, chunk)

    def reconnect(self) -> Position:
        for worker in self.others:
            worker.close()
        self.others = []
        pos = self.main.reconnect()
        self.others = self._workers()
        return pos

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for applier in (self.main, *self.others):
            applier.close()

    # --- parallel windows --------------------------------------------------

    def apply_group(self, items: list[tuple[int, Transaction]]) -> None:
        items = self.main.unapplied(items)
        if not items:
            return  # already applied before a reconnect: exactly once
        self.stats.windows += 1
        if self.main.keeps_gtids:  # one GTID per replica transaction, committed in order: no segments
            self._apply_serially(items)
            return
        fmt = self.main.format_for(items[0][1])
        segments = scheduler.plan(items, self.workers, self.main.unique_keys, fmt.checksum_bytes if fmt else 0)
        if len(segments) == 1 or all(seg.waits_for == seg.index - 1 for seg in segments[1:]):
            # one segment, or a chain where each waits for the one before: nothing can run
            # at once, so one replica transaction (one commit) does it cheaper
            self.stats.serial_windows += len(segments) > 1
            self._apply_serially(items)
            return
        first = self.position.applied_seq + 1
        if items[0][0] != first or items[-1][0] - first + 1 != len(items):
            raise ApplyError(f"apply seq {items[0][0]}..{items[-1][0]}: expected seq {first}, consecutive")
        self._run_window(segments, fmt)

    def _run_window(self, segments: list[scheduler.Segment], fmt) -> None:
        start_position = self.position
        gtids, after = start_position.gtid_set, []
        for seg in segments:
            for _, txn in seg.items:
                gtids = gtids.add_text(txn.gtid)
            after.append(gtids)
        window, started = _Window(), time.perf_counter()
        appliers = [self.main, *self.others]
        futures = [self._pool.submit(self._run_segment, appliers[seg.index], seg, after[seg.index], window, fmt)
                   for seg in segments]
        for future in futures:
            future.result()  # _run_segment records its failures in the window instead of raising
        self.stats.parallel_windows += 1
        self.stats.segments += len(segments)
        self.stats.conflicts += scheduler.conflicts(segments)
        self.stats.busy_s += window.busy_s
        self.stats.wall_s += time.perf_counter() - started
        if window.committed >= 0:
            last = segments[window.committed]
            self.main.position, self.main.format = Position(last.last_seq, after[window.committed]), fmt
        if window.failed_at is None:
            return
        if isinstance(window.error, TargetConnectionLost):
            raise window.error  # the caller reconnects and retries the rest from the position row
        self.stats.fallbacks += 1
        log.info("parallel window seq %d..%d: segment %d failed (%s); applying the rest one segment at a time",
                 segments[0].first_seq, segments[-1].last_seq, window.failed_at, window.error)
        for seg in segments[window.failed_at:]:
            self._apply_serially(list(seg.items))

    def _run_segment(self, applier: Applier, seg: scheduler.Segment, gtids: GtidSet, window: _Window,
                     fmt) -> None:
        window.wait_until(lambda: window.committed >= seg.waits_for or window.aborted_before(seg.index))
        if window.aborted_before(seg.index):
            return
        started = time.perf_counter()
        context = f"apply seq {seg.first_seq}..{seg.last_seq} (segment {seg.index})"
        try:
            applier.execute_rows(context, [c for _, txn in seg.items for c in txn.changes], fmt)
            window.wait_until(lambda: window.committed == seg.index - 1 or window.aborted_before(seg.index))
            if window.aborted_before(seg.index):
                applier.rollback()
                return
            applier.commit_at(context, seg.last_seq, gtids, fmt)
        except BaseException as exc:  # recorded; the coordinator decides
            applier.rollback()
            window.fail(seg.index, exc)
            return
        window.commit_done(seg.index, time.perf_counter() - started)

    def _apply_serially(self, items: list[tuple[int, Transaction]]) -> None:
        for attempt in range(1, SERIAL_LOCK_RETRIES + 1):
            try:
                self.main.apply_group(items)
                return
            except LockConflict as exc:
                if attempt == SERIAL_LOCK_RETRIES:
                    raise
                log.warning("%s; retry %d/%d", exc, attempt, SERIAL_LOCK_RETRIES - 1)
