"""Row changes to SQL (pure): statement templates with %s parameters.

Rows are matched by primary key; a table without one is matched on every column
of the before image with the NULL-safe ``<=>`` and ``LIMIT 1``, so a duplicate row
is changed exactly once. Every statement carries the ``/* rdma-bridge */`` tag.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable
from decimal import Decimal
from typing import NamedTuple

from bridge.apply.scheduler import fold  # one definition of "may be the same key"
from bridge.model import BitValue, InvalidTemporal, RowChange
from bridge.server.sqlnames import HEARTBEAT, META, quote_name, table_name

TAG = "/* rdma-bridge */ "


def to_param(v):
    """A wire value as a parameter PyMySQL escapes exactly."""
    t = type(v)
    if t is InvalidTemporal:
        return v.text
    if t is BitValue:
        return v.value
    if t is frozenset or t is set:
        return ",".join(sorted(v))
    return v


def decimal_literal(v: Decimal, mapping=None) -> str:
    """Plain notation: PyMySQL's str() gives '0E-10', which SQL reads as a DOUBLE."""
    return format(v, "f")


def time_literal(v: dt.timedelta, mapping=None) -> str:
    """PyMySQL renders negative timedeltas wrongly (-1.25 s as '-1:59:58.75')."""
    micros = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    sign = "-" if micros < 0 else ""
    secs, frac = divmod(abs(micros), 1_000_000)
    return f"'{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}.{frac:06d}'"


LITERAL_ENCODERS = {Decimal: decimal_literal, dt.timedelta: time_literal}


def row_statement(c: RowChange) -> tuple[str, list]:
    name = table_name(c.schema, c.table)
    if c.kind == "insert":
        cols = ",".join(map(quote_name, c.columns))
        marks = ",".join(["%s"] * len(c.columns))
        return f"{TAG}INSERT INTO {name} ({cols}) VALUES ({marks})", [to_param(v) for v in c.after]
    where, where_params = _match(c)
    if c.kind == "update":
        sets = ",".join(f"{quote_name(col)}=%s" for col in c.columns)
        return f"{TAG}UPDATE {name} SET {sets} WHERE {where}", [to_param(v) for v in c.after] + where_params
    return f"{TAG}DELETE FROM {name} WHERE {where}", where_params


def _match(c: RowChange) -> tuple[str, list]:
    if c.key:
        index = {col: i for i, col in enumerate(c.columns)}
        return (" AND ".join(f"{quote_name(k)}=%s" for k in c.key),
                [to_param(c.before[index[k]]) for k in c.key])
    return (" AND ".join(f"{quote_name(col)}<=>%s" for col in c.columns) + " LIMIT 1",
            [to_param(v) for v in c.before])


# An upsert, so the position is written even if its row vanished: it can never
# silently match nothing while the rows it describes commit.
POSITION_WRITE = (f"{TAG}INSERT INTO {META} (channel, applied_seq, gtid_set, pending_ddl_seq) "
                  "VALUES (%s, %s, %s, 0) ON DUPLICATE KEY UPDATE applied_seq=VALUES(applied_seq), "
                  "gtid_set=VALUES(gtid_set), pending_ddl_seq=0")


def position_write(escape, channel: str, seq: int, gtids) -> bytes:
    """POSITION_WRITE with its values, escaped by the connection's ``escape``."""
    return (POSITION_WRITE % (escape(channel), escape(seq), escape(str(gtids)))).encode()


DDL_PENDING = f"{TAG}UPDATE {META} SET pending_ddl_seq=%s WHERE channel=%s"
HEARTBEAT_UPSERT = f"{TAG}REPLACE INTO {HEARTBEAT} (source, ts_us) VALUES (%s, %s)"
HEARTBEAT_DELETE = f"{TAG}DELETE FROM {HEARTBEAT} WHERE source=%s"
POSITION_SELECT = f"SELECT applied_seq, gtid_set, pending_ddl_seq FROM {META} WHERE channel=%s"
UNIQUE_KEYS_SELECT = ("SELECT index_name, column_name FROM information_schema.statistics WHERE table_schema=%s "
                      "AND table_name=%s AND non_unique=0 ORDER BY index_name='PRIMARY' DESC, index_name, seq_in_index")
ENGINE_SELECT = "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s"
# Engines whose writes commit at once, outside any transaction (MyISAM and the like).
NON_TRANSACTIONAL = frozenset({"myisam", "aria", "memory", "csv", "archive", "mrg_myisam", "merge", "blackhole",
                               "federated"})
POSITION_INSERT = (f"{TAG}INSERT INTO {META} (channel, applied_seq, gtid_set) "
                   "VALUES (%s, %s, %s)")


# Account management is replayed as a native replica does, where the apply user may
# manage accounts (start-replica --account-statements); FLUSH concerns the primary's own
# caches and logs, and is never replayed.
_ACCOUNT = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:(?:CREATE|DROP|ALTER|RENAME)\s+(?:USER|ROLE)\b|"
                      r"GRANT\b|REVOKE\b|SET\s+(?:PASSWORD|DEFAULT\s+ROLE)\b)", re.IGNORECASE | re.DOTALL)
_FLUSH = re.compile(r"^\s*(?:/\*.*?\*/\s*)*FLUSH\b", re.IGNORECASE | re.DOTALL)


# Statements that run inside the replica's transaction; any other (DDL) commits implicitly.
# MySQL 8's CREATE TABLE ... SELECT is logged as "CREATE TABLE ... START TRANSACTION" and
# its rows, one transaction (atomic DDL).
_IN_TRANSACTION = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:INSERT|UPDATE|DELETE|REPLACE|LOAD|SELECT|DO|CALL|SET|SAVEPOINT|"
                             r"RELEASE|ROLLBACK|XA)\b|\bSTART\s+TRANSACTION\s*$", re.IGNORECASE | re.DOTALL)


def commits_implicitly(statement_sql: str) -> bool:
    """The statement ends the transaction it runs in (DDL), as opposed to
    statement-format DML, which runs inside it."""
    return not _IN_TRANSACTION.search(statement_sql)


def statement_kind(statement_sql: str) -> str:
    """account (users, roles, grants, passwords), flush, or other."""
    if _ACCOUNT.match(statement_sql):
        return "account"
    return "flush" if _FLUSH.match(statement_sql) else "other"


MAX_ROWS_PER_STATEMENT = 500


class Planned(NamedTuple):
    """A statement to run: ``expect`` rows must match it (None: no count to check)."""

    text: str
    params: list
    change: RowChange  # the first change it covers (named in errors)
    expect: int | None
    rows: int  # row changes it covers


def grouped_statements(changes, referenced: Callable[[str, str], bool] = lambda _s, _t: False) -> list[Planned]:
    """Row changes as statements, consecutive changes of one kind on one table merged:
    INSERTs into one multi-row INSERT; UPDATEs that keep their primary key into one
    DELETE of the keys (which must match every key) and one multi-row INSERT of the
    final images; DELETEs by key into one DELETE ... IN. A keyless table, a key
    change or a key repeated within a delete run ends a run, so every merged
    statement changes exactly the rows the one-by-one statements would. Updates of a
    table other tables' foreign keys reference (``referenced``) stay UPDATEs: a DELETE
    would cascade to, or be refused by, the rows that point at it."""
    out: list[Planned] = []
    run: list[RowChange] = []
    seen: dict = {}  # folded key -> the run's last change of that row
    for change in changes:
        key = _folded_key(change) if change.kind != "insert" else None
        mergeable = change.kind == "insert" or (change.key and not (change.kind == "update" and (
            _key_changes(change) or referenced(change.schema, change.table))))
        if run and not (mergeable and len(run) < MAX_ROWS_PER_STATEMENT and _same_run(run[0], change)
                        and not (change.kind == "delete" and key in seen)):
            out.extend(_merged(run, seen))
            run, seen = [], {}
        if not mergeable:
            out.append(Planned(*row_statement(change), change, 1, 1))
            continue
        run.append(change)
        seen[key] = change
    if run:
        out.extend(_merged(run, seen))
    return out


def _same_run(a: RowChange, b: RowChange) -> bool:
    return a.kind == b.kind and a.table == b.table and a.schema == b.schema and a.columns == b.columns and \
        a.flags == b.flags


def without_columns(c: RowChange, dropped: frozenset[str]) -> RowChange:
    """The change without the ``dropped`` columns (the replica computes its generated
    columns itself; a value sent for one is an error)."""
    if not dropped or not dropped.intersection(c.columns):
        return c
    keep = [i for i, col in enumerate(c.columns) if col not in dropped]

    def pick(image):
        return None if image is None else tuple(image[i] for i in keep)

    return RowChange(c.kind, c.schema, c.table, tuple(c.columns[i] for i in keep), c.key, pick(c.before),
                     pick(c.after), c.flags)


TRAITS_SELECT = ("SELECT (SELECT GROUP_CONCAT(COLUMN_NAME SEPARATOR '\\0') FROM information_schema.COLUMNS "
                 "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                 "AND (EXTRA LIKE '%%VIRTUAL GENERATED%%' OR EXTRA LIKE '%%STORED GENERATED%%')), "  # not MySQL's
                 # DEFAULT_GENERATED (an expression default): a column the row still carries
                 "EXISTS (SELECT 1 FROM information_schema.REFERENTIAL_CONSTRAINTS "
                 "WHERE UNIQUE_CONSTRAINT_SCHEMA=%s AND REFERENCED_TABLE_NAME=%s)")


def _key_index(c: RowChange) -> tuple[int, ...]:
    return _positions(c.columns, c.key)


@functools.lru_cache(maxsize=1024)
def _positions(columns: tuple[str, ...], key: tuple[str, ...]) -> tuple[int, ...]:
    index = {col: i for i, col in enumerate(columns)}
    return tuple(index[k] for k in key)


def _key_changes(c: RowChange) -> bool:
    return any(c.before[i] != c.after[i] for i in _key_index(c))


def _folded_key(c: RowChange):
    return tuple(fold(c.before[i]) for i in _key_index(c)) if c.key and c.before is not None else None


def _merged(run: list[RowChange], final: dict) -> list[Planned]:
    """``final``: folded key -> last change of that row (an update repeated on one row:
    its last image wins)."""
    first = run[0]
    if len(run) == 1:
        return [Planned(*row_statement(first), first, None if first.kind == "insert" else 1, 1)]
    if first.kind == "insert":
        return [_insert_many(run)]
    delete = Planned(*_delete_keys(list(final.values())), first, len(final), len(run))
    if first.kind == "delete":
        return [delete]
    images = [RowChange("insert", c.schema, c.table, c.columns, c.key, None, c.after) for c in final.values()]
    return [delete, _insert_many(images)._replace(rows=0)]


def _delete_keys(run: list[RowChange]) -> tuple[str, list]:
    first = run[0]
    idx = _key_index(first)
    name = table_name(first.schema, first.table)
    if len(idx) == 1:
        where = f"{quote_name(first.key[0])} IN ({','.join(['%s'] * len(run))})"
        return f"{TAG}DELETE FROM {name} WHERE {where}", [to_param(c.before[idx[0]]) for c in run]
    one = "(" + " AND ".join(f"{quote_name(k)}=%s" for k in first.key) + ")"
    return (f"{TAG}DELETE FROM {name} WHERE " + " OR ".join([one] * len(run)),
            [to_param(c.before[i]) for c in run for i in idx])


def _insert_many(run: list[RowChange]) -> Planned:
    first = run[0]
    if len(run) == 1:
        return Planned(*row_statement(first), first, None, 1)
    cols = ",".join(map(quote_name, first.columns))
    marks = "(" + ",".join(["%s"] * len(first.columns)) + ")"
    params = [to_param(v) for c in run for v in c.after]
    sql = f"{TAG}INSERT INTO {table_name(first.schema, first.table)} ({cols}) VALUES " + ",".join([marks] * len(run))
    return Planned(sql, params, first, None, len(run))
