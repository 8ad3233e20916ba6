"""Statements from the binlog (DDL, statement-format DML) replayed into one replica
connection, in the session they ran in on the primary (bridge.apply.replay), then
the applier's own session back.

As a native replica does: account management (users, roles, grants) is replayed where
the apply user may manage accounts (``accounts``: start-replica --account-statements;
else left out, logged and counted), never across flavors (a MySQL account's plugin and
privileges do not exist on MariaDB); FLUSH is the primary's own business (not replayed);
an event the primary creates or alters is disabled
on the replica (DISABLE ON SLAVE) with its definer kept; in sql apply mode a trigger
the primary creates stops the applier (it would fire for replicated rows). A replay of
a DDL that ran before a crash accepts "already exists / already gone".
"""

from __future__ import annotations

import dataclasses
import logging

import pymysql

from bridge.apply import replay, sql
from bridge.apply.connection import apply_error, run_script, session_setup
from bridge.errors import ApplyError, RemoteProtocolError
from bridge.model import Statement
from bridge.server import catalog, errorcodes
from bridge.server.flavor import Flavor
from bridge.wire import binlog

log = logging.getLogger(__name__)
# Errors that mean a replayed DDL already took effect before a crash.
DDL_ALREADY_DONE = {1007, 1008, 1050, 1051, 1054, 1060, 1061, 1091, 1146, 1176}


class StatementReplayer:
    def __init__(self) -> None:
        self.conn: pymysql.Connection | None = None
        self._collations: tuple[dict, bool] | None = None  # the replica's collations, has character_set_collations
        self._names: dict[str, str] | None = None  # the replica's collation names (catalog.collation_names)
        self.primary_collations: dict[int, str] = {}  # the primary's names (its side says them in the hello)
        self.accounts = False  # replay account management (decided at start: bridge.apply.applier)
        self.accounts_replayed = self.accounts_left_out = 0

    def attach(self, conn: pymysql.Connection) -> None:
        self.conn = conn

    def run(self, context: str, st: Statement, fmt: binlog.FormatDescription | None, mode: str,
            same_flavor: bool, after_crash: bool, head: list[bytes] = (), after: list[bytes] = ()) -> bool:
        """``after_crash``: this statement's transaction was marked pending when the
        applier stopped, so it may have taken effect already. ``head`` runs right before
        the statement, ``after`` right after it (GTID_NEXT: the statement commits with
        the primary's GTID). False: not replayed (``head`` did not run)."""
        kind = sql.statement_kind(st.sql)
        if kind == "flush" or (kind == "account" and not (self.accounts and same_flavor)):
            self.accounts_left_out += kind == "account"
            why = "" if kind == "flush" else " (--account-statements)" if same_flavor else \
                " (another flavor's accounts: authentication plugins and privileges differ)"
            log.info("%s: %s statement not replayed on the replica%s: %.60s", context, kind, why, st.sql)
            return False
        self.accounts_replayed += kind == "account"
        plan = self._plan(context, st, fmt, same_flavor, not sql.commits_implicitly(st.sql))
        trigger = replay.created_trigger(plan.text) if mode == "sql" else None
        if trigger:
            raise ApplyError(f"{context}: the primary created trigger {trigger}; apply mode sql cannot keep it "
                             "from firing for replicated rows (native replication never fires it): restart the "
                             "replica side with --apply-mode binlog (same flavor on both sides)")
        with self.conn.cursor() as cur:
            if plan.session:  # MySQL takes some of these only outside a transaction: none is open
                run_script(self.conn, f"{context}: session of the statement", list(plan.session))
            try:
                self._execute(cur, context, plan, after_crash, head, after)
            finally:
                if plan.session:
                    run_script(self.conn, f"{context}: restore the session",
                               [*plan.restore, session_setup(mode == "sql").encode()])
        return True

    def _plan(self, context: str, st: Statement, fmt, same_flavor: bool, in_transaction: bool) -> replay.Replay:
        if not st.raw:
            plan = replay.Replay(st.schema, (), st.sql.encode(), st.sql)
        elif fmt is None:
            raise RemoteProtocolError(f"{context}: raw binlog events before any FORMAT_DESCRIPTION event")
        else:
            plan = replay.statements(st.raw, fmt.checksum_bytes, same_flavor, self._replica_collations(),
                                     in_transaction, Flavor.of(self.conn).is_mysql)
        if same_flavor:
            return plan
        # the other flavor's collations (MySQL's utf8mb4_0900 on MariaDB): the character set's default here
        return dataclasses.replace(plan, sql=replay.portable_collations(plan.sql, self._collation_names()))

    def _collation_names(self) -> dict[str, str]:
        if self._names is None:
            with self.conn.cursor() as cur:
                self._names = catalog.collation_names(cur)
            self.conn.commit()  # MySQL reads information_schema in a transaction, which the session's SETs refuse
        return self._names

    def _execute(self, cur, context: str, plan: replay.Replay, after_crash: bool, head: list[bytes],
                 after: list[bytes]) -> None:
        if plan.schema:
            try:
                cur.execute(f"USE {sql.quote_name(plan.schema)}")
            except pymysql.MySQLError as exc:
                if exc.args[0] != errorcodes.UNKNOWN_DATABASE:  # CREATE DATABASE x runs "in" x
                    raise apply_error(f"{context}: USE {plan.schema}", exc) from exc
        try:
            for statement in head:
                cur.execute(statement)
            try:
                cur.execute(sql.TAG.encode() + plan.sql)
            finally:
                for statement in after:
                    cur.execute(statement)
            # still in the statement's session: ALTER EVENT records the sql_mode it runs in
            self._disable_event(cur, replay.event_to_disable(plan.text, plan.schema),
                                None if replay.names_definer(plan.text) else plan.invoker)
        except pymysql.MySQLError as exc:
            if after_crash and exc.args[0] in DDL_ALREADY_DONE:
                log.warning("%s: DDL already applied before a restart (%s); continuing", context, exc.args[-1])
                return
            raise apply_error(f"{context} DDL in schema '{plan.schema}' ({plan.text[:200]})", exc) from exc

    def _disable_event(self, cur, name: str | None, invoker: tuple[str, str] | None) -> None:
        """An event the primary created or altered does not run on the replica (DISABLE
        ON SLAVE). Its definer is the one the statement named, else the user who ran it
        on the primary (the event's invoker), as the native replica's SQL thread takes
        it; never the applier's own user."""
        if name is None:
            return
        schema, event = [part.strip("`").replace("``", "`") for part in name.split("`.`")]
        cur.execute("SELECT DEFINER FROM information_schema.EVENTS WHERE EVENT_SCHEMA=%s AND EVENT_NAME=%s",
                    (schema, event))
        row = cur.fetchone()
        if row is None:
            self.conn.commit()  # the read's snapshot (MySQL opens one), after the event's DDL: nothing else
            return
        user, host = invoker or row[0].rsplit("@", 1)
        cur.execute(f"{sql.TAG}ALTER DEFINER={self.conn.escape(user)}@{self.conn.escape(host)} EVENT {name} "
                    "DISABLE ON SLAVE")

    def _replica_collations(self) -> replay.ReplicaCollations:
        """The replica server's collations (read once) and the primary's names for them."""
        if self._collations is None:
            with self.conn.cursor() as cur:
                self._collations = (catalog.read_collations(cur),
                                    catalog.has_variable(cur, "character_set_collations"))
            self.conn.commit()  # MySQL reads information_schema in a transaction, which the session's SETs refuse
        return replay.ReplicaCollations(*self._collations, self.primary_collations)
