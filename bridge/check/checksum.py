"""In-band chunked checksums (pt-table-checksum's method, through the bridge).

For each table, chunks are primary-key ranges (a NOT NULL unique key when there is no
primary key; the whole table as one chunk when there is neither, said in the output).
For each chunk the primary runs, with ``binlog_format=STATEMENT`` for its session:

    REPLACE INTO rdma_bridge.checksums__<channel> (..., this_cnt, this_crc) SELECT ..., COUNT(*), <hash> FROM t ...
    UPDATE rdma_bridge.checksums__<channel> SET master_cnt=<primary's>, master_crc=<primary's> WHERE <this chunk>

Both statements travel the binlog as statements, so the bridge replays them on the
replica at the same point of the stream: ``this_*`` is each server's own hash of the
same chunk, ``master_*`` the primary's. Concurrent writes cannot cause a false
mismatch. The tables are the channel's own (bridge.server.sqlnames.owned): another channel
into the same replica neither applies nor reads them. The hash: COUNT(*) and the SUMs
of each row's CRC32 and CRC32C (MD5 or SHA2 halves where a server lacks CRC32C, as
MySQL does: the best hash both servers have, bridge.server.flavor), over every
column with NULL markers: a duplicated row adds, it cannot cancel like a bare XOR of
CRC32s. The chunk size adapts to a target time per chunk; the run waits
while the replica falls behind; mismatches are recorded on the replica in the
channel's ``rdma_bridge.checksum_diffs__<channel>`` (table, key range, both sides' counts
and hashes), which `rdma-bridge repair --channel` reads.

``--offline``: both servers quiet and no bridge: each chunk's hash is computed on both
servers directly and compared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pymysql

from bridge.check.positions import primary_position, wait_for_replica
from bridge.check.ranges import range_sql, unique_key
from bridge.config import MysqlUrl
from bridge.errors import BridgeError, ConfigError
from bridge.filter import EVERYTHING, Filter
from bridge.server import dbconn, errorcodes, sqlnames
from bridge.server.flavor import Flavor
from bridge.server.sqlnames import SYSTEM_SCHEMAS, quote_name, table_name

log = logging.getLogger(__name__)
SCHEMA = sqlnames.SCHEMA
CHECKSUMS_DDL = """CREATE TABLE IF NOT EXISTS {table} (
  db VARCHAR(64) NOT NULL, tbl VARCHAR(64) NOT NULL, chunk INT NOT NULL,
  chunk_index VARCHAR(200) NULL, lower_boundary TEXT NULL, upper_boundary TEXT NULL,
  this_crc VARCHAR(64) NULL, this_cnt BIGINT NULL, master_crc VARCHAR(64) NULL, master_cnt BIGINT NULL,
  ts TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (db, tbl, chunk)) ENGINE=InnoDB"""
DIFFS_DDL = """CREATE TABLE IF NOT EXISTS {table} (
  id BIGINT AUTO_INCREMENT PRIMARY KEY, found_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  db VARCHAR(64) NOT NULL, tbl VARCHAR(64) NOT NULL, chunk INT NOT NULL, chunk_index VARCHAR(200) NULL,
  lower_boundary TEXT NULL, upper_boundary TEXT NULL, where_sql TEXT NOT NULL,
  master_cnt BIGINT NULL, master_crc VARCHAR(64) NULL, this_cnt BIGINT NULL, this_crc VARCHAR(64) NULL,
  repaired_at TIMESTAMP(6) NULL) ENGINE=InnoDB"""
SESSION = "SET SESSION time_zone='+00:00', sql_mode='NO_ENGINE_SUBSTITUTION'"
MIN_CHUNK_ROWS, MAX_CHUNK_ROWS, FIRST_CHUNK_ROWS = 100, 1_000_000, 1000


@dataclass(frozen=True, slots=True)
class TablePlan:
    db: str
    tbl: str
    columns: tuple[str, ...]
    index: str | None  # PRIMARY, a unique index, or None: one chunk
    key: tuple[str, ...]
    into: str = ""  # the replica's schema when the channel renames it

    @property
    def name(self) -> str:
        return table_name(self.db, self.tbl)

    @property
    def replica_name(self) -> str:
        return table_name(self.into or self.db, self.tbl)


@dataclass(frozen=True, slots=True)
class ChunkResult:
    db: str
    tbl: str
    chunk: int
    index: str | None
    lower: str | None
    upper: str | None
    where_sql: str
    master_cnt: int | None
    master_crc: str | None
    this_cnt: int | None
    this_crc: str | None

    @property
    def ok(self) -> bool:
        return (self.master_cnt, self.master_crc) == (self.this_cnt, self.this_crc)


@dataclass
class ChecksumRun:
    tables: int = 0
    chunks: int = 0
    rows: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    mismatches: list[ChunkResult] = field(default_factory=list)


def connect(url: MysqlUrl, what: str, **kwargs) -> pymysql.Connection:
    try:
        conn = dbconn.connect(url, autocommit=True, **kwargs)
    except pymysql.MySQLError as exc:
        raise BridgeError(f"checksum: connect to {what} {url}: {exc.args[-1] if exc.args else exc}") from exc
    with conn.cursor() as cur:
        cur.execute(SESSION)
    return conn


def row_hash_sql(columns: tuple[str, ...], hash_kind: str = "crc32c") -> str:
    """The chunk hash over every column with NULL markers, as sums (a duplicated row
    adds, it cannot cancel). ``hash_kind`` (bridge.server.flavor.ROW_HASHES): ``crc32c``, CRC32
    and CRC32C (two polynomials, 64 bits per row; ~3.6x faster than MD5 here; MariaDB
    10.8+); ``md5`` or ``sha2``, the two leading 64-bit halves of that digest (MySQL 9 has
    no MD5; both flavors have SHA2)."""
    cols = [quote_name(c) for c in columns]
    row = f"CONCAT_WS('#', {', '.join(cols)}, CONCAT({', '.join(f'ISNULL({c})' for c in cols)}))"
    if hash_kind == "crc32c":
        return f"CONCAT(COALESCE(SUM(CRC32({row})), 0), ':', COALESCE(SUM(CRC32C({row})), 0))"
    digest = {"md5": "MD5({row})", "sha2": "SHA2({row}, 256)"}[hash_kind].format(row=row)
    half = "CAST(CONV(SUBSTRING({digest}, {at}, 16), 16, 10) AS UNSIGNED)"
    return (f"CONCAT(COALESCE(SUM({half.format(digest=digest, at=1)}), 0), ':', "
            f"COALESCE(SUM({half.format(digest=digest, at=17)}), 0))")


def channel_filter(conn, channel: str) -> Filter:
    """What the channel replicates, as recorded on the replica (bridge.filter); every
    table when nothing is recorded, or when this user may not read the record (said)."""
    with conn.cursor() as cur:
        try:
            cur.execute(f"SELECT rules FROM {sqlnames.CHANNEL_FILTER} WHERE channel=%s", (channel,))
            row = cur.fetchone()
        except (pymysql.ProgrammingError, pymysql.OperationalError) as exc:
            if exc.args[0] == errorcodes.NO_SUCH_TABLE:  # no bridge of this version ran against this replica
                row = None
            elif exc.args[0] in (1142, 1044):
                log.warning("cannot read what channel %r replicates (%s): every table is compared; grant SELECT on "
                            "%s to this user to follow the channel's --include/--exclude/--rename-schema", channel,
                            exc.args[1], sqlnames.CHANNEL_FILTER)
                row = None
            else:
                raise
    return Filter.from_json(row[0]) if row and row[0] else EVERYTHING


def plan_tables(conn, schemas: list[str] | None, tables: list[str] | None,
                rules: Filter = EVERYTHING) -> list[TablePlan]:
    """The primary's tables to check: those named (default: all) that the channel replicates."""
    with conn.cursor() as cur:
        if schemas:
            cur.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE table_type='BASE TABLE' "
                        "AND table_schema IN %s ORDER BY 1, 2", (tuple(schemas),))
        else:
            cur.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE table_type='BASE TABLE' "
                        "AND table_schema NOT IN %s ORDER BY 1, 2", (SYSTEM_SCHEMAS,))
        names = [(db, t) for db, t in cur.fetchall() if (not tables or t in tables or f"{db}.{t}" in tables)
                 and rules.keeps(db, t) and db != SCHEMA]
        plans = []
        for db, tbl in names:
            cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema=%s AND table_name=%s "
                        "ORDER BY ordinal_position", (db, tbl))
            columns = tuple(r[0] for r in cur.fetchall())
            into = rules.target(db)
            plans.append(TablePlan(db, tbl, columns, *unique_key(cur, db, tbl), into if into != db else ""))
    return plans


def next_upper(cur, plan: TablePlan, lower: tuple | None, rows: int) -> tuple | None:
    cols = ", ".join(quote_name(c) for c in plan.key)
    where = range_sql(cur, plan.key, lower, None)
    cur.execute(f"SELECT {cols} FROM {plan.name} FORCE INDEX ({quote_name(plan.index)}) WHERE {where} "
                f"ORDER BY {cols} LIMIT {rows - 1}, 1")
    row = cur.fetchone()
    return tuple(row) if row else None


def _text(values: tuple | None) -> str | None:
    return None if values is None else ",".join(str(v) for v in values)




class Checksummer:
    """Runs the in-band checksum (or ``offline``) over the chosen tables."""

    def __init__(self, primary: MysqlUrl, replica: MysqlUrl, channel: str = "default", chunk_time_s: float = 0.5,
                 max_lag_chunks: int = 3, offline: bool = False, progress: Callable[[str], None] = log.info,
                 replica_wait_s: float = 300.0, max_rows_per_second: float = 0.0) -> None:
        """``max_rows_per_second``: rows hashed per second at most (0: no limit), so that
        a scheduled run can go at any hour without hurting the primary."""
        self.primary_url, self.replica_url, self.channel = primary, replica, channel
        self.max_rows_per_second = max_rows_per_second
        self._paced_rows, self._paced_since = 0, time.monotonic()
        self.chunk_time_s, self.max_lag_chunks, self.offline = chunk_time_s, max_lag_chunks, offline
        self.progress, self.replica_wait_s = progress, replica_wait_s
        self.primary = connect(primary, "primary")
        self.replica = connect(replica, "replica")
        self._wheres: dict[tuple[str, str, int], str] = {}
        # both sides run the same hash: the best both servers have (bridge.server.flavor)
        self.hash_kind = Flavor.of(self.primary).row_hash_with(Flavor.of(self.replica))
        self.checksums = f"{SCHEMA}.{quote_name(sqlnames.owned(sqlnames.CHECKSUMS, channel))}"  # the channel's own
        self.diffs = f"{SCHEMA}.{quote_name(sqlnames.owned(sqlnames.CHECKSUM_DIFFS, channel))}"
        self.rules = channel_filter(self.replica, channel)  # the tables it replicates, under the replica's names
        self._offline_results: list[ChunkResult] = []

    def close(self) -> None:
        self.primary.close()
        self.replica.close()

    def run(self, schemas: list[str] | None = None, tables: list[str] | None = None,
            only: list[ChunkResult] | None = None) -> ChecksumRun:
        """Every chunk of the chosen tables, or just the chunks ``only`` names (re-check)."""
        started = time.perf_counter()
        result = ChecksumRun()
        plans = plan_tables(self.primary, schemas, tables, self.rules)
        if only is not None:
            wanted = {(c.db, c.tbl) for c in only}
            plans = [p for p in plans if (p.db, p.tbl) in wanted]
        if not plans:
            raise ConfigError(f"checksum: no tables to check (schemas {schemas or 'all'}, tables {tables or 'all'}; "
                              f"channel {self.channel!r} replicates {self.rules.describe()})")
        if not self.offline:
            self._prepare_in_band()
        for plan in plans:
            result.tables += 1
            if plan.index is None:
                note = f"{plan.db}.{plan.tbl}: no primary or NOT NULL unique key: checked as one whole-table chunk"
                result.notes.append(note)
                self.progress(note)
            chunks = [c for c in only if (c.db, c.tbl) == (plan.db, plan.tbl)] if only is not None else None
            rows, n = self._table(plan, result, chunks)
            result.rows += rows
            result.chunks += n
        result.mismatches = self._offline_results if self.offline else self._collect(plans, only)
        if not self.offline:
            self._record(result.mismatches)
        result.seconds = time.perf_counter() - started
        return result

    # --- in-band -------------------------------------------------------------

    def _prepare_in_band(self) -> None:
        with self.primary.cursor() as cur:
            try:
                cur.execute("SET SESSION binlog_format='STATEMENT'")
            except pymysql.MySQLError as exc:
                raise BridgeError(f"checksum: SET SESSION binlog_format on the primary {self.primary_url}: "
                                  f"{exc.args[-1]} (the checksum user needs BINLOG ADMIN or SUPER)") from exc
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
            cur.execute(CHECKSUMS_DDL.format(table=self.checksums))

    def _table(self, plan: TablePlan, result: ChecksumRun, chunks: list[ChunkResult] | None) -> tuple[int, int]:
        size, lower, number, rows = FIRST_CHUNK_ROWS, None, 0, 0
        hash_sql = row_hash_sql(plan.columns, self.hash_kind)
        with self.primary.cursor() as cur:
            if chunks is not None:  # a re-check: the recorded ranges, as they were
                for c in chunks:
                    rows += self._chunk(cur, plan, c.chunk, c.where_sql, c.lower, c.upper, hash_sql)
                return rows, len(chunks)
            if not self.offline:  # a run's chunks replace the last run's whole table, not chunk by chunk
                cur.execute(f"DELETE FROM {self.checksums} WHERE db=%s AND tbl=%s", (plan.db, plan.tbl))
            while True:
                upper = next_upper(cur, plan, lower, size) if plan.index else None
                where = range_sql(cur, plan.key, lower, upper) if plan.index else "1=1"
                t0 = time.perf_counter()
                done = self._chunk(cur, plan, number, where, _text(lower), _text(upper), hash_sql)
                rows += done
                elapsed = time.perf_counter() - t0
                self._pace(done)
                number += 1
                if number % 10 == 0 or upper is None:
                    self.progress(f"{plan.db}.{plan.tbl}: {number} chunks, {rows} rows "
                                  f"({elapsed * 1000:.0f} ms for the last {size} rows)")
                if upper is None:
                    return rows, number
                size = int(min(MAX_CHUNK_ROWS, max(MIN_CHUNK_ROWS, size * self.chunk_time_s / max(elapsed, 1e-4))))
                lower = upper
                if not self.offline and number % self.max_lag_chunks == 0:
                    self._throttle()

    def _chunk(self, cur, plan: TablePlan, number: int, where: str, lower: str | None, upper: str | None,
               hash_sql: str) -> int:
        force = f" FORCE INDEX ({quote_name(plan.index)})" if plan.index else ""
        source = plan.name + force
        self._wheres[(plan.db, plan.tbl, number)] = where
        if self.offline:
            return self._offline_chunk(plan, number, where, lower, upper, *(
                f"SELECT COUNT(*), {hash_sql} FROM {name}{force} WHERE {where}" for name in (plan.name,
                                                                                              plan.replica_name)))
        cur.execute(f"REPLACE INTO {self.checksums} (db, tbl, chunk, chunk_index, lower_boundary, upper_boundary, "
                    f"this_cnt, this_crc) SELECT %s, %s, %s, %s, %s, %s, COUNT(*), {hash_sql} FROM {source} "
                    f"WHERE {where}", (plan.db, plan.tbl, number, plan.index, lower, upper))
        cur.execute(f"SELECT this_cnt, this_crc FROM {self.checksums} WHERE db=%s AND tbl=%s AND chunk=%s",
                    (plan.db, plan.tbl, number))
        cnt, crc = cur.fetchone()
        cur.execute(f"UPDATE {self.checksums} SET master_cnt=%s, master_crc=%s WHERE db=%s AND tbl=%s AND chunk=%s",
                    (cnt, crc, plan.db, plan.tbl, number))
        return int(cnt)

    def _offline_chunk(self, plan, number, where, lower, upper, select: str, replica_select: str) -> int:
        values = []
        for conn, select in ((self.primary, select), (self.replica, replica_select)):
            with conn.cursor() as cur:
                cur.execute(select)
                values.append(cur.fetchone())
        (p_cnt, p_crc), (r_cnt, r_crc) = values
        chunk = ChunkResult(plan.db, plan.tbl, number, plan.index, lower, upper, where, int(p_cnt), p_crc,
                            int(r_cnt), r_crc)
        if not chunk.ok:
            self._offline_results.append(chunk)
        return int(p_cnt)

    def _pace(self, rows: int) -> None:
        """Sleep as long as ``max_rows_per_second`` asks, counted from the run's start."""
        if self.max_rows_per_second <= 0:
            return
        self._paced_rows += rows
        ahead = self._paced_rows / self.max_rows_per_second - (time.monotonic() - self._paced_since)
        if ahead > 0:
            time.sleep(ahead)

    def _throttle(self) -> None:
        """Wait while the replica is behind the chunks just written."""
        wait_for_replica(self.replica, self.replica_url, self.channel, primary_position(self.primary),
                         self.replica_wait_s, lambda: self.progress("waiting for the replica to catch up before "
                                                                    "the next chunks"))

    def _collect(self, plans: list[TablePlan], only: list[ChunkResult] | None) -> list[ChunkResult]:
        self._throttle()  # everything written so far is on the replica
        out = []
        with self.replica.cursor() as cur:
            for plan in plans:
                cur.execute(f"SELECT chunk, chunk_index, lower_boundary, upper_boundary, master_cnt, master_crc, "
                            f"this_cnt, this_crc FROM {self.checksums} WHERE db=%s AND tbl=%s ORDER BY chunk",
                            (plan.db, plan.tbl))
                wanted = {c.chunk for c in only if (c.db, c.tbl) == (plan.db, plan.tbl)} if only is not None else None
                for chunk, index, lower, upper, m_cnt, m_crc, t_cnt, t_crc in cur.fetchall():
                    if wanted is not None and chunk not in wanted:
                        continue
                    where = self._where_for(plan, chunk, only)
                    result = ChunkResult(plan.db, plan.tbl, chunk, index, lower, upper, where, m_cnt, m_crc,
                                         t_cnt, t_crc)
                    if not result.ok:
                        out.append(result)
        return out

    def _where_for(self, plan: TablePlan, chunk: int, only: list[ChunkResult] | None) -> str:
        if only is not None:
            return next(c.where_sql for c in only if (c.db, c.tbl, c.chunk) == (plan.db, plan.tbl, chunk))
        return self._wheres.get((plan.db, plan.tbl, chunk), "1=1")

    def _record(self, mismatches: list[ChunkResult]) -> None:
        if not mismatches:
            return
        with self.replica.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
            cur.execute(DIFFS_DDL.format(table=self.diffs))
            for m in mismatches:
                cur.execute(f"INSERT INTO {self.diffs} (db, tbl, chunk, chunk_index, lower_boundary, "
                            "upper_boundary, where_sql, master_cnt, master_crc, this_cnt, this_crc) VALUES "
                            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                            (m.db, m.tbl, m.chunk, m.index, m.lower, m.upper, m.where_sql, m.master_cnt,
                             m.master_crc, m.this_cnt, m.this_crc))
