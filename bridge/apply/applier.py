"""Applier: replays transactions into the replica, exactly once, in order.

The channel's position (applied seq, executed GTID set) lives in
``rdma_bridge.bridge_meta`` and is updated in the same replica transaction as the
rows, so after any crash the replica says exactly what it holds. A whole
transaction goes to the server in one round trip (multi-statement), and every
UPDATE/DELETE must match exactly one row: anything else is divergence and raises.

DDL cannot share a transaction with the position row (it commits implicitly), so
it is applied as: mark ``pending_ddl_seq`` (commit) → DDL → position (commit). On
replay of a marked seq, "already exists / already gone" errors mean the DDL ran
before the crash, and are accepted: that makes DDL replay idempotent.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

import pymysql
from pymysql.constants import CLIENT

from bridge.apply import sql
from bridge.config import MysqlUrl
from bridge.errors import ApplyError, LockConflict, TargetConnectionLost
from bridge.model import Chunk, GtidSet, RowChange, Statement, Transaction
from bridge.sqlfiles import sql_statements

log = logging.getLogger(__name__)
SESSION_SETUP = ("SET SESSION time_zone='+00:00', sql_mode='STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,"
                 "NO_ENGINE_SUBSTITUTION', foreign_key_checks=0, autocommit=0")
# Errors that mean a replayed DDL already took effect before a crash.
DDL_ALREADY_DONE = {1007, 1008, 1050, 1051, 1054, 1060, 1061, 1091, 1146, 1176}
UNKNOWN_DATABASE = 1049
# Can't connect, server gone away, lost connection, server shutdown in progress, killed.
CONNECTION_LOST = {2003, 2006, 2013, 1053, 1927}
LOCK_CONFLICT = {1205, 1213}  # lock wait timeout, deadlock
BATCH_SQL_BYTES = 4 << 20
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True, slots=True)
class Position:
    applied_seq: int
    gtid_set: GtidSet
    pending_ddl_seq: int = 0
    recorded: bool = True  # False: the channel has no row yet


class Applier:
    """One replica connection. ``lock_wait_timeout_s`` shortens InnoDB's lock wait
    (parallel workers: a wait on a later worker's lock must end soon, see ParallelApplier)."""

    def __init__(self, url: MysqlUrl, channel: str = "default", lock_wait_timeout_s: int = 0) -> None:
        self.url = url
        self.channel = channel
        self.lock_wait_timeout_s = lock_wait_timeout_s
        self.conn = self._connect()
        self.position = self._load_position()
        self._open: tuple[str, int] | None = None  # (gtid, seq of its last chunk) of a chunked transaction
        self._unique_keys: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {}

    def _connect(self) -> pymysql.Connection:
        try:
            conn = pymysql.connect(**self.url.connect_args(), charset="utf8mb4", connect_timeout=CONNECT_TIMEOUT_S,
                                   read_timeout=CONNECT_TIMEOUT_S,  # a server that never greets must not hang us
                                   client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.FOUND_ROWS)
        except pymysql.MySQLError as exc:
            raise apply_error(f"connect to replica {self.url}", exc) from exc
        # A DDL may legitimately run for hours: no read timeout once connected; TCP
        # keepalive finds a dead peer instead. (PyMySQL has no public setter for this.)
        conn._read_timeout = None
        _keepalive(conn._sock)
        conn.encoders = {**conn.encoders, **sql.LITERAL_ENCODERS}
        with conn.cursor() as cur:
            cur.execute(SESSION_SETUP)
            if self.lock_wait_timeout_s:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")  # MariaDB and MySQL
                cur.execute("SET SESSION innodb_lock_wait_timeout=%s", (self.lock_wait_timeout_s,))
        return conn

    def _load_position(self) -> Position:
        with self.conn.cursor() as cur:
            for stmt in sql_statements("bridge_schema.sql"):
                cur.execute(stmt)
            cur.execute(sql.POSITION_SELECT, (self.channel,))
            row = cur.fetchone()
        self.conn.commit()
        if row is None:
            return Position(0, GtidSet(), recorded=False)
        return Position(int(row[0]), GtidSet.parse(row[1]), int(row[2]))

    @property
    def has_position(self) -> bool:
        return self.position.recorded

    def init_position(self, gtid_set: GtidSet) -> Position:
        """Record where a new channel starts (seq 0), durably, before anything is applied."""
        with self.conn.cursor() as cur:
            cur.execute(sql.POSITION_INSERT + " ON DUPLICATE KEY UPDATE channel=channel",
                        (self.channel, 0, str(gtid_set)))
        self.conn.commit()
        self.position = self._load_position()
        return self.position

    def apply(self, seq: int, txn: Transaction) -> None:
        if seq <= self.position.applied_seq:
            return  # already applied before a reconnect: exactly once
        if seq != self.position.applied_seq + 1:
            raise ApplyError(f"apply seq {seq} ({txn.gtid}): expected seq {self.position.applied_seq + 1}")
        if txn.is_repair:
            self._apply_repair(seq, txn)
            return
        if not txn.is_ddl:
            self.apply_group([(seq, txn)])
            return
        gtids = self.position.gtid_set.add_text(txn.gtid)
        try:
            self._apply_ddl(seq, txn, gtids)
        except pymysql.MySQLError as exc:  # commit and bookkeeping statements
            raise apply_error(f"apply seq {seq} ({txn.gtid})", exc) from exc
        self.position = Position(seq, gtids)
        self.forget_keys()

    def apply_group(self, items: list[tuple[int, Transaction]]) -> None:
        """Consecutive row-only transactions as ONE replica transaction with one
        position update: the replica still only shows a prefix of the primary's
        history, and the whole group is retried or skipped as a unit."""
        items = [(seq, txn) for seq, txn in items if seq > self.position.applied_seq]
        if not items:
            return  # already applied before a reconnect: exactly once
        first, last = items[0][0], items[-1][0]
        if first != self.position.applied_seq + 1 or last - first + 1 != len(items):
            raise ApplyError(f"apply seq {first}..{last}: expected seq {self.position.applied_seq + 1}, "
                             "consecutive")
        gtids = self.position.gtid_set
        for _, txn in items:
            gtids = gtids.add_text(txn.gtid)
        context = f"apply seq {first} ({items[0][1].gtid})" if len(items) == 1 else \
            f"apply seq {first}..{last} ({items[0][1].gtid}..{items[-1][1].gtid})"
        try:
            self._apply_rows(context, last, [c for _, txn in items for c in txn.changes], gtids)
        except pymysql.MySQLError as exc:  # the commit
            raise apply_error(context, exc) from exc
        self.position = Position(last, gtids)

    def execute_rows(self, context: str, changes) -> None:
        """Row statements inside an open replica transaction, not committed (a
        parallel worker's segment: ``commit_at`` commits it when its turn comes)."""
        try:
            self._apply_rows(context, 0, changes, None)
        except pymysql.MySQLError as exc:
            raise apply_error(context, exc) from exc

    def commit_at(self, context: str, seq: int, gtids: GtidSet) -> None:
        """The position and COMMIT in one round trip, for rows ``execute_rows`` ran."""
        try:
            self._run_batched(context, [(sql.POSITION_WRITE, [self.channel, seq, str(gtids)], _POSITION),
                                        ("COMMIT", None, _COMMIT)])
        except BaseException:
            self._rollback()
            raise
        self.position = Position(seq, gtids)

    def rollback(self) -> None:
        self._rollback()

    def unique_keys(self, schema: str, table: str) -> tuple[tuple[str, ...], ...]:
        """The primary and unique keys of a replica table, as column tuples (cached;
        ``forget_keys`` after DDL)."""
        cached = self._unique_keys.get((schema, table))
        if cached is None:
            with self.conn.cursor() as cur:
                cur.execute(sql.UNIQUE_KEYS_SELECT, (schema, table))
                keys: dict[str, list[str]] = {}
                for index_name, column in cur.fetchall():
                    keys.setdefault(index_name, []).append(column)
            cached = tuple(tuple(cols) for cols in keys.values())
            self._unique_keys[(schema, table)] = cached
        return cached

    def forget_keys(self) -> None:
        self._unique_keys.clear()

    def _apply_repair(self, seq: int, txn: Transaction) -> None:
        """A `rdma-bridge repair` transaction: its rows (the marker, and the primary's
        rows of the range copied into ``rdma_bridge.<copy_table>``) land as usual, then,
        in the same replica transaction as the position, the replica's rows of the
        range are replaced by that copy: missing, extra, changed and duplicated rows
        all end as the primary had them at this point of the stream."""
        marker = txn.changes[0]
        fields = dict(zip(marker.columns, marker.after))
        db, tbl, copy, where = fields["db"], fields["tbl"], fields["copy_table"], fields["where_sql"]
        if not str(copy).startswith("repair_copy_"):
            raise ApplyError(f"apply seq {seq} ({txn.gtid}): repair marker names copy table {copy!r}")
        context = f"apply seq {seq} ({txn.gtid}): repair of {db}.{tbl}"
        gtids = self.position.gtid_set.add_text(txn.gtid)
        rows = [c for c in txn.changes if isinstance(c, RowChange)]
        statements = [(p.text, p.params, (p.change, p.expect)) for p in sql.grouped_statements(rows)]
        statements += [(f"{sql.TAG}DELETE FROM {sql.table_name(db, tbl)} WHERE {where}", None, (marker, None)),
                       (f"{sql.TAG}INSERT INTO {sql.table_name(db, tbl)} SELECT * FROM "
                        f"{sql.table_name('rdma_bridge', copy)}", None, (marker, None)),
                       (sql.POSITION_WRITE, [self.channel, seq, str(gtids)], _POSITION)]
        try:
            self._run_batched(context, statements)
            self.conn.commit()
        except pymysql.MySQLError as exc:
            self._rollback()
            raise apply_error(context, exc) from exc
        except BaseException:
            self._rollback()
            raise
        log.warning("%s: replaced the rows of %s with the primary's", context, where[:200])
        self.position = Position(seq, gtids)

    def reload_position(self) -> Position:
        self.abort_open()
        self.position = self._load_position()
        return self.position

    def reconnect(self) -> Position:
        """A fresh connection and the position the replica really holds (a commit whose
        OK was lost may have happened: the position row says)."""
        self.close()
        self._open = None  # the server rolled it back with the lost connection
        self.conn = self._connect()
        self.position = self._load_position()
        return self.position

    def _apply_rows(self, context: str, seq: int, changes, gtids: GtidSet | None) -> None:
        """Row statements (+ the position and COMMIT when ``gtids`` is given).

        UPDATE/DELETE row counts are checked here, after the server ran the batch, so
        their COMMIT must wait for the check. INSERT-only work fails with an SQL error
        that stops the batch, so its COMMIT can travel in the same round trip."""
        statements = [(p.text, p.params, (p.change, p.expect)) for p in sql.grouped_statements(changes)]
        commit_in_batch = gtids is not None and all(c.kind == "insert" for c in changes)
        if gtids is not None:
            statements.append((sql.POSITION_WRITE, [self.channel, seq, str(gtids)], _POSITION))
        if commit_in_batch:
            statements.append(("COMMIT", None, _COMMIT))
        try:
            self._run_batched(context, statements)
            if gtids is not None and not commit_in_batch:
                self.conn.commit()
        except BaseException:
            self._rollback()
            raise

    def apply_chunk(self, seq: int, chunk: Chunk) -> None:
        """Chunks of one transaction share one replica transaction; the last commits
        it with the position, so a crash in between leaves no trace of it."""
        expected = (self._open[1] if self._open else self.position.applied_seq) + 1
        starts = chunk.index == 0
        if seq != expected or starts != (self._open is None) or (self._open and self._open[0] != chunk.gtid):
            raise ApplyError(f"apply chunk {chunk.index} of {chunk.gtid} at seq {seq}: out of order "
                             f"(expected seq {expected}, open transaction {self._open})")
        if any(isinstance(c, Statement) for c in chunk.changes):
            raise ApplyError(f"apply chunk {chunk.index} of {chunk.gtid}: a chunked transaction holds DDL")
        gtids = self.position.gtid_set.add_text(chunk.gtid) if chunk.last else None
        self._open = (chunk.gtid, seq - 1)
        try:
            # rolls the whole transaction back on failure
            self._apply_rows(f"apply chunk {chunk.index} of {chunk.gtid} at seq {seq}", seq, chunk.changes, gtids)
        except pymysql.MySQLError as exc:
            self._open = None
            raise apply_error(f"apply chunk {chunk.index} of {chunk.gtid} at seq {seq}", exc) from exc
        except BaseException:
            self._open = None
            raise
        if chunk.last:
            self.position = Position(seq, gtids)
            self._open = None
        else:
            self._open = (chunk.gtid, seq)

    @property
    def in_transaction(self) -> bool:
        return self._open is not None

    def abort_open(self) -> None:
        """Roll back a chunked transaction whose remaining chunks will not come."""
        if self._open is not None:
            log.warning("rolling back the partly applied transaction %s (chunks through seq %d)", *self._open)
            self._open = None
            self._rollback()

    def _run_batched(self, context: str, statements: list) -> None:
        with self.conn.cursor() as cur:
            batch, size = [], 0
            for text, params, change in statements:
                rendered = cur.mogrify(text, params)
                batch.append((rendered, change))
                size += len(rendered)
                if size >= BATCH_SQL_BYTES:
                    self._run(cur, context, batch)
                    batch, size = [], 0
            if batch:
                self._run(cur, context, batch)

    def _run(self, cur, context: str, batch: list) -> None:
        """One round trip; then check each UPDATE/DELETE matched exactly one row."""
        index = 0
        try:
            cur.execute(";".join(text for text, _ in batch))
            while True:
                _check_matched(context, batch[index][1], cur.rowcount)
                index += 1
                if not cur.nextset():
                    break
        except pymysql.MySQLError as exc:
            change = batch[index][1] if index < len(batch) else None
            change = change[0] if isinstance(change, tuple) else change
            where = f" on {change.schema}.{change.table}" if isinstance(change, RowChange) else ""
            raise apply_error(f"{context}{where}", exc) from exc

    def _apply_ddl(self, seq: int, txn: Transaction, gtids: GtidSet) -> None:
        replay = self.position.pending_ddl_seq == seq
        with self.conn.cursor() as cur:
            cur.execute(sql.DDL_PENDING, (seq, self.channel))
            self.conn.commit()
            for change in txn.changes:
                if isinstance(change, Statement):
                    self._run_statement(cur, seq, txn, change, replay)
                else:
                    self._run(cur, f"apply seq {seq} ({txn.gtid})",
                              [(cur.mogrify(*sql.row_statement(change)), (change, None if change.kind == "insert" else 1))])
            cur.execute(sql.POSITION_WRITE, (self.channel, seq, str(gtids)))
        self.conn.commit()

    def _run_statement(self, cur, seq: int, txn: Transaction, st: Statement, replay: bool) -> None:
        if not sql.is_replayed(st.sql):
            log.info("apply seq %d (%s): account/flush statement not replayed on the replica: %.60s",
                     seq, txn.gtid, st.sql)
            return
        if st.schema:
            try:
                cur.execute(f"USE {sql.quote_name(st.schema)}")
            except pymysql.MySQLError as exc:
                if exc.args[0] != UNKNOWN_DATABASE:  # CREATE DATABASE x runs "in" x
                    raise apply_error(f"apply seq {seq} ({txn.gtid}): USE {st.schema}", exc) from exc
        try:
            cur.execute(sql.TAG + st.sql)
        except pymysql.MySQLError as exc:
            if replay and exc.args[0] in DDL_ALREADY_DONE:
                log.warning("apply seq %d (%s): DDL already applied before a restart (%s); continuing",
                            seq, txn.gtid, exc.args[-1])
                return
            raise apply_error(f"apply seq {seq} ({txn.gtid}) DDL in schema '{st.schema}' ({st.sql[:200]})",
                              exc) from exc

    def _rollback(self) -> None:
        try:
            self.conn.rollback()
        except pymysql.MySQLError as exc:
            log.warning("rollback on replica %s failed: %s", self.url, exc)

    def close(self) -> None:
        try:
            self.conn.close()
        except pymysql.MySQLError as exc:
            log.debug("closing replica connection: %s", exc)


def _keepalive(sock: socket.socket, idle_s: int = 30, interval_s: int = 10, probes: int = 3) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)


def apply_error(context: str, exc: pymysql.MySQLError) -> ApplyError:
    """Our error for a server error: a lost connection is retryable, the rest is not."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    detail = exc.args[-1] if exc.args else type(exc).__name__
    if code in CONNECTION_LOST or isinstance(exc, pymysql.InterfaceError):
        return TargetConnectionLost(f"{context}: connection to the replica lost: {detail}")
    if code in LOCK_CONFLICT:
        return LockConflict(f"{context}: {detail}")
    return ApplyError(f"{context}: {detail}")


# Batch entries without a row count to check: the position upsert and the COMMIT.
_POSITION, _COMMIT = object(), object()


def _check_matched(context: str, entry, rowcount: int) -> None:
    """``entry``: (first change, rows it must match) for row statements, else a marker."""
    if entry is _COMMIT or entry is _POSITION or entry[1] is None:
        return
    change, expect = entry
    if rowcount != expect:
        raise ApplyError(f"{context}: {change.kind} on {change.schema}.{change.table} "
                         f"matched {rowcount} rows, expected {expect}: the replica has diverged")
