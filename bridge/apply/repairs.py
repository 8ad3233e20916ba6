"""How the replica side applies a `rdma-bridge repair` transaction (bridge/check/repair.py
writes it on the primary): its first row is a marker naming the table, the key range and
the copy table in ``rdma_bridge`` that the transaction's other rows fill with the
primary's rows of that range; once they are in, the replica's rows of the range are
replaced by the copy, in the same replica transaction as the position. Pure: the
statements, not their execution (bridge.apply.applier runs them)."""

from __future__ import annotations

from bridge.apply import sql
from bridge.errors import ApplyError
from bridge.model import RowEvents
from bridge.wire import tablemap

COPY_PREFIX = "repair_copy_"


def marker_fields(first, checksum_bytes: int) -> dict:
    """The marker row's columns by name (db, tbl, copy_table, where_sql, ...), from a raw
    row event (binlog apply mode) or a decoded row change (sql mode)."""
    if isinstance(first, RowEvents):
        table, _, _, after = next(tablemap.rows_of(first.data, checksum_bytes))
        return {name: tablemap.as_text(v, table.collations[i]) for i, (name, v) in enumerate(zip(table.names, after))}
    return dict(zip(first.columns, first.after))


def replace_range(context: str, db: str, fields: dict, position: bytes, sql_mode: bool) -> list[bytes]:
    """The statements that replace the replica's rows of the marker's range in ``db``
    (the channel's name for the marker's schema) by the copy, then record ``position``
    and commit; foreign keys off meanwhile (the rows are replaced, nothing cascades)."""
    tbl, copy, where = fields["tbl"], fields["copy_table"], fields["where_sql"]
    if not str(copy).startswith(COPY_PREFIX):
        raise ApplyError(f"{context}: repair marker names copy table {copy!r}")
    return [b"SET SESSION foreign_key_checks=0",
            f"{sql.TAG}DELETE FROM {sql.table_name(db, tbl)} WHERE {where}".encode(),
            f"{sql.TAG}INSERT INTO {sql.table_name(db, tbl)} SELECT * FROM "
            f"{sql.table_name('rdma_bridge', copy)}".encode(),
            position, b"COMMIT",
            b"SET SESSION foreign_key_checks=%d" % sql_mode]
