"""Applier: replays transactions into the replica, exactly once, in order.

The channel's position (applied seq, executed GTID set) lives in
``rdma_bridge.bridge_meta`` and is updated in the same replica transaction as the
rows, so after any crash the replica says exactly what it holds.

Two ways to apply rows (``mode``, chosen per session, see bridge.apply.modes):
- ``binlog``: the row events as the primary logged them go to the replica's server
  in ``BINLOG`` statements (bridge.apply.binlog.build): cascades, triggers (not fired
  for replicated rows), generated columns and types behave as in native replication.
  BINLOG and COMMIT travel in one round trip, the position as one more row event in
  the BINLOG statement (bridge.apply.binlog.rows).
- ``sql``: decoded rows become INSERT/UPDATE/DELETE (bridge.apply.sql), every
  UPDATE/DELETE must match exactly one row (anything else is divergence and raises).

Statements (DDL, statement-format DML) are replayed in the session they ran in on
the primary (bridge.apply.replay). DDL cannot share a transaction with the position
row (it commits implicitly), so it is applied as: mark ``pending_ddl_seq`` (commit)
→ DDL → position (commit). On replay of a marked seq, "already exists / already
gone" errors mean the DDL ran before the crash, and are accepted: that makes DDL
replay idempotent. DDL, repairs and chunked transactions: bridge.apply.barriers; a MySQL
primary's GTIDs kept on a MySQL replica: bridge.apply.gtids (both mixed in here).
"""

from __future__ import annotations

import logging

import pymysql

from bridge.apply import modes, sql
from bridge.apply.barriers import Barriers
from bridge.apply.binlog.rows import PACKET_MARGIN, BinlogRows
from bridge.apply.channel import (
    Position,
    init_position,
    load_position,
    lock_channel,
    next_epoch,
    other_channels,
    record_skip,
    record_stop,
    schemas_with_tables,
)
from bridge.apply.connection import (
    apply_error,
    connect,
    current_grants,
    rollback,
    run_script,
    session_setup,
    trigger_names,
)
from bridge.apply.contents import heartbeat_rows
from bridge.apply.gtids import GtidKeeping
from bridge.apply.sql_rows import SqlRows
from bridge.apply.statements import StatementReplayer
from bridge.config import MysqlUrl
from bridge.errors import (
    ApplyError,
    BridgeError,
    ChannelLocked,
    ConfigError,
    RemoteProtocolError,
    StartRefused,
    TargetConnectionLost,
)
from bridge.filter import EVERYTHING
from bridge.model import Chunk, GtidSet, Transaction
from bridge.server import errorcodes
from bridge.server.grants import holds
from bridge.wire import binlog

log = logging.getLogger(__name__)


class Applier(GtidKeeping, Barriers):
    """One replica connection. ``lock_wait_timeout_s`` shortens InnoDB's lock wait
    (parallel workers: a wait on a later worker's lock must end soon, see ParallelApplier)."""

    stats = None  # ParallelApplier's ParallelStats; one connection has no parallelism to report

    def __init__(self, url: MysqlUrl, channel: str = "default", lock_wait_timeout_s: int = 0,
                 mode: str = "sql", holds_channel: bool = True) -> None:
        """``holds_channel``: this connection holds the channel's lock (the first of a
        replica side's connections does; parallel workers do not)."""
        self.url = url
        self.channel = channel
        self.holds_channel = holds_channel
        self.lock_wait_timeout_s = lock_wait_timeout_s
        self.mode = mode
        self.same_flavor = True  # the primary is of the replica's flavor (sql_mode, collations replay as they are)
        self._gtid_next = False  # the replica can keep the primary's GTIDs (MySQL into MySQL: set_mode)
        self.format: binlog.FormatDescription | None = None  # the primary's, as of the applied position
        self._open: tuple[str, int] | None = None  # (gtid, seq of its last chunk) of a chunked transaction
        self._open_format: binlog.FormatDescription | None = None  # the format its chunk 0 was in
        self._open_repair: dict | None = None  # the marker of a repair cut in chunks, until its last chunk
        self._unique_keys: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {}
        self._non_transactional: dict[tuple[str, str], bool] = {}
        self.rules = EVERYTHING  # the channel's filter (the replica node sets it): a repair's table is renamed too
        self._binlog, self._sql, self._statements = BinlogRows(url, channel), SqlRows(channel), StatementReplayer()
        self._connect()
        if holds_channel:
            self._check_writable()
        self.position = self._load_position()

    def _check_writable(self) -> None:
        """A replica that runs read_only=ON (as replicas should: applications cannot write
        to it) is written through by an account allowed to (flavor.read_only_privileges);
        MySQL's super_read_only=ON lets no account write. Refused at start with the fix:
        the bridge never makes the replica writable."""
        flavor = self.server.flavor
        try:
            with self.conn.cursor() as cur:
                cur.execute(flavor.read_only_sql)
                read_only, super_read_only = (int(v) for v in cur.fetchone())
        except pymysql.MySQLError as exc:
            raise apply_error(f"read read_only on replica {self.url}", exc) from exc
        if super_read_only:
            raise ConfigError(f"replica {self.url} runs super_read_only=ON, which lets no account write, not even "
                              "the bridge's applier: SET GLOBAL super_read_only=OFF and keep read_only=ON (the "
                              f"applier writes through it with {flavor.read_only_privileges[0]}; applications "
                              "without it still cannot)")
        if not read_only:
            return
        grants, user, host = current_grants(self.conn, self.url)
        if not holds(grants, flavor.read_only_privileges):
            raise ConfigError(f"replica {self.url} runs read_only=ON and {user} may not write through it: run on "
                              f"the replica: {modes.grant_statement([flavor.read_only_privileges[0]], user, host)} "
                              "(the bridge never switches the replica to writable)")
        log.info("replica %s runs read_only=ON: the applier writes through it (%s)", self.url,
                 flavor.read_only_privileges[0])

    def _connect(self) -> None:
        self.conn, self.server = connect(self.url, self.lock_wait_timeout_s)
        if self.holds_channel:
            try:
                lock_channel(self.conn, self.channel, self.url)
            except BridgeError:
                self.close()
                raise
        self._binlog.attach(self.conn, self.server)
        self._sql.attach(self.conn)
        self._statements.attach(self.conn)
        self._setup_session()

    def _setup_session(self) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.execute(session_setup(self.mode == "sql"))
        except pymysql.MySQLError as exc:
            raise apply_error(f"set up the session on replica {self.url}", exc) from exc

    def use_account_statements(self, choice: str) -> bool:
        """replay | leave-out | auto (replay where this user may manage accounts: CREATE
        USER and GRANT OPTION on the replica, as a native replica's SQL thread replays
        them); True when they are replayed."""
        if choice == "auto":
            privileges = current_grants(self.conn, self.url)[0]
            may = holds(privileges, ("CREATE USER",)) and "GRANT OPTION" in privileges
            choice = "replay" if may else "leave-out"
        self._statements.accounts = choice == "replay"
        return self._statements.accounts

    @property
    def account_statements(self) -> dict:
        return {"account_statements_replayed": self._statements.accounts_replayed,
                "account_statements_left_out": self._statements.accounts_left_out}

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

    def set_mode(self, mode: str, same_flavor: bool, primary_collations: dict[int, str] | None = None) -> None:
        """The apply mode of a new session (nothing may be in flight); the primary's names
        of its collation ids, for a statement whose id the replica does not know."""
        self._statements.primary_collations = primary_collations or {}
        self._gtid_next = same_flavor and self.server.takes_gtid_next
        if (mode, same_flavor) != (self.mode, self.same_flavor):
            self.mode, self.same_flavor = mode, same_flavor
            self._setup_session()

    def _load_position(self) -> Position:
        try:
            return load_position(self.conn, self.channel)
        except pymysql.MySQLError as exc:  # a connection lost here is retried like any other
            raise apply_error(f"read channel {self.channel!r}'s position on replica {self.url}", exc) from exc

    @property
    def binlog_rows(self) -> BinlogRows:
        return self._binlog

    @property
    def chunk_open(self) -> bool:
        return self._open is not None

    @property
    def max_query_bytes(self) -> int:
        """The longest statement script one round trip may carry on this replica."""
        return self.server.max_allowed_packet - PACKET_MARGIN

    @property
    def has_position(self) -> bool:
        return self.position.recorded

    def init_position(self, gtid_set: GtidSet, explicit: bool) -> Position:
        """Record where a new channel starts (seq 0), durably, before anything is applied.
        Without an ``explicit`` start (from the binlog's start) it must not replay the
        binlog into data the replica already holds: refused, with the way out."""
        if not explicit:
            self._refuse_replay_into_data()
        init_position(self.conn, self.channel, gtid_set)
        self.position = self._load_position()
        return self.position

    def _refuse_replay_into_data(self) -> None:
        others, schemas = other_channels(self.conn, self.channel), schemas_with_tables(self.conn)
        if others:
            name, gtids = others[0]
            raise StartRefused(f"new channel {self.channel!r} on replica {self.url} would replay the primary's binlog "
                               f"from its start, but the replica holds channel {name!r} (at {gtids or 'its start'}): "
                               f"start-replica --channel {name} to go on with it, or start-primary --start-gtid "
                               f"{gtids or 'current'} to start this channel where that data ends")
        if schemas:
            raise StartRefused(f"new channel {self.channel!r} on replica {self.url} would replay the primary's binlog "
                               f"from its start into schemas the replica already holds ({', '.join(schemas[:5])}): "
                               "pass start-primary --start-gtid with the GTID set that data was copied at "
                               "(mariadb-dump --gtid prints it), or 'current'")

    def next_epoch(self) -> int:
        return next_epoch(self.conn, self.channel)

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
        if not self.unapplied([(seq, txn)]):
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
        items = self.unapplied(items)
        if not items:
            return  # already applied before a reconnect: exactly once
        if self.keeps_gtids and len(items) > 1:  # one GTID per replica transaction
            for item in items:
                self.apply_group([item])
            return
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
        self._apply_rows(context, last, [c for _, txn in items for c in txn.changes], gtids, fmt,
                         self.gtid_script(items[0][1].gtid))
        self.position, self.format = Position(last, gtids), fmt

    def unapplied(self, items: list[tuple[int, Transaction]]) -> list[tuple[int, Transaction]]:
        """The items past the position. One the replica holds already (its commit went
        through, its answer was lost with the connection) is not applied again, but the
        FORMAT_DESCRIPTION it carried stays in force: the transactions after it do not
        carry it again."""
        for seq, txn in items:
            if seq <= self.position.applied_seq and txn.format_event:
                self.format = self.format_for(txn)
        return [(seq, txn) for seq, txn in items if seq > self.position.applied_seq]

    def execute_rows(self, context: str, changes, fmt: binlog.FormatDescription | None) -> None:
        """Row statements inside an open replica transaction, not committed (a
        parallel worker's segment: ``commit_at`` commits it when its turn comes)."""
        self._apply_rows(context, 0, changes, None, fmt)

    def commit_at(self, context: str, seq: int, gtids: GtidSet, fmt: binlog.FormatDescription | None) -> None:
        """The position and COMMIT in one round trip, for rows ``execute_rows`` ran."""
        try:
            if self.mode == "binlog":
                self._binlog.run(context, [], [b"COMMIT"], fmt, (seq, gtids))
            else:
                run_script(self.conn, context, [self._position_statement(seq, gtids), b"COMMIT"])
        except BaseException:
            self.rollback()
            raise
        self.position, self.format = Position(seq, gtids), fmt

    def rollback(self) -> None:
        rollback(self.conn, self.url, gtid_next=self.keeps_gtids)

    def skip(self, seq: int, gtid: str, error: str, by: str, item: Transaction | Chunk | None = None) -> None:
        """Move the position past transaction ``seq`` without applying it, recorded in
        rdma_bridge.skipped (the operator's `rdma-bridge skip`). The FORMAT_DESCRIPTION
        ``item`` carried stays in force: the transactions after it are in that format
        and do not carry it again (a session sends it once, with its first frame)."""
        if seq != self.position.applied_seq + 1:
            raise ApplyError(f"skip seq {seq} ({gtid}): the replica is at seq {self.position.applied_seq}")
        gtids = self.position.gtid_set.add_text(gtid)
        stamps = getattr(item, "stamps", ())  # a Transaction's: (read, shipped) ns on the primary side
        record_skip(self.conn, self.channel, seq, gtids, gtid, error, by, stamps[0] if stamps else None,
                    self.gtid_script(gtid))  # the skipped GTID as an empty transaction, as on a native replica
        self.position = Position(seq, gtids)
        if item is not None and item.format_event:
            self.format = self.format_for(item)

    def record_stop(self, stopped: dict | None) -> None:
        """Where applying stopped (``Halt.status()``), kept on the replica while it is
        stopped (rdma_bridge.apply_stopped: `checksum` sees it), or None: it goes on."""
        try:
            record_stop(self.conn, self.channel, stopped)
        except pymysql.MySQLError as exc:  # said, not fatal: the node's own state is what counts
            log.warning("channel %r: could not record that applying %s on replica %s: %s", self.channel,
                        "stopped" if stopped else "goes on", self.url, exc.args[-1] if exc.args else exc)

    def unique_keys(self, schema: str, table: str) -> tuple[tuple[str, ...], ...]:
        """The primary and unique keys of a replica table, as column tuples (cached;
        ``forget_keys`` after DDL)."""
        cached = self._unique_keys.get((schema, table))
        if cached is None:
            keys: dict[str, list[str]] = {}
            for index_name, column in self._read(f"read the keys of {schema}.{table}", sql.UNIQUE_KEYS_SELECT,
                                                 (schema, table)):
                keys.setdefault(index_name, []).append(column)
            cached = tuple(tuple(cols) for cols in keys.values())
            self._unique_keys[(schema, table)] = cached
        return cached

    def _read(self, what: str, query: str, args: tuple) -> tuple:
        """Rows of a query about the replica's tables; a lost connection is our error (the
        caller reconnects), never PyMySQL's."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(query, args)
                return cur.fetchall()
        except pymysql.MySQLError as exc:
            raise apply_error(f"{what} on replica {self.url}", exc) from exc

    def forget_keys(self) -> None:
        self._unique_keys.clear()
        self._non_transactional.clear()
        self._sql.forget()

    def reload_position(self) -> Position:
        self.abort_open()
        self.position = self._load_position()
        return self.position

    def reconnect(self) -> Position:
        """A fresh connection and the position the replica really holds (a commit whose
        OK was lost may have happened: the position row says). The lost connection may
        still hold the channel's lock for a moment: retried like a lost connection."""
        self.close()
        self._open = None  # the server rolled it back with the lost connection
        try:
            self._connect()
        except ChannelLocked as exc:
            raise TargetConnectionLost(f"reconnect to replica {self.url}: {exc}") from exc
        self.position = self._load_position()
        return self.position

    # --- rows ----------------------------------------------------------------------

    def _apply_rows(self, context: str, seq: int, changes, gtids: GtidSet | None, fmt,
                    gtid_script: tuple[list[bytes], list[bytes]] = ([], [])) -> None:
        """Row changes (+ the position and COMMIT when ``gtids`` is given); rolled back
        on any failure. ``gtid_script``: statements before the rows and after the COMMIT
        (``gtid_script``)."""
        changes, beats = self._heartbeats(changes, fmt)
        head, after = gtid_script
        if head and gtids is not None and self._commits_alone(changes):
            # MyISAM rows commit statement by statement: the position cannot share their
            # transaction (it never could be atomic with them). In binlog mode the one BINLOG
            # statement commits with the GTID (a replay is skipped by it), the position after;
            # in sql mode each row's statement commits on its own, so the GTID goes with the position
            rows_script, position_script = ((head, []), ([b"COMMIT", *after], [])) if self.mode == "binlog" else \
                (([b"COMMIT"], []), (head, after))
            self._apply_rows(context, seq, changes, None, fmt, rows_script)
            return self._apply_rows(context, seq, [], gtids, fmt, position_script)
        try:
            if self.mode == "binlog":
                tail = beats + ([] if gtids is None else [b"COMMIT", *after])
                self._binlog.run(context, changes, tail, fmt, None if gtids is None else (seq, gtids), head)
            else:
                self._sql.run(context, seq, changes, gtids, beats, head, after)
        except BaseException as exc:
            self.rollback()
            if isinstance(exc, ApplyError) and exc.code == errorcodes.ROW_NOT_FOUND and not self._position_recorded():
                raise self._position_row_gone(context, exc) from exc
            raise

    def _position_recorded(self) -> bool:
        """Whether the channel's row is in bridge_meta (asked after a row event found no
        row: the position's own UPDATE is one of them). Unsure (the connection failed):
        True, and the error stays the server's."""
        try:
            return load_position(self.conn, self.channel).recorded
        except (pymysql.MySQLError, OSError):
            return True

    def _position_row_gone(self, context: str, exc: ApplyError) -> ApplyError:
        """The channel's row was deleted under a running applier (the position row
        event finds nothing): how to put it back where the replica's data is."""
        pos = self.position
        values = (self.channel, pos.applied_seq, str(pos.gtid_set))
        restore = sql.POSITION_INSERT.removeprefix(sql.TAG) % tuple(self.conn.escape(v) for v in values)
        return ApplyError(f"{context}: the row of channel {self.channel!r} in rdma_bridge.bridge_meta is gone from "
                          f"replica {self.url} (deleted by hand?); the replica holds seq {pos.applied_seq}: put it "
                          f"back with {restore}", exc.code)

    def _heartbeats(self, changes, fmt) -> tuple[list, list[bytes]]:
        """(the other changes, statements for the heartbeat rows). The heartbeat table is
        the bridge's own: its rows are upserted and deleted by source, never matched, so
        a stale or missing heartbeat row on the replica can never stop replication."""
        others, statements = [], []
        for change in changes:
            rows = heartbeat_rows(change, fmt)
            if rows is None:
                others.append(change)
                continue
            for kind, source, ts_us in rows:
                statements.append((sql.HEARTBEAT_DELETE if kind == "delete" else sql.HEARTBEAT_UPSERT)
                                  % tuple(self.conn.escape(v) for v in ((source,) if kind == "delete" else
                                                                        (source, ts_us))))
        return others, [s.encode() for s in statements]

    def _position_statement(self, seq: int, gtids: GtidSet) -> bytes:
        return sql.position_write(self.conn.escape, self.channel, seq, gtids)

    def close(self) -> None:
        try:
            self.conn.close()
        except pymysql.MySQLError as exc:
            log.debug("closing replica connection: %s", exc)
