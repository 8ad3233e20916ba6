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
from bridge.errors import ConsistencyError

SYSTEM_SCHEMAS = {"mysql", "information_schema", "performance_schema", "sys", "rdma_bridge"}


@dataclass(frozen=True, slots=True)
class TableDigest:
    rows: int
    sha256: str


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
            raise ConsistencyError("compare: " + "; ".join(
                f"{d.table}: {d.missing} rows missing on the replica, {d.extra} extra" for d in self.diffs))


def engine(url: MysqlUrl) -> sa.Engine:
    return sa.create_engine(sa.URL.create("mysql+pymysql", username=url.user, password=url.password,
                                          host=url.host, port=url.port, query={"charset": "utf8mb4"}),
                            poolclass=sa.pool.NullPool)


def list_tables(eng: sa.Engine, schemas: list[str] | None) -> list[tuple[str, str]]:
    insp = sa.inspect(eng)
    names = schemas or [s for s in insp.get_schema_names() if s not in SYSTEM_SCHEMAS]
    return [(s, t) for s in names if s in insp.get_schema_names() for t in insp.get_table_names(schema=s)]


def table_rows(conn: sa.Connection, schema: str, table: str) -> Counter:
    conn.exec_driver_sql("SET SESSION time_zone='+00:00'")
    result = conn.exec_driver_sql(f"SELECT * FROM `{schema}`.`{table}`")
    return Counter(tuple(row) for row in result)


def digest(rows: Counter) -> TableDigest:
    h = hashlib.sha256()
    for row in sorted(rows.elements(), key=repr):
        h.update(repr(row).encode())
    return TableDigest(sum(rows.values()), h.hexdigest())


ABSENT = Counter({("<table absent>",): 1})


def compare_databases(primary: MysqlUrl, replica: MysqlUrl, schemas: list[str] | None = None) -> Comparison:
    p_eng, r_eng = engine(primary), engine(replica)
    p_tables, r_tables = set(list_tables(p_eng, schemas)), set(list_tables(r_eng, schemas))
    result = Comparison()
    with p_eng.connect() as p, r_eng.connect() as r:
        for schema, table in sorted(p_tables | r_tables):
            a = table_rows(p, schema, table) if (schema, table) in p_tables else ABSENT
            b = table_rows(r, schema, table) if (schema, table) in r_tables else ABSENT
            _record(result, f"{schema}.{table}", a, b)
    p_eng.dispose()
    r_eng.dispose()
    return result


def _record(result: Comparison, name: str, a: Counter, b: Counter) -> None:
    result.digests[name] = (digest(a), digest(b))
    missing, extra = a - b, b - a
    if missing or extra:
        sample = tuple(list(missing.elements())[:3] + list(extra.elements())[:3])
        result.diffs.append(TableDiff(name, sum(missing.values()), sum(extra.values()), sample))
