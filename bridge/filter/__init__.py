"""What a channel replicates: the rules (``Filter``), and a transaction's changes as
the channel replicates them (``filter_changes``), in either apply mode (pure).

Row changes of tables the channel does not replicate are dropped; a statement (DDL,
statement-format DML) is dropped when every table it changes is filtered out, kept
when none is, and stops applying when it mixes both (e.g. a RENAME TABLE from a
replicated schema into another): the replica could not follow it faithfully. Schema
renames apply to row changes, TABLE_MAP events and statements alike. A transaction
whose changes are all dropped is still applied: it moves the channel's position.
"""

from __future__ import annotations

from dataclasses import replace

from bridge.errors import ApplyError
from bridge.filter.events import filter_row_events, rewrite_query
from bridge.filter.rules import EVERYTHING, Filter
from bridge.filter.sqltext import rename, targets
from bridge.model import RowChange, RowEvents, Statement
from bridge.server.sqlnames import SCHEMA
from bridge.wire import binlog

__all__ = ["EVERYTHING", "Filter", "filter_changes", "statement_kept", "touches_foreign"]


def touches_foreign(changes: tuple, rules: Filter) -> bool:
    """The changes write a rdma_bridge table another channel owns (a checksum or repair
    of that channel): cheap for the rest, asked of every transaction of a channel that
    otherwise applies everything as it came."""
    if not rules.channel_token:
        return False
    for change in changes:
        if isinstance(change, RowEvents):
            tables = change.tables
        elif isinstance(change, RowChange):
            tables = ((change.schema, change.table),)
        elif SCHEMA in change.sql:
            tables = tuple((t.schema, t.table) for t in targets(change.sql.encode("utf-8"), change.schema) or ())
        else:
            continue
        for schema, table in tables:
            if schema == SCHEMA and rules.foreign(table):
                return True
    return False


def filter_changes(changes: tuple, rules: Filter, checksum_bytes: int, context: str) -> tuple:
    out = []
    for change in changes:
        if isinstance(change, RowEvents):
            change = filter_row_events(change, rules, checksum_bytes)
        elif isinstance(change, RowChange):
            if not rules.keeps(change.schema, change.table):
                continue
            target = rules.target(change.schema)
            change = change if target == change.schema else replace(change, schema=target)
        elif isinstance(change, Statement):
            change = _statement(change, rules, checksum_bytes, context)
        if change is not None:
            out.append(change)
    return tuple(out)


def statement_kept(sql: bytes, schema: str, rules: Filter, context: str = "statement") -> bool:
    """Whether the channel replicates a statement run in default schema ``schema``."""
    found = targets(sql, schema)
    if found is None:
        return not schema or rules.keeps_schema(schema)
    kept = [(rules.keeps(t.schema, t.table) if t.table else rules.keeps_schema(t.schema))
            and not (t.objects and rules.holds(t.schema, "")) for t in found]
    if all(kept) or not any(kept):
        return all(kept)
    names = ", ".join(f"{t.schema}.{t.table}" if t.table else t.schema for t in found)
    raise ApplyError(f"{context}: the statement changes tables this channel replicates and tables it filters "
                     f"out ({names}): {sql[:200].decode('utf-8', 'replace')}; do its replicated part on the replica "
                     "by hand and skip it (rdma-bridge skip), or change the filter")


def _statement(st: Statement, rules: Filter, checksum_bytes: int, context: str) -> Statement | None:
    if not statement_kept(st.sql.encode("utf-8"), st.schema, rules, context):
        return None
    if not rules.renames:
        return st
    renames, schema = dict(rules.renames), rules.target(st.schema)
    raw = st.raw
    if raw:
        *before, query = binlog.split_events(raw)
        text = binlog.parse_query(query, checksum_bytes).sql
        raw = b"".join(before) + rewrite_query(query, checksum_bytes, schema, rename(text, renames))
    return Statement(schema, rename(st.sql.encode("utf-8"), renames).decode("utf-8"), raw)
