"""The replica side's apply loop: ``step`` applies the next unit of work (a group of
row-only transactions, a DDL, a chunk), through the apply lane where it can
(bridge.apply.lane: the common case in compiled calls), else through the general
path here: take and decode frames, group them (bridge.node.grouping), apply them,
record stages and counters, and on failure retry, reconnect or stop applying at the
transaction at fault. ReplicaNode (bridge.node.replica) owns the state it works on:
the session, the applier, the counters, the halt.
"""

from __future__ import annotations

import logging
import time

from bridge.apply.contents import check_payload, heartbeat_written_us, rows_and_events
from bridge.config import backoff_s
from bridge.errors import ApplyError, CorruptFrame, RemoteProtocolError, TargetConnectionLost
from bridge.model import HEARTBEAT_TABLE, RowEvents
from bridge.node.grouping import GroupBounds, joins
from bridge.node.halt import Halt
from bridge.node.scope import Picked
from bridge.wire.codec import decode_chunk, decode_transaction
from bridge.wire.frame import FrameKind

log = logging.getLogger("bridge.node.replica")
LANE_WAIT_MS = 1000  # an idle apply lane sleeps this long at most (a stop or a new session interrupts it)
LANE_BUSY_MS = 50  # a lane that applied something returns within this long (counters, progress, status)


class ApplyLoop:
    """The apply loop's methods, mixed into ReplicaNode."""

    def _record_stages(self, work: list[Picked]) -> None:
        """Stage times of the transactions a commit just made visible."""
        now = time.time_ns()
        for frame, item, picked in work:
            if frame.kind != FrameKind.TXN:
                continue
            self.stages.record("apply", (now - picked) / 1000)
            read_ns, ship_ns = item.stamps or (0, 0)
            if ship_ns:
                self.stages.record("deliver", (picked - ship_ns) / 1000)
                self.stages.record("bridge", (now - read_ns) / 1000)
            if len(item.changes) == 1:  # a heartbeat is one row; larger transactions are not looked into
                self._heartbeat_lag(item.changes[0], now)

    def _heartbeat_lag(self, change, now_ns: int) -> None:
        written_us = heartbeat_written_us(change, self.applier.format)
        if written_us is not None:
            lag_us = now_ns / 1000 - written_us
            self.stages.record("lag", lag_us)
            self.last_lag_s = lag_us / 1e6
            self._heartbeat_written_us = written_us

    def step(self) -> bool:
        """Apply the next unit of work; False when there was nothing to do. A unit is
        one DDL transaction, one chunk, or a group of the consecutive row-only
        transactions already in the ring (applied as one replica transaction)."""
        if self._session_waiting.is_set() or self.halt is not None:
            return False  # a new session resets the ring: let it in first
        with self._lock:
            if self.current is None or self._reached_until():
                return False
            if self._lane is not None and not self._pending and self._stash is None and self._lane_step():
                return True
            try:
                work = self._pending or self._take()
            except (CorruptFrame, RemoteProtocolError) as exc:
                self.counts.corrupt_frames += isinstance(exc, CorruptFrame)
                self._end_session(f"bad frame: {exc}")
                return False
            if not work:
                return False
            try:
                self._apply(work)
            except ApplyError as exc:
                self._apply_failed(work, exc)
                return False
            self._pending = []
            self.consumer.acknowledge(work[-1].frame.seq)
            self._reached_until()
            return True

    def _lane_step(self) -> bool:
        """The common case in compiled calls (bridge.apply.lane), for up to LANE_WAIT_MS,
        sleeping on the doorbell while the ring is empty (LANE_BUSY_MS once it applied a
        group; the host's ``interrupt`` cuts its sleep short): True when it applied anything."""
        cfg, session = self.cfg, self.current
        if session.apply_mode != "binlog" or self._until is not None or not self.scope.everything:
            return False
        runner = self._lane
        doorbell = self.host.doorbell_fd if self.host.doorbell_fd is not None else -1
        receiver = self.host.lane_receiver(session.consumer.region)  # tcp: the lane reads the data connection itself
        sleeper = self.host.lane_sleeper()  # rdma: the lane sleeps on the session's queue pair
        if not runner.run(session.consumer, cfg.group_max_txns, cfg.group_max_rows, cfg.group_max_bytes, doorbell,
                          LANE_WAIT_MS, receiver, sleeper, int(cfg.spin_s * 1e6), LANE_BUSY_MS,
                          self.host.lane_interrupt_fd):
            return False
        done = runner.last
        self.counts.lane_groups_applied(done.groups, done.txns, done.beats, done.events, done.largest)
        self.last_gtid_applied = done.last_gtid
        done.record_stages(self.stages)
        if done.heartbeat is not None:
            self._heartbeat_lag(RowEvents(done.heartbeat, (HEARTBEAT_TABLE,), 1), done.heartbeat_ns)
        return True

    def _reached_until(self) -> bool:
        """--until-gtid: once the replica holds that set, applying stops (not an error)."""
        if self._until is None or not self.applier.position.gtid_set.contains_all(self._until):
            return False
        pos = self.applier.position
        self._stop_at(Halt(pos.applied_seq, self.last_gtid_applied or str(pos.gtid_set),
                           f"reached --until-gtid {self._until}", 0, time.time(), skippable=False, until=True))
        self._until = None  # resume applies on
        log.info("applying stopped at seq %d: the replica holds --until-gtid %s (%s)", pos.applied_seq,
                 self.halt.error.removeprefix("reached --until-gtid "), self.halt.hint())
        self._tell_primary(self.halt.message())
        return True

    def _due(self, entry: Picked) -> bool:
        """--delay: due that long after the primary side read its commit (a chunk, whose
        commit is not read yet: after it was picked up here, which is later still)."""
        frame, item, picked_ns = entry
        read_ns = item.stamps[0] if frame.kind == FrameKind.TXN and item.stamps else picked_ns
        due = read_ns / 1e9 + self.cfg.delay_s
        if time.time() >= due:
            return True
        self._not_before = due
        return False

    def _apply_failed(self, work: list[Picked], exc: ApplyError) -> None:
        """A lost replica connection is retried; any other error stops applying at the
        transaction at fault (a group is applied again one transaction at a time to
        find it, the ones before it committed), the process and the session kept."""
        if isinstance(exc, TargetConnectionLost):
            self._target_lost(work, exc)
            return
        if len(work) > 1:
            for index, entry in enumerate(work):
                try:
                    self._apply([entry])
                except ApplyError as one:
                    if index:
                        self.consumer.acknowledge(work[index - 1].frame.seq)
                    if isinstance(one, TargetConnectionLost):
                        self._target_lost(work[index:], one)
                    else:
                        self._halt(work[index:], one)
                    return
            # applied one by one: the group's error did not come back
            self._pending = []
            self.consumer.acknowledge(work[-1].frame.seq)
            return
        self._halt(work, exc)

    def _target_lost(self, work: list[Picked], exc: TargetConnectionLost) -> None:
        chunked = work[0].frame.kind == FrameKind.CHUNK
        self._pending = [] if chunked else work  # rolled back by the server: retry it
        self._reconnect_target(exc)
        if chunked:  # its earlier chunks are gone from the ring: resend from the binlog
            self._end_session(f"replica connection lost inside chunked transaction at seq {work[0].frame.seq}",
                              "chunk_lost")

    def _halt(self, work: list[Picked], exc: ApplyError) -> None:
        """Stop applying at ``work[0]``; it is retried first by resume."""
        frame, item, _ = work[0]
        chunked = frame.kind == FrameKind.CHUNK
        self.applier.abort_open()
        self._pending = [] if chunked else work  # a chunked transaction comes again from the binlog
        self._stop_at(Halt(frame.seq, item.gtid, str(exc), exc.code, time.time(), skippable=not chunked))
        log.error("applying stopped at seq %d (%s): %s; the replica side keeps running: %s", frame.seq, item.gtid,
                  exc, self.halt.hint())
        self._tell_primary(self.halt.message())
        if chunked:
            self._end_session(f"applying stopped inside chunked transaction at seq {frame.seq}", "chunk_lost")

    def _take(self) -> list[Picked]:
        """Picked transactions, grouping row-only transactions up to the configured bounds
        (transactions, rows, payload bytes). Only frames already in the ring join: a
        group never waits for more."""
        work, rows, size = [], 0, 0
        cfg, workers = self.cfg, self.cfg.workers
        # keeping the primary's GTIDs (MySQL), a group is applied one transaction at a time anyway:
        # with the apply lane here, the general path takes one, and what follows may be the lane's
        one = self._lane is not None and self.applier.keeps_gtids
        bounds = GroupBounds(1 if one else cfg.group_max_txns * workers, cfg.group_max_rows * workers,
                             cfg.group_max_bytes * workers)
        held = self.applier.position.gtid_set if self._until is not None else None
        while bounds.room(len(work), rows, size):
            entry, self._stash = self._stash or self._next_decoded(), None
            if entry is None:
                break
            if cfg.delay_s and not self._due(entry):
                self._stash = entry  # taken again once due
                break
            if not joins(entry, work):
                if work:
                    self._stash = entry  # a barrier: it goes alone, next
                    break
                return [entry]
            work.append(entry)
            rows += entry.item.row_count
            size += len(entry.frame.payload)
            if held is not None:  # --until-gtid: a group ends where the set is reached
                held = held.add_text(entry.item.gtid)
                if held.contains_all(self._until):
                    break
        return work

    def _next_decoded(self) -> Picked | None:
        session = self.current
        frame = session.consumer.poll()
        if frame is None:
            return None
        if frame.kind == FrameKind.TXN:
            item = decode_transaction(frame.payload)
        elif frame.kind == FrameKind.CHUNK:
            item = decode_chunk(frame.payload)
        else:
            raise RemoteProtocolError(f"frame seq {frame.seq}: kind {frame.kind.name} is not expected in the ring")
        session.has_format = check_payload(frame.seq, item, session.apply_mode, session.has_format)
        return Picked(frame, item, time.time_ns())

    def _apply(self, work: list[Picked]) -> None:
        """Apply ``work``; a frame that cannot be applied here (its raw events with no
        format known, say) is an ApplyError too: applying stops, the process goes on."""
        try:
            self._apply_work(work)
        except RemoteProtocolError as exc:
            raise ApplyError(str(exc)) from exc

    def _apply_work(self, work: list[Picked]) -> None:
        if not self.scope.as_it_came(work):
            work = self.scope.work(work, self.applier)
        frame, item, _ = work[0]
        if frame.kind == FrameKind.CHUNK:
            self.applier.apply_chunk(frame.seq, item)
            self.counts.transactions_applied += item.last
        elif len(work) == 1 and item.is_barrier:
            self.applier.apply(frame.seq, item)
            self.counts.transactions_applied += 1
        else:
            self.applier.apply_group([(f.seq, txn) for f, txn, _ in work])
            beats = 0
            for entry in work:
                beats += entry.item.is_heartbeat
            counts = self.counts
            counts.transactions_applied += len(work) - beats
            counts.heartbeats_applied += beats
            counts.groups_applied += 1
            counts.largest_group = max(counts.largest_group, len(work))
        self.last_gtid_applied = work[-1].item.gtid
        for _, item, _ in work:
            rows, events = rows_and_events(item.changes)
            self.counts.rows_applied += rows
            self.counts.row_events_applied += events
        self._record_stages(work)

    def _reconnect_target(self, cause: TargetConnectionLost) -> None:
        """Bounded retries, the attempt count in the log; gives up by raising."""
        for attempt in range(1, self.cfg.reconnect_attempts + 1):
            delay = backoff_s(attempt, self.cfg.reconnect_backoff_s, self.cfg.reconnect_backoff_max_s)
            log.warning("%s; reconnect attempt %d/%d in %.1fs", cause, attempt, self.cfg.reconnect_attempts, delay)
            if self._stop.wait(delay):
                return
            try:
                pos = self.applier.reconnect()
            except TargetConnectionLost as exc:
                cause = exc
                continue
            self.counts.reconnects += 1
            log.info("replica %s back at seq %d (%s)", self.cfg.target, pos.applied_seq, pos.gtid_set)
            return
        raise cause
