"""Decoded rows into one replica connection as INSERT/UPDATE/DELETE (sql apply mode).

Statements come from bridge.apply.sql (merged where that changes exactly the same
rows); every UPDATE/DELETE must match the rows it is meant to (anything else is
divergence and raises, naming the table). What the replica's own tables decide is
read from it once per table (cleared after DDL): generated columns are left to the
replica to compute, and updates of tables that foreign keys reference stay UPDATEs.
``foreign_key_checks`` is switched off around rows the primary wrote with it off.
"""

from __future__ import annotations

import pymysql

from bridge.apply import sql
from bridge.apply.connection import apply_error
from bridge.errors import ApplyError, RemoteProtocolError
from bridge.model import GtidSet, RowChange

BATCH_SQL_BYTES = 4 << 20
UNCHECKED = object()  # a batch entry without a row count to check: position, COMMIT, session settings


class SqlRows:
    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.conn: pymysql.Connection | None = None
        self._traits: dict[tuple[str, str], tuple[frozenset[str], bool]] = {}

    def attach(self, conn: pymysql.Connection) -> None:
        self.conn = conn

    def forget(self) -> None:
        """The replica's tables may have changed (DDL)."""
        self._traits.clear()

    def run(self, context: str, seq: int, changes, gtids: GtidSet | None, extra: list[bytes] = (),
            head: list[bytes] = (), after: list[bytes] = ()) -> None:
        """``head`` (GTID_NEXT), the rows (+ the position and COMMIT when ``gtids`` is
        given, then ``after``). UPDATE/DELETE row counts are checked after the server
        ran the batch, so their COMMIT must wait for the check; INSERT-only work fails
        with an SQL error that stops the batch, so its COMMIT can travel in the same
        round trip. The caller rolls back on failure."""
        if any(not isinstance(c, RowChange) for c in changes):
            raise RemoteProtocolError(f"{context}: raw row events in an sql-mode session")
        unchecked = [(s.decode(), None, UNCHECKED) for s in head]
        statements = unchecked + self.statements(changes) + [(s.decode(), None, UNCHECKED) for s in extra]
        commit_in_batch = gtids is not None and all(c.kind == "insert" for c in changes)
        if gtids is not None:
            statements.append((sql.POSITION_WRITE, [self.channel, seq, str(gtids)], UNCHECKED))
        if commit_in_batch:
            statements += [("COMMIT", None, UNCHECKED)] + [(s.decode(), None, UNCHECKED) for s in after]
        self.run_batched(context, statements)
        if gtids is not None and not commit_in_batch:
            try:
                self.conn.commit()
            except pymysql.MySQLError as exc:  # a lost connection is retried (TargetConnectionLost)
                raise apply_error(f"{context}: COMMIT", exc) from exc
            if after:
                self.run_batched(context, [(s.decode(), None, UNCHECKED) for s in after])

    def statements(self, changes: list[RowChange]) -> list:
        """(text, params, what to check) for the rows."""
        changes = [sql.without_columns(c, self.traits(c.schema, c.table)[0]) for c in changes]
        out, checks = [], True
        for p in sql.grouped_statements(changes, lambda schema, table: self.traits(schema, table)[1]):
            if p.change.foreign_key_checks != checks:
                checks = p.change.foreign_key_checks
                out.append((f"SET SESSION foreign_key_checks={int(checks)}", None, UNCHECKED))
            out.append((p.text, p.params, (p.change, p.expect)))
        if not checks:
            out.append(("SET SESSION foreign_key_checks=1", None, UNCHECKED))
        return out

    def traits(self, schema: str, table: str) -> tuple[frozenset[str], bool]:
        """(generated columns, referenced by a foreign key) of a replica table."""
        cached = self._traits.get((schema, table))
        if cached is None:
            try:
                with self.conn.cursor() as cur:
                    cur.execute(sql.TRAITS_SELECT, (schema, table, schema, table))
                    generated, referenced = cur.fetchone()
            except pymysql.MySQLError as exc:  # a lost connection is retried after a reconnect
                raise apply_error(f"read the generated columns of {schema}.{table}", exc) from exc
            cached = (frozenset(generated.split("\0")) if generated else frozenset(), bool(referenced))
            self._traits[(schema, table)] = cached
        return cached

    def run_batched(self, context: str, statements: list) -> None:
        with self.conn.cursor() as cur:
            batch, size = [], 0
            for text, params, check in statements:
                rendered = cur.mogrify(text, params)
                batch.append((rendered, check))
                size += len(rendered)
                if size >= BATCH_SQL_BYTES:
                    _run(cur, context, batch)
                    batch, size = [], 0
            if batch:
                _run(cur, context, batch)


def _run(cur, context: str, batch: list) -> None:
    """One round trip; then check each UPDATE/DELETE matched exactly the rows it must."""
    index = 0
    try:
        cur.execute(";".join(text for text, _ in batch))
        while True:
            _check_matched(context, batch[index][1], cur.rowcount)
            index += 1
            if not cur.nextset():
                break
    except pymysql.MySQLError as exc:
        check = batch[index][1] if index < len(batch) else None
        change = check[0] if isinstance(check, tuple) else None
        where = f" on {change.schema}.{change.table}" if isinstance(change, RowChange) else ""
        raise apply_error(f"{context}{where}", exc) from exc


def _check_matched(context: str, check, rowcount: int) -> None:
    """``check``: (first change, rows it must match) for row statements, else UNCHECKED."""
    if check is UNCHECKED or check[1] is None:
        return
    change, expect = check
    if rowcount != expect:
        raise ApplyError(f"{context}: {change.kind} on {change.schema}.{change.table} "
                         f"matched {rowcount} rows, expected {expect}: the replica has diverged")
