"""The clone, in order: refuse what cannot work before writing anything; open the
snapshot(s); create databases and tables; copy every table (the largest first,
``parallel`` at a time, throttled, with progress); create routines, views, triggers
and events; record the channel's start at the snapshot's GTID position, last, so a
clone that stopped half way leaves no channel to stream into it.

``rdma_bridge.clone_state`` on the replica says, per table, how far the copy got;
a clone that stopped (killed, an error) is found there by the next one, which refuses
until ``restart`` drops what the stopped one created (schemas that did not exist
before it) and starts over from a new snapshot.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pymysql

from bridge.apply.connection import apply_error
from bridge.apply import channel as channel_rows
from bridge.clone import rows as row_copy
from bridge.clone import schema
from bridge.clone.snapshot import Snapshot, open_snapshot
from bridge.config import MysqlUrl
from bridge.errors import ConfigError
from bridge.filter import EVERYTHING, Filter
from bridge.model import GtidSet
from bridge.sqlnames import CLONE_STATE, quote_name

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 2.0
SLOW_BATCH_S = 2.0  # a replica that needs longer than this for 1 MiB of rows is busy: pause as long


@dataclass
class CloneResult:
    gtid: GtidSet
    tables: int = 0
    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    per_table: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (rows, bytes)


class Throttle:
    """At most ``rows_per_s`` rows a second over all workers (0: no limit), and a pause
    after a slow batch (the replica is busy): shared by the workers."""

    def __init__(self, rows_per_s: float) -> None:
        self.rows_per_s = rows_per_s
        self._lock = threading.Lock()
        self._due = time.monotonic()

    def account(self, rows: int, batch_s: float) -> None:
        wait = batch_s if batch_s > SLOW_BATCH_S else 0.0
        if self.rows_per_s > 0:
            with self._lock:
                self._due = max(self._due, time.monotonic()) + rows / self.rows_per_s
                wait = max(wait, self._due - time.monotonic())
        if wait > 0:
            time.sleep(wait)


class Progress:
    """Rows, bytes, rate and ETA per table, at most every PROGRESS_EVERY_S, to ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._lock = threading.Lock()
        self._last = 0.0

    def table(self, shape: row_copy.TableShape, rows: int, nbytes: int, started: float, done: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if not done and now - self._last < PROGRESS_EVERY_S:
                return
            self._last = now
        elapsed = max(now - started, 1e-6)
        rate = rows / elapsed
        if done:
            self.say(f"{shape.name}: {rows:,} rows, {nbytes / 1e6:.1f} MB in {elapsed:.1f}s ({rate:,.0f} rows/s, "
                     f"{nbytes / 1e6 / elapsed:.1f} MB/s)")
            return
        left = max(shape.estimated_rows - rows, 0)
        eta = f", ~{left / rate:.0f}s left" if rate > 0 and shape.estimated_rows else ""
        self.say(f"{shape.name}: {rows:,} of ~{shape.estimated_rows:,} rows, {nbytes / 1e6:.1f} MB, "
                 f"{rate:,.0f} rows/s{eta}")


class Cloner:
    def __init__(self, source: MysqlUrl, target: MysqlUrl, channel: str = "default", schemas: tuple[str, ...] = (),
                 parallel: int = 1, max_rows_per_second: float = 0.0, say: Callable[[str], None] = log.info,
                 rules: Filter = EVERYTHING) -> None:
        """``schemas``: as many --include patterns of whole schemas, which must exist."""
        self.source, self.target, self.channel = source, target, channel
        self.schemas, self.parallel = tuple(schemas), max(1, parallel)
        self.rules = Filter(tuple(dict.fromkeys((*rules.include, *schemas))), rules.exclude, rules.renames) \
            if schemas else rules
        self.throttle, self.progress, self.say = Throttle(max_rows_per_second), Progress(say), say

    def run(self, restart: bool = False) -> CloneResult:
        started = time.monotonic()
        control = _target(self.target)
        try:
            self._refuse_existing(control, restart)
            snapshot = open_snapshot(self.source, self.parallel)
            try:
                result = self._clone(control, snapshot)
            finally:
                snapshot.close()
        finally:
            control.close()
        result.seconds = time.monotonic() - started
        return result

    def _clone(self, control: pymysql.Connection, snapshot: Snapshot) -> CloneResult:
        available, rules = schema.user_schemas(snapshot.conns[0]), self.rules
        missing = set(self.schemas) - set(available)
        if missing:
            raise ConfigError(f"clone: the primary {self.source} has no schema {', '.join(sorted(missing))}")
        schemas = [db for db in available if rules.keeps_schema(db)]
        plan = schema.read_schema(snapshot.conns[0], schemas, rules)
        if not plan.tables and not rules.everything:
            raise ConfigError(f"clone: no table of the primary {self.source} matches the filter ({rules.describe()})")
        schema.refuse_non_empty(control, plan, self.target)
        shapes = sorted((row_copy.table_shape(snapshot.conns[0], db, t, rules.target(db)) for db, t in plan.tables),
                        key=lambda s: -s.estimated_rows)
        _record_start(control, self.channel, plan, snapshot.gtid)
        renamed = "".join(f", {s} as {t}" for s, t in rules.renames)
        self.say(f"clone of {', '.join(schemas)}{renamed} at GTID {snapshot.gtid or '(empty binlog)'}: "
                 f"{len(plan.tables)} tables (~{sum(s.estimated_rows for s in shapes):,} rows), "
                 f"{len(plan.after_rows)} other objects{'' if rules.everything else f' ({rules.describe()})'}")
        schema.create_before_rows(control, plan, self.target)
        result = CloneResult(snapshot.gtid, tables=len(shapes))
        self._copy_all(snapshot, shapes, result)
        schema.create_after_rows(control, plan, self.target)
        _record_done(control, self.channel, snapshot.gtid, rules)
        return result

    def _refuse_existing(self, control: pymysql.Connection, restart: bool) -> None:
        position = channel_rows.load_position(control, self.channel)
        if position.recorded:
            raise ConfigError(f"clone: channel {self.channel!r} on replica {self.target} already has a position "
                              f"({position.gtid_set}): clone starts a new channel (--channel)")
        created = _stopped_clone(control, self.channel)
        if created and not restart:
            raise ConfigError(f"clone: an earlier clone of channel {self.channel!r} stopped before it finished "
                              f"(it created {', '.join(created)} on replica {self.target}); run clone again with "
                              "--restart to drop those and start over")
        for db in created:
            self.say(f"--restart: dropping {db}, created by the clone that stopped")
            _execute(control, f"DROP DATABASE IF EXISTS {quote_name(db)}", self.target)
        _execute(control, f"DELETE FROM {CLONE_STATE} WHERE channel=%s", self.target, (self.channel,))

    def _copy_all(self, snapshot: Snapshot, shapes: list[row_copy.TableShape], result: CloneResult) -> None:
        work: queue.Queue = queue.Queue()
        for shape in shapes:
            work.put(shape)
        errors: list[BaseException] = []
        threads = [threading.Thread(target=self._worker, args=(conn, work, result, errors), name=f"clone-{i}",
                                    daemon=True) for i, conn in enumerate(snapshot.conns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _worker(self, source: pymysql.Connection, work: queue.Queue, result: CloneResult, errors: list) -> None:
        target = _target(self.target)
        try:
            while not errors:
                try:
                    shape = work.get_nowait()
                except queue.Empty:
                    return
                rows, nbytes = self._copy_one(source, target, shape)
                with _RESULT_LOCK:
                    result.rows, result.bytes = result.rows + rows, result.bytes + nbytes
                    result.per_table[shape.name] = (rows, nbytes)
        except BaseException as exc:  # the first error stops every worker and is raised by the caller
            errors.append(exc)
        finally:
            target.close()

    def _copy_one(self, source, target, shape: row_copy.TableShape) -> tuple[int, int]:
        started, copied = time.monotonic(), [0, 0, time.monotonic()]

        def on_batch(rows: int, nbytes: int) -> None:
            now = time.monotonic()
            copied[0] += rows
            copied[1] += nbytes
            batch_s, copied[2] = now - copied[2], now
            _execute(target, f"UPDATE {CLONE_STATE} SET rows_copied=%s, bytes_copied=%s WHERE channel=%s AND "
                             "db=%s AND tbl=%s", self.target, (copied[0], copied[1], self.channel,
                                                                shape.into or shape.db, shape.table), commit=True)
            self.progress.table(shape, copied[0], copied[1], started)
            self.throttle.account(rows, batch_s)

        rows, nbytes = row_copy.copy_table(source, target, shape, on_batch)
        _execute(target, f"UPDATE {CLONE_STATE} SET copied=1 WHERE channel=%s AND db=%s AND tbl=%s", self.target,
                 (self.channel, shape.into or shape.db, shape.table), commit=True)
        self.progress.table(shape, rows, nbytes, started, done=True)
        return rows, nbytes


_RESULT_LOCK = threading.Lock()


def _target(url: MysqlUrl) -> pymysql.Connection:
    try:
        conn = pymysql.connect(**url.connect_args(), charset="utf8mb4", connect_timeout=10, autocommit=False)
        with conn.cursor() as cur:
            cur.execute(row_copy.TARGET_SESSION)
    except pymysql.MySQLError as exc:
        raise apply_error(f"clone: connect to replica {url}", exc) from exc
    return conn


def _execute(conn: pymysql.Connection, statement: str, url: MysqlUrl, args=None, commit: bool = True) -> None:
    try:
        with conn.cursor() as cur:
            cur.execute(statement, args)
        if commit:
            conn.commit()
    except pymysql.MySQLError as exc:
        conn.rollback()
        raise apply_error(f"clone: on replica {url}", exc) from exc


def _stopped_clone(conn: pymysql.Connection, channel: str) -> list[str]:
    """The schemas a clone of ``channel`` that did not finish had created."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT DISTINCT db FROM {CLONE_STATE} WHERE channel=%s AND finished=0 ORDER BY 1", (channel,))
        found = [row[0] for row in cur.fetchall()]
    conn.commit()
    return found


def _record_start(conn: pymysql.Connection, channel: str, plan: schema.SchemaPlan, gtid: GtidSet) -> None:
    """Every table of the clone in clone_state before the first one is created: a
    clone that stops from here on is found by the next one."""
    into = plan.rules.target  # the replica's names: what --restart drops
    rows = [(channel, into(db), t, str(gtid)) for db, t in plan.tables] or \
        [(channel, into(db), "", str(gtid)) for db in plan.databases]
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {CLONE_STATE} (channel, db, tbl, gtid_set) VALUES (%s, %s, %s, %s)", rows)
    conn.commit()


def _record_done(conn: pymysql.Connection, channel: str, gtid: GtidSet, rules: Filter) -> None:
    """The channel's start at the snapshot's position, its filter, and the clone marked
    finished, in one replica transaction: `start-primary` streams from exactly there."""
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {CLONE_STATE} SET finished=1 WHERE channel=%s", (channel,))
    if not rules.everything:
        channel_rows.save_filter(conn, channel, rules, commit=False)
    channel_rows.init_position(conn, channel, gtid)  # commits all three
