"""Compare two databases row by row (tests, demo, `rdma-bridge verify`).

Rows are compared as multisets, so tables without a key that hold duplicate rows
are compared exactly (a duplicate lost or doubled is a mismatch). Each table also
gets a digest: row count + sha256 over the sorted rows, the same on both sides
when the rows are.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

import sqlalchemy as sa

from bridge.config import MysqlUrl
from bridge.errors import CheckError, ConsistencyError
from bridge.filter import EVERYTHING, Filter
from bridge.server import dbconn, errorcodes, sqlnames
from bridge.server.sqlnames import quote_name

SYSTEM_SCHEMAS = set(sqlnames.SYSTEM_SCHEMAS)


@dataclass(frozen=True, slots=True)
class TableDigest:
    rows: int
    sha256: str
    present: bool = True  # False: the table does not exist on this side (rows 0)


@dataclass(frozen=True, slots=True)
class TableDiff:
    table: str
    missing: int  # rows on the primary, not on the replica
    extra: int  # rows on the replica, not on the primary
    sample: tuple = ()


@dataclass
class Comparison:
    digests: dict[str, tuple[TableDigest, TableDigest]] = field(default_factory=dict)
    diffs: list[TableDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.diffs

    def raise_if_different(self) -> None:
        if self.diffs:
            raise ConsistencyError("compare: " + "; ".join(self.explain(d) for d in self.diffs))

    def explain(self, diff: TableDiff) -> str:
        primary, replica = self.digests[diff.table]
        if not replica.present:
            return f"{diff.table}: only on the primary ({primary.rows} rows)"
        if not primary.present:
            return f"{diff.table}: only on the replica ({replica.rows} rows)"
        return f"{diff.table}: {diff.missing} rows missing on the replica, {diff.extra} extra"


def engine(url: MysqlUrl) -> sa.Engine:
    """Connections made from the whole URL (``MysqlUrl.connect_args``: its ssl-*, socket
    and defaults-file too), as every other connection of the bridge."""
    return sa.create_engine("mysql+pymysql://", creator=lambda: dbconn.connect(url), poolclass=sa.pool.NullPool)


def list_tables(eng: sa.Engine, schemas: list[str] | None) -> list[tuple[str, str]]:
    insp = sa.inspect(eng)
    names = schemas or [s for s in insp.get_schema_names() if s not in SYSTEM_SCHEMAS]
    return [(s, t) for s in names if s in insp.get_schema_names() for t in insp.get_table_names(schema=s)]


def table_rows(conn: sa.Connection, schema: str, table: str) -> Counter:
    """Every column, invisible ones too (``SELECT *`` leaves out MySQL's INVISIBLE columns,
    a generated invisible primary key among them); a VECTOR as hex (the driver has no
    conversion for it)."""
    conn.exec_driver_sql("SET SESSION time_zone='+00:00'")
    columns = conn.exec_driver_sql("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE "
                                   "TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (schema, table))
    select = ", ".join(f"HEX({quote_name(name)})" if kind.lower() == "vector" else quote_name(name)
                       for name, kind in columns) or "*"
    result = conn.exec_driver_sql(f"SELECT {select} FROM {quote_name(schema)}.{quote_name(table)}")
    return Counter(tuple(row) for row in result)




def _visible(conn: sa.Connection, schema: str, table: str) -> bool:
    """True when the table is there but hidden from this user; False when it is absent."""
    try:
        conn.exec_driver_sql(f"SELECT 1 FROM `{schema}`.`{table}` LIMIT 0")
    except sa.exc.DBAPIError as exc:
        if getattr(exc.orig, "args", (0,))[0] in errorcodes.NO_SELECT:
            return True
        return False
    return True


def _fail(what: str, url: MysqlUrl, exc: sa.exc.SQLAlchemyError) -> CheckError:
    orig = getattr(exc, "orig", None)
    detail = orig.args[-1] if orig is not None and getattr(orig, "args", None) else str(exc).splitlines()[0]
    code = orig.args[0] if orig is not None and getattr(orig, "args", None) else 0
    fix = f"; it needs SELECT on every compared table (GRANT SELECT ON *.* TO {url.user})" \
        if code in errorcodes.NO_SELECT else ""
    return CheckError(f"compare: {what} on {url}: {detail}{fix}")


def digest(rows: Counter) -> TableDigest:
    h = hashlib.sha256()
    for row in sorted(rows.elements(), key=repr):
        h.update(repr(row).encode())
    return TableDigest(sum(rows.values()), h.hexdigest())


ABSENT = Counter({("<table absent>",): 1})


def compare_databases(primary: MysqlUrl, replica: MysqlUrl, schemas: list[str] | None = None,
                      rules: Filter = EVERYTHING) -> Comparison:
    """Row by row, the tables ``rules`` replicates (``schemas``: the primary's names),
    each against its replica namesake (renamed schemas followed). Raises CheckError
    (never a difference, never a match) when a server cannot be reached, a named
    schema is unknown, or a table cannot be read."""
    p_eng, r_eng = engine(primary), engine(replica)
    try:
        return _compare(p_eng, r_eng, primary, replica, schemas, rules)
    finally:
        p_eng.dispose()
        r_eng.dispose()


def _compare(p_eng, r_eng, primary: MysqlUrl, replica: MysqlUrl, schemas: list[str] | None,
             rules: Filter) -> Comparison:
    tables = {}
    for side, eng, url in (("primary", p_eng, primary), ("replica", r_eng, replica)):
        names = schemas if side == "primary" or not schemas else [rules.target(s) for s in schemas]
        try:
            listed = list_tables(eng, names)
            known = set(sa.inspect(eng).get_schema_names())
        except sa.exc.SQLAlchemyError as exc:
            raise _fail(f"list the tables of the {side}", url, exc) from exc
        unknown = [s for s in names or () if s not in known]
        if unknown:
            raise CheckError(f"compare: schema {', '.join(unknown)} is unknown on the {side} {url} (or "
                             f"{url.user} may not see it: it needs SELECT on it)")
        if side == "replica":  # by the primary's names
            listed = [(rules.source(s), t) for s, t in listed if rules.source(s) is not None]
        tables[side] = {(s, t) for s, t in listed if rules.keeps(s, t)}
    result = Comparison()
    with p_eng.connect() as p, r_eng.connect() as r:
        for schema, table in sorted(tables["primary"] | tables["replica"]):
            a = _rows(p, primary, "primary", schema, table, tables["primary"])
            b = _rows(r, replica, "replica", rules.target(schema), table,
                      {(rules.target(s), t) for s, t in tables["replica"]})
            into = rules.target(schema)
            _record(result, f"{schema}.{table}" + (f" -> {into}.{table}" if into != schema else ""), a, b)
    return result


def _rows(conn: sa.Connection, url: MysqlUrl, side: str, schema: str, table: str, listed: set) -> Counter:
    try:
        if (schema, table) in listed:
            return table_rows(conn, schema, table)
        if _visible(conn, schema, table):
            table_rows(conn, schema, table)  # raises the access error with its text
        return ABSENT
    except sa.exc.SQLAlchemyError as exc:
        raise _fail(f"read {schema}.{table} on the {side}", url, exc) from exc


def _record(result: Comparison, name: str, a: Counter, b: Counter) -> None:
    result.digests[name] = tuple(TableDigest(0, "", present=False) if rows is ABSENT else digest(rows)
                                 for rows in (a, b))
    if a is ABSENT:
        a = Counter()
    if b is ABSENT:
        b = Counter()
    missing, extra = a - b, b - a
    if missing or extra:
        sample = tuple(list(missing.elements())[:3] + list(extra.elements())[:3])
        result.diffs.append(TableDiff(name, sum(missing.values()), sum(extra.values()), sample))
