"""The clone, in order: refuse what cannot work before writing anything; open the
snapshot(s); create databases and tables; copy every table (the largest first,
``parallel`` at a time, throttled, with progress); create routines, views, triggers
and events; record the channel's start at the snapshot's GTID position, last, so a
clone that stopped half way leaves no channel to stream into it.

``rdma_bridge.clone_state`` on the replica says, per table, how far the copy got
(bridge.clone.state); a clone that stopped (killed, an error) is found there by the
next one, which resumes it: the tables it copied stay as of its snapshot, the others
(and the routines, views, triggers and events) come from a new one, and the channel
starts at the earliest of those positions, the replica side leaving out each table's
changes until the stream passes that table's own. ``restart`` drops what the stopped
one created (schemas that did not exist before it) and starts over.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pymysql

from bridge.apply import channel as channel_rows
from bridge.apply.connection import apply_error
from bridge.clone import rows as row_copy
from bridge.clone import schema
from bridge.clone.snapshot import Snapshot, open_snapshot
from bridge.clone.state import CloneState, Entry, Key
from bridge.config import MysqlUrl
from bridge.errors import ConfigError
from bridge.filter import EVERYTHING, Filter
from bridge.model import GtidSet
from bridge.server import dbconn
from bridge.server.flavor import Flavor

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 2.0
SLOW_BATCH_S = 2.0  # a replica that needs longer than this for 1 MiB of rows is busy: pause as long


@dataclass
class CloneResult:
    gtid: GtidSet
    tables: int = 0  # copied by this run
    kept: int = 0  # copied by a stopped clone this one resumed
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
                 rules: Filter | None = None, defer_indexes: bool = False) -> None:
        """``schemas``: as many --include patterns of whole schemas, which must exist.
        ``rules`` None (and no ``schemas``): every table, or what a stopped clone that
        this one resumes copied."""
        self.source, self.target, self.channel = source, target, channel
        self.schemas, self.parallel = tuple(schemas), max(1, parallel)
        if schemas:
            rules = rules or EVERYTHING
            rules = Filter(tuple(dict.fromkeys((*rules.include, *schemas))), rules.exclude, rules.renames)
        self.given = rules
        self.rules = rules or EVERYTHING
        self.throttle, self.progress, self.say = Throttle(max_rows_per_second), Progress(say), say
        self.state: CloneState | None = None
        self.base: Filter | None = None  # adding tables to a channel that streams: the filter it has
        self.defer_indexes = defer_indexes  # secondary indexes built after each table's rows
        self.deferred: dict[tuple[str, str], list[str]] = {}

    def run(self, restart: bool = False) -> CloneResult:
        """A clone of the channel that stopped is resumed (``restart``: dropped, and
        started over). On a channel that streams already, the tables a wider filter
        adds are copied and the filter recorded (the replica side must be stopped)."""
        started = time.monotonic()
        control = _target(self.target)
        try:
            channel_rows.lock_channel(control, self.channel, self.target)  # no replica side applies meanwhile
            self.state = CloneState(control, self.channel, self.target)
            stopped = self._stopped(control, restart)
            snapshot = open_snapshot(self.source, self.parallel)
            try:
                result = self._clone(control, snapshot, stopped)
            finally:
                snapshot.close()
        finally:
            control.close()
        result.seconds = time.monotonic() - started
        return result

    def _clone(self, control: pymysql.Connection, snapshot: Snapshot, stopped: dict[Key, Entry]) -> CloneResult:
        available, rules, base = schema.user_schemas(snapshot.conns[0]), self.rules, self.base
        missing = set(self.schemas) - set(available)
        if missing:
            raise ConfigError(f"clone: the primary {self.source} has no schema {', '.join(sorted(missing))}")
        schemas = [db for db in available if rules.keeps_schema(db)]
        plan = schema.read_schema(snapshot.conns[0], schemas, rules)
        if Flavor.of(snapshot.conns[0]).kind != Flavor.of(control).kind:
            plan, left_out = plan.without_triggers()
            if left_out:  # they would fire for replicated rows, which native replication never lets happen
                self.say(f"{len(left_out)} triggers not copied ({', '.join(left_out[:5])}"
                         f"{' ...' if len(left_out) > 5 else ''}): the replica is of another flavor, so the channel "
                         "applies rows as SQL (sql apply mode), which cannot keep a trigger from firing for them")
        if base is not None:  # adding tables to a channel: only what it lacks
            plan = plan.only_added(base)
            if not plan.tables and not plan.after_rows:
                raise ConfigError(f"clone: channel {self.channel!r} replicates {base.describe()}; the filter "
                                  f"({rules.describe()}) adds no table of the primary {self.source}")
        elif not plan.tables and not rules.everything:
            raise ConfigError(f"clone: no table of the primary {self.source} matches the filter ({rules.describe()})")
        if not stopped:
            schema.refuse_non_empty(control, plan, self.target)
        into = rules.target
        kept = {key for key, entry in stopped.items() if key[1] and entry.copied}
        todo = [(db, t) for db, t in plan.tables if (into(db), t) not in kept]
        listed = set(plan.entries())
        gone = [key for key, entry in stopped.items() if key[1] and not entry.copied and key not in listed]
        self.state.begin(rules, snapshot.gtid, [key for key in plan.entries() if key not in kept], gone)
        shapes = sorted((row_copy.table_shape(snapshot.conns[0], db, t, into(db)) for db, t in todo),
                        key=lambda s: -s.estimated_rows)
        renamed = "".join(f", {s} as {t}" for s, t in rules.renames if s in plan.databases)
        what = f"tables added to channel {self.channel!r}" if base is not None else "clone"
        self.say(f"{what} of {', '.join(sorted({db for db, _ in plan.tables} | set(plan.databases)))}{renamed} at "
                 f"GTID {snapshot.gtid or '(empty binlog)'}: {len(todo)} tables (~"
                 f"{sum(s.estimated_rows for s in shapes):,} rows), {len(plan.after_rows)} other objects"
                 f"{'' if rules.everything else f' ({rules.describe()})'}"
                 + (f"; {len(kept)} tables kept as the stopped clone copied them" if stopped else ""))
        if stopped:  # what the stopped clone left half done (or the primary dropped since) goes
            schema.drop_listed(control, [*((into(db), t) for db, t in todo), *gone], self.target)
        self.deferred = schema.create_before_rows(control, plan, self.target, tables=set(todo),
                                                  defer_indexes=self.defer_indexes)
        result = CloneResult(snapshot.gtid, tables=len(shapes), kept=len(kept))
        self._copy_all(snapshot, shapes, result)
        if stopped:
            schema.drop_objects(control, plan, self.target)
        schema.create_after_rows(control, plan, self.target)
        result.gtid = self.state.finish(snapshot.gtid, new_channel=base is None)
        return result

    def _stopped(self, control: pymysql.Connection, restart: bool) -> dict[Key, Entry]:
        """What a clone of this channel that stopped left (its filter adopted), and, on
        a channel that streams already, the filter it has (``base``)."""
        position = channel_rows.load_position(control, self.channel)
        self.base = None
        if position.recorded:
            self.base = channel_rows.load_filter(control, self.channel, self.target) or EVERYTHING
        pending, stopped = self.state.pending(), self.state.unfinished()
        if stopped and restart:
            dropped = sorted({db for db, t in stopped if not t} or {f"{db}.{t}" for db, t in stopped})
            self.say(f"--restart: dropping what the clone that stopped created: {', '.join(dropped)}")
            schema.drop_listed(control, list(stopped), self.target)
            self.state.forget()
            stopped, pending = {}, None
        if stopped:
            if pending is not None and self.given is not None and self.given != pending:
                raise ConfigError(f"clone: the stopped clone of channel {self.channel!r} copies {pending.describe()}, "
                                  f"not {self.given.describe()}: run it again with the same --include/--exclude/"
                                  "--rename-schema (or none), or with --restart to drop what it copied and start over")
            self.rules = pending or self.rules
            done = sum(1 for (_, t), e in stopped.items() if t and e.copied)
            self.say(f"resuming the clone of channel {self.channel!r} that stopped: {done} of "
                     f"{sum(1 for _, t in stopped if t)} tables and views were copied; the others are copied again "
                     "from a new snapshot (--restart starts over instead)")
        if self.base is not None:
            self._refuse_adding(position.gtid_set, bool(stopped))
        return stopped

    def _refuse_adding(self, position: GtidSet, resuming: bool) -> None:
        """On a channel that streams: only tables added by a filter given for it, which
        keeps every replicated schema's name."""
        base, rules = self.base, self.rules
        if self.given is None and not resuming:
            raise ConfigError(f"clone: channel {self.channel!r} on replica {self.target} already has a position "
                              f"({position}): clone starts a new channel (--channel), or adds tables to this one "
                              "when given a wider --include/--exclude")
        renamed = [s for s, _ in (*base.renames, *rules.renames) if base.keeps_schema(s) and
                   base.target(s) != rules.target(s)]
        if renamed:
            raise ConfigError(f"clone: channel {self.channel!r} replicates {', '.join(renamed)} as "
                              f"{', '.join(base.target(s) for s in renamed)}: a rename cannot change for a schema "
                              "the channel replicates (clone a new channel)")

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
        key = (shape.into or shape.db, shape.table)

        def on_batch(rows: int, nbytes: int) -> None:
            now = time.monotonic()
            copied[0] += rows
            copied[1] += nbytes
            batch_s, copied[2] = now - copied[2], now
            self.state.progress(target, key, copied[0], copied[1])
            self.progress.table(shape, copied[0], copied[1], started)
            self.throttle.account(rows, batch_s)

        rows, nbytes = row_copy.copy_table(source, target, shape, on_batch)
        indexes = self.deferred.get((shape.db, shape.table))
        if indexes:
            built = time.monotonic()
            schema.add_indexes(target, shape.target, indexes, self.target)
            self.say(f"{shape.name}: {len(indexes)} secondary indexes built in {time.monotonic() - built:.1f}s")
        self.state.progress(target, key, rows, nbytes, done=True)
        self.progress.table(shape, rows, nbytes, started, done=True)
        return rows, nbytes


_RESULT_LOCK = threading.Lock()


def _target(url: MysqlUrl) -> pymysql.Connection:
    try:
        conn = dbconn.connect(url, autocommit=False)
        with conn.cursor() as cur:
            cur.execute(row_copy.TARGET_SESSION)
    except pymysql.MySQLError as exc:
        raise apply_error(f"clone: connect to replica {url}", exc) from exc
    return conn
