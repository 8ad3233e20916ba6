"""Applier: replays transactions into the replica, exactly once, in order.

The channel's position (applied seq, executed GTID set) lives in
``rdma_bridge.bridge_meta`` and is updated in the same replica transaction as the
rows, so after any crash the replica says exactly what it holds.

Two ways to apply rows (``mode``, chosen per session, see bridge.apply.modes):
- ``binlog``: the row events as the primary logged them go to the replica's server
  in ``BINLOG`` statements (bridge.apply.binlog_sql): cascades, triggers (not fired
  for replicated rows), generated columns and types behave as in native replication.
  Position, BINLOG and COMMIT travel in one round trip.
- ``sql``: decoded rows become INSERT/UPDATE/DELETE (bridge.apply.sql), every
  UPDATE/DELETE must match exactly one row (anything else is divergence and raises).

Statements (DDL, statement-format DML) are replayed in the session they ran in on
the primary (bridge.apply.replay). DDL cannot share a transaction with the position
row (it commits implicitly), so it is applied as: mark ``pending_ddl_seq`` (commit)
→ DDL → position (commit). On replay of a marked seq, "already exists / already
gone" errors mean the DDL ran before the crash, and are accepted: that makes DDL
replay idempotent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pymysql

from bridge.apply import binlog_sql, modes, replay, sql
from bridge.apply.connection import (apply_error, connect, current_grants, rollback, run_script, session_setup,
                                     trigger_names)
from bridge.config import MysqlUrl
from bridge.errors import ApplyError, ConfigError, RemoteProtocolError, TargetConnectionLost
from bridge.model import Chunk, GtidSet, RowChange, RowEvents, Statement, Transaction
from bridge.sqlfiles import sql_statements
from bridge.wire import binlog, tablemap

log = logging.getLogger(__name__)
# Errors that mean a replayed DDL already took effect before a crash.
DDL_ALREADY_DONE = {1007, 1008, 1050, 1051, 1054, 1060, 1061, 1091, 1146, 1176}
UNKNOWN_DATABASE = 1049
BATCH_SQL_BYTES = 4 << 20
PACKET_MARGIN = 4096  # room next to the BINLOG statements for the position and COMMIT
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Position:
    applied_seq: int
    gtid_set: GtidSet
    pending_ddl_seq: int = 0
    recorded: bool = True  # False: the channel has no row yet


class Applier:
    """One replica connection. ``lock_wait_timeout_s`` shortens InnoDB's lock wait
    (parallel workers: a wait on a later worker's lock must end soon, see ParallelApplier)."""

    def __init__(self, url: MysqlUrl, channel: str = "default", lock_wait_timeout_s: int = 0,
                 mode: str = "sql") -> None:
        self.url = url
        self.channel = channel
        self.lock_wait_timeout_s = lock_wait_timeout_s
        self.mode = mode
        self.same_flavor = True  # the primary is of the replica's flavor (sql_mode, collations replay as they are)
        self.format: binlog.FormatDescription | None = None  # the primary's, as of the applied position
        self.binlog_goes_on: bool | None = None  # the server runs statements after a BINLOG (probed once)
        self._open: tuple[str, int] | None = None  # (gtid, seq of its last chunk) of a chunked transaction
        self._open_format: binlog.FormatDescription | None = None  # the format its chunk 0 was in
        self._unique_keys: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {}
        self._table_traits: dict[tuple[str, str], tuple[frozenset[str], bool]] = {}
        self._collations: dict[int, tuple[str, str]] | None = None
        self._connect()
        self.position = self._load_position()

    def _connect(self) -> None:
        self.conn, self.server = connect(self.url, self.lock_wait_timeout_s)
        self._conn_format = b""  # the FORMAT_DESCRIPTION this connection's BINLOG statements use
        self._setup_session()

    def _setup_session(self) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.execute(session_setup(self.mode == "sql"))
        except pymysql.MySQLError as exc:
            raise apply_error(f"set up the session on replica {self.url}", exc) from exc

    def preflight(self, mode: str) -> None:
        """Refuse to apply in ``mode`` what this replica user cannot: the GRANT to run
        is in the message. In sql mode, replica triggers would fire for replicated rows
        (native replication does not fire them): refused, naming them."""
        grants, user, host = current_grants(self.conn, self.url)
        lacking = modes.missing(grants, mode, self.server.flavor)
        if lacking:
            raise ConfigError(f"apply mode {mode} on replica {self.url}: {user} lacks "
                              + "; ".join(f"{p} ({modes.why(p)})" for p in lacking)
                              + f". Run on the replica: {modes.grant_statement(lacking, user, host)}")
        if mode == "sql":
            triggers = trigger_names(self.conn, self.url)
            if triggers:
                raise ConfigError(f"apply mode sql on replica {self.url}: these triggers would fire for replicated "
                                  f"rows, which native replication never does: {', '.join(triggers[:10])}; use "
                                  "--apply-mode binlog (same flavor) or drop them on the replica")

    def set_mode(self, mode: str, same_flavor: bool) -> None:
        """The apply mode of a new session (nothing may be in flight)."""
        if (mode, same_flavor) != (self.mode, self.same_flavor):
            self.mode, self.same_flavor = mode, same_flavor
            self._setup_session()

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

    # --- what the primary's format is ----------------------------------------

    def format_for(self, item: Transaction | Chunk) -> binlog.FormatDescription | None:
        """The FORMAT_DESCRIPTION ``item`` is in: its own, or the one in force."""
        if item.format_event:
            return binlog.parse_format_description(item.format_event)
        return self._open_format if isinstance(item, Chunk) and item.index else self.format

    def _checksum_bytes(self, fmt: binlog.FormatDescription | None, context: str) -> int:
        if fmt is None:
            raise RemoteProtocolError(f"{context}: raw binlog events before any FORMAT_DESCRIPTION event")
        return fmt.checksum_bytes

    # --- transactions ------------------------------------------------------------

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
        fmt = self.format_for(txn)
        gtids = self.position.gtid_set.add_text(txn.gtid)
        try:
            self._apply_ddl(seq, txn, gtids, fmt)
        except pymysql.MySQLError as exc:  # commit and bookkeeping statements
            raise apply_error(f"apply seq {seq} ({txn.gtid})", exc) from exc
        self.position, self.format = Position(seq, gtids), fmt
        self.forget_keys()

    def apply_group(self, items: list[tuple[int, Transaction]]) -> None:
        """Consecutive row-only transactions as ONE replica transaction with one
        position update: the replica still only shows a prefix of the primary's
        history, and the whole group is retried or skipped as a unit. Only the first
        may carry a FORMAT_DESCRIPTION (the replica node starts a group there)."""
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
        fmt = self.format_for(items[0][1])
        self._apply_rows(context, last, [c for _, txn in items for c in txn.changes], gtids, fmt)
        self.position, self.format = Position(last, gtids), fmt

    def execute_rows(self, context: str, changes, fmt: binlog.FormatDescription | None) -> None:
        """Row statements inside an open replica transaction, not committed (a
        parallel worker's segment: ``commit_at`` commits it when its turn comes)."""
        self._apply_rows(context, 0, changes, None, fmt)

    def commit_at(self, context: str, seq: int, gtids: GtidSet, fmt: binlog.FormatDescription | None) -> None:
        """The position and COMMIT in one round trip, for rows ``execute_rows`` ran."""
        try:
            run_script(self.conn, context, [self._position_statement(seq, gtids), b"COMMIT"])
        except BaseException:
            self.rollback()
            raise
        self.position, self.format = Position(seq, gtids), fmt

    def rollback(self) -> None:
        rollback(self.conn, self.url)

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
        self._table_traits.clear()

    def _apply_repair(self, seq: int, txn: Transaction) -> None:
        """A `rdma-bridge repair` transaction: its rows (the marker, and the primary's
        rows of the range copied into ``rdma_bridge.<copy_table>``) land as usual, then,
        in the same replica transaction as the position, the replica's rows of the
        range are replaced by that copy: missing, extra, changed and duplicated rows
        all end as the primary had them at this point of the stream."""
        fmt = self.format_for(txn)
        fields = self._marker_fields(txn.changes[0], fmt)
        db, tbl, copy, where = fields["db"], fields["tbl"], fields["copy_table"], fields["where_sql"]
        if not str(copy).startswith("repair_copy_"):
            raise ApplyError(f"apply seq {seq} ({txn.gtid}): repair marker names copy table {copy!r}")
        context = f"apply seq {seq} ({txn.gtid}): repair of {db}.{tbl}"
        gtids = self.position.gtid_set.add_text(txn.gtid)
        # no cascade: the replica's rows of the range are replaced, not deleted
        replace = [b"SET SESSION foreign_key_checks=0",
                   f"{sql.TAG}DELETE FROM {sql.table_name(db, tbl)} WHERE {where}".encode(),
                   f"{sql.TAG}INSERT INTO {sql.table_name(db, tbl)} SELECT * FROM "
                   f"{sql.table_name('rdma_bridge', copy)}".encode(),
                   self._position_statement(seq, gtids), b"COMMIT",
                   b"SET SESSION foreign_key_checks=%d" % (self.mode == "sql")]
        try:
            self._apply_rows(context, 0, txn.changes, None, fmt)
            run_script(self.conn, context, replace, lambda i: " (replacing the range)" if i < 3 else "")
        except BaseException:
            self.rollback()
            raise
        log.warning("%s: replaced the rows of %s with the primary's", context, where[:200])
        self.position, self.format = Position(seq, gtids), fmt

    def _marker_fields(self, first, fmt) -> dict:
        if isinstance(first, RowEvents):
            table, _, _, after = next(tablemap.rows_of(first.data, self._checksum_bytes(fmt, "repair marker")))
            return {name: tablemap.as_text(v, table.collations[i]) for i, (name, v) in enumerate(zip(table.names,
                                                                                                     after))}
        return dict(zip(first.columns, first.after))

    def reload_position(self) -> Position:
        self.abort_open()
        self.position = self._load_position()
        return self.position

    def reconnect(self) -> Position:
        """A fresh connection and the position the replica really holds (a commit whose
        OK was lost may have happened: the position row says)."""
        self.close()
        self._open = None  # the server rolled it back with the lost connection
        self._connect()
        self.position = self._load_position()
        return self.position

    # --- rows ----------------------------------------------------------------------

    def _apply_rows(self, context: str, seq: int, changes, gtids: GtidSet | None, fmt) -> None:
        """Row changes (+ the position and COMMIT when ``gtids`` is given); rolled back
        on any failure."""
        try:
            if self.mode == "binlog":
                self._binlog_rows(context, changes, self._tail(seq, gtids), fmt)
            else:
                self._sql_rows(context, seq, changes, gtids)
        except BaseException:
            self.rollback()
            raise

    def _tail(self, seq: int, gtids: GtidSet | None) -> list[bytes]:
        return [] if gtids is None else [self._position_statement(seq, gtids), b"COMMIT"]

    def _position_statement(self, seq: int, gtids: GtidSet) -> bytes:
        return (sql.POSITION_WRITE % tuple(self.conn.escape(v) for v in (self.channel, seq, str(gtids)))).encode()

    def _binlog_rows(self, context: str, changes, tail: list[bytes], fmt) -> None:
        """The row events in BINLOG statements, then ``tail`` (position, COMMIT), in as
        few round trips as the replica's max_allowed_packet allows."""
        rows = [c for c in changes if isinstance(c, RowEvents)]
        if len(rows) != len(changes):
            raise RemoteProtocolError(f"{context}: decoded rows in a binlog-mode session")
        self._ensure_format(fmt, context)
        limit = self.server.max_allowed_packet - PACKET_MARGIN
        statements = []
        for batch in binlog_sql.batches([c.data for c in rows], limit):
            if binlog_sql.statement_bytes(len(batch)) <= limit:
                statements.append(binlog_sql.binlog_statement(batch))
            elif binlog_sql.statement_bytes(len(batch)) // 2 <= limit:
                statements += binlog_sql.fragment_statements(batch)
            else:
                raise ApplyError(f"{context}: a binlog event of {len(batch)} bytes does not fit the replica's "
                                 f"max_allowed_packet ({self.server.max_allowed_packet}); raise it to at least "
                                 f"{binlog_sql.statement_bytes(len(batch)) // 2 + PACKET_MARGIN}")
        tables = sorted({f"{s}.{t}" for c in rows for s, t in c.tables})
        what = f" (row events on {', '.join(tables[:5])}{' ...' if len(tables) > 5 else ''})"
        for trip in self._trips(statements + tail, limit):
            run_script(self.conn, context, trip, lambda i, trip=trip: what if trip[i].startswith(b"BINLOG") else "")

    def _trips(self, statements: list[bytes], limit: int) -> list[list[bytes]]:
        """Statements packed into round trips of at most ``limit`` bytes; on a server
        that stops after a BINLOG, each BINLOG ends its round trip."""
        trips: list[list[bytes]] = []
        size = 0
        for statement in statements:
            if trips and size + len(statement) < limit and \
                    (self.binlog_goes_on or not trips[-1][-1].startswith(b"BINLOG")):
                trips[-1].append(statement)
                size += len(statement) + 1
            else:
                trips.append([statement])
                size = len(statement)
        return trips

    def _ensure_format(self, fmt: binlog.FormatDescription | None, context: str) -> None:
        """This connection's BINLOG statements read events in ``fmt``: tell the server
        once per connection (and when it changes); probe the server once."""
        self._checksum_bytes(fmt, context)
        if self._conn_format == fmt.event:
            return
        try:
            run_script(self.conn, "apply the primary's FORMAT_DESCRIPTION event",
                       [binlog_sql.binlog_statement(fmt.event)])
        except ApplyError as exc:
            if exc.code in (1227, 1044, 1045, 1142):
                raise ApplyError(f"{context}: {self.url.user} may not run BINLOG on the replica ({exc}): "
                                 f"GRANT BINLOG REPLAY ON *.* TO '{self.url.user}'@'<host>' (MariaDB; MySQL: "
                                 "BINLOG_ADMIN), or start-replica --apply-mode sql", exc.code) from exc
            raise
        self._conn_format = fmt.event
        if self.binlog_goes_on is None:
            self.binlog_goes_on = self._probe(fmt)

    def _probe(self, fmt: binlog.FormatDescription) -> bool:
        """Does this server run the statements after a BINLOG of row events? One row
        into rdma_bridge.bridge_probe and a SELECT, rolled back. If the SELECT's answer
        never comes, BINLOG ends every round trip from now on."""
        self.conn._sock.settimeout(PROBE_TIMEOUT_S)
        try:
            run_script(self.conn, "probe BINLOG", [binlog_sql.binlog_statement(binlog_sql.probe_events(fmt)),
                                                   b"SELECT 1"])
            self.rollback()
            return True
        except TargetConnectionLost:
            log.warning("replica %s stops after a BINLOG statement: COMMIT takes a round trip of its own", self.url)
            self._connect()
            return False
        finally:
            if self.conn._sock is not None:
                self.conn._sock.settimeout(None)

    def _sql_rows(self, context: str, seq: int, changes, gtids: GtidSet | None) -> None:
        """UPDATE/DELETE row counts are checked after the server ran the batch, so their
        COMMIT must wait for the check. INSERT-only work fails with an SQL error that
        stops the batch, so its COMMIT can travel in the same round trip."""
        if any(not isinstance(c, RowChange) for c in changes):
            raise RemoteProtocolError(f"{context}: raw row events in an sql-mode session")
        statements = self._sql_statements(changes)
        commit_in_batch = gtids is not None and all(c.kind == "insert" for c in changes)
        if gtids is not None:
            statements.append((sql.POSITION_WRITE, [self.channel, seq, str(gtids)], _UNCHECKED))
        if commit_in_batch:
            statements.append(("COMMIT", None, _UNCHECKED))
        self._run_batched(context, statements)
        if gtids is not None and not commit_in_batch:
            self.conn.commit()

    def _sql_statements(self, changes: list[RowChange]) -> list:
        """(text, params, what to check) for the rows: generated columns left to the
        replica, foreign_key_checks off around rows the primary wrote with it off."""
        changes = [sql.without_columns(c, self._traits(c.schema, c.table)[0]) for c in changes]
        out, checks = [], True
        for p in sql.grouped_statements(changes, lambda schema, table: self._traits(schema, table)[1]):
            if p.change.foreign_key_checks != checks:
                checks = p.change.foreign_key_checks
                out.append((f"SET SESSION foreign_key_checks={int(checks)}", None, _UNCHECKED))
            out.append((p.text, p.params, (p.change, p.expect)))
        if not checks:
            out.append(("SET SESSION foreign_key_checks=1", None, _UNCHECKED))
        return out

    def _traits(self, schema: str, table: str) -> tuple[frozenset[str], bool]:
        """(generated columns, referenced by a foreign key) of a replica table (cached;
        ``forget_keys`` after DDL)."""
        cached = self._table_traits.get((schema, table))
        if cached is None:
            with self.conn.cursor() as cur:
                cur.execute(sql.TRAITS_SELECT, (schema, table, schema, table))
                generated, referenced = cur.fetchone()
            cached = (frozenset(generated.split("\0")) if generated else frozenset(), bool(referenced))
            self._table_traits[(schema, table)] = cached
        return cached

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
        fmt = self.format_for(chunk)
        gtids = self.position.gtid_set.add_text(chunk.gtid) if chunk.last else None
        self._open = (chunk.gtid, seq - 1)
        try:
            # rolls the whole transaction back on failure
            self._apply_rows(f"apply chunk {chunk.index} of {chunk.gtid} at seq {seq}", seq, chunk.changes, gtids,
                             fmt)
        except BaseException:
            self._open = None
            raise
        if chunk.last:
            self.position, self.format = Position(seq, gtids), fmt
            self._open = None
        else:
            self._open, self._open_format = (chunk.gtid, seq), fmt

    @property
    def in_transaction(self) -> bool:
        return self._open is not None

    def abort_open(self) -> None:
        """Roll back a chunked transaction whose remaining chunks will not come."""
        if self._open is not None:
            log.warning("rolling back the partly applied transaction %s (chunks through seq %d)", *self._open)
            self._open = None
            self.rollback()

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

    # --- statements (DDL) ------------------------------------------------------------

    def _apply_ddl(self, seq: int, txn: Transaction, gtids: GtidSet, fmt) -> None:
        try:
            self._run_ddl(seq, txn, gtids, fmt)
        except BaseException:
            self.rollback()
            raise

    def _run_ddl(self, seq: int, txn: Transaction, gtids: GtidSet, fmt) -> None:
        replay_pending = self.position.pending_ddl_seq == seq
        context = f"apply seq {seq} ({txn.gtid})"
        with self.conn.cursor() as cur:
            cur.execute(sql.DDL_PENDING, (seq, self.channel))
            self.conn.commit()
            for change in txn.changes:
                if isinstance(change, Statement):
                    self._run_statement(cur, seq, txn, change, replay_pending, fmt)
                elif isinstance(change, RowEvents):
                    self._binlog_rows(context, [change], [], fmt)
                else:
                    self._run(cur, context, [(cur.mogrify(text, params), check)
                                             for text, params, check in self._sql_statements([change])])
            cur.execute(sql.POSITION_WRITE, (self.channel, seq, str(gtids)))
        self.conn.commit()

    def _run_statement(self, cur, seq: int, txn: Transaction, st: Statement, replay_pending: bool, fmt) -> None:
        if not sql.is_replayed(st.sql):
            log.info("apply seq %d (%s): account/flush statement not replayed on the replica: %.60s",
                     seq, txn.gtid, st.sql)
            return
        plan = replay.statements(st.raw, self._checksum_bytes(fmt, f"apply seq {seq}"), self.same_flavor,
                                 self._collation) if st.raw else replay.Replay(st.schema, (), st.sql.encode(), st.sql)
        trigger = replay.created_trigger(plan.text) if self.mode == "sql" else None
        if trigger:
            raise ApplyError(f"apply seq {seq} ({txn.gtid}): the primary created trigger {trigger}; apply mode sql "
                             "cannot keep it from firing for replicated rows (native replication never fires it): "
                             "restart the replica side with --apply-mode binlog (same flavor on both sides)")
        if plan.session:
            run_script(self.conn, f"apply seq {seq} ({txn.gtid}): session of the statement", list(plan.session))
        if plan.schema:
            try:
                cur.execute(f"USE {sql.quote_name(plan.schema)}")
            except pymysql.MySQLError as exc:
                if exc.args[0] != UNKNOWN_DATABASE:  # CREATE DATABASE x runs "in" x
                    raise apply_error(f"apply seq {seq} ({txn.gtid}): USE {plan.schema}", exc) from exc
        try:
            cur.execute(sql.TAG.encode() + plan.sql)
            # still in the statement's session: ALTER EVENT records the sql_mode it runs in
            self._disable_event(cur, replay.event_to_disable(plan.text, plan.schema),
                                None if replay.names_definer(plan.text) else plan.invoker)
        except pymysql.MySQLError as exc:
            if replay_pending and exc.args[0] in DDL_ALREADY_DONE:
                log.warning("apply seq %d (%s): DDL already applied before a restart (%s); continuing",
                            seq, txn.gtid, exc.args[-1])
                return
            raise apply_error(f"apply seq {seq} ({txn.gtid}) DDL in schema '{plan.schema}' ({plan.text[:200]})",
                              exc) from exc
        finally:
            if plan.session:
                run_script(self.conn, f"apply seq {seq}: restore the session",
                           [replay.RESET_REPLAYED, session_setup(self.mode == "sql").encode()])

    def _disable_event(self, cur, name: str | None, invoker: tuple[str, str] | None) -> None:
        """As a native replica does: an event the primary created or altered does not
        run on the replica (DISABLE ON SLAVE). Its definer is the one the statement
        named, else the user who ran it on the primary (the event's invoker), as the
        native replica's SQL thread takes it; never the applier's own user."""
        if name is None:
            return
        schema, event = [part.strip("`").replace("``", "`") for part in name.split("`.`")]
        cur.execute("SELECT DEFINER FROM information_schema.EVENTS WHERE EVENT_SCHEMA=%s AND EVENT_NAME=%s",
                    (schema, event))
        row = cur.fetchone()
        if row is None:
            return
        user, host = invoker or row[0].rsplit("@", 1)
        cur.execute(f"{sql.TAG}ALTER DEFINER={self.conn.escape(user)}@{self.conn.escape(host)} EVENT {name} "
                    "DISABLE ON SLAVE")

    def _collation(self, collation_id: int) -> tuple[str, str] | None:
        """(collation, character set) of a collation id on the replica (cached)."""
        if self._collations is None:
            with self.conn.cursor() as cur:
                cur.execute("SELECT ID, COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLLATIONS")
                self._collations = {int(i): (name, charset) for i, name, charset in cur.fetchall()}
        return self._collations.get(collation_id)

    def close(self) -> None:
        try:
            self.conn.close()
        except pymysql.MySQLError as exc:
            log.debug("closing replica connection: %s", exc)


# Batch entries without a row count to check: the position upsert, COMMIT, session settings.
_UNCHECKED = object()


def _check_matched(context: str, entry, rowcount: int) -> None:
    """``entry``: (first change, rows it must match) for row statements, else _UNCHECKED."""
    if entry is _UNCHECKED or entry[1] is None:
        return
    change, expect = entry
    if rowcount != expect:
        raise ApplyError(f"{context}: {change.kind} on {change.schema}.{change.table} "
                         f"matched {rowcount} rows, expected {expect}: the replica has diverged")
