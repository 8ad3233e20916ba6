"""Key ranges of a table: the key a chunked walk orders by (the primary key, else a
unique index of NOT NULL columns) and ``lower < key <= upper`` as SQL. The checksum's
chunks and clone's copy walk tables by them."""

from __future__ import annotations

from bridge.server.sqlnames import as_str, quote_name


def unique_key(cur, db: str, tbl: str, refused_types: tuple[str, ...] = ()) -> tuple[str | None, tuple[str, ...]]:
    """(index, its columns): the primary key, else a unique index of NOT NULL columns,
    none with a column of ``refused_types``; (None, ()) when there is none."""
    cur.execute("SELECT s.index_name, s.column_name, c.is_nullable, c.data_type FROM information_schema.statistics s "
                "JOIN information_schema.columns c ON c.table_schema=s.table_schema AND c.table_name=s.table_name "
                "AND c.column_name=s.column_name WHERE s.table_schema=%s AND s.table_name=%s AND s.non_unique=0 "
                "ORDER BY s.index_name='PRIMARY' DESC, s.index_name, s.seq_in_index", (db, tbl))
    keys: dict[str, list] = {}
    for index, column, nullable, data_type in cur.fetchall():
        keys.setdefault(as_str(index), []).append((as_str(column), as_str(nullable), as_str(data_type).lower()))
    for index, cols in keys.items():
        if all(n == "NO" and t not in refused_types for _, n, t in cols):
            return index, tuple(c for c, _, _ in cols)
    return None, ()



def range_sql(cur, key: tuple[str, ...], lower: tuple | None, upper: tuple | None) -> str:
    """``lower < key <= upper`` as SQL on the key's columns (expanded, so the optimizer
    uses the index on MariaDB too); None: unbounded."""
    parts = []
    if lower is not None:
        parts.append(_compare(cur, key, lower, ">"))
    if upper is not None:
        parts.append(_compare(cur, key, upper, "<="))
    return " AND ".join(parts) or "1=1"


def _compare(cur, key, values, op: str) -> str:
    strict = op.rstrip("=")
    ors = []
    for i in range(len(key)):
        eqs = [f"{quote_name(key[j])} = {cur.mogrify('%s', (values[j],))}" for j in range(i)]
        last_op = op if i == len(key) - 1 else strict
        ors.append("(" + " AND ".join([*eqs, f"{quote_name(key[i])} {last_op} {cur.mogrify('%s', (values[i],))}"])
                   + ")")
    return "(" + " OR ".join(ors) + ")"
