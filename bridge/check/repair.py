"""`rdma-bridge repair`: re-copy the rows of mismatched chunks from the primary
through the bridge, then check those chunks again.

For each unrepaired chunk in the channel's ``rdma_bridge.checksum_diffs__<channel>``
on the replica the primary runs one transaction (row format, as usual):

    INSERT INTO rdma_bridge.repairs__<channel> (db, tbl, copy_table, where_sql) ...   -- the marker, first
    INSERT INTO rdma_bridge.repair_copy_<n>__<channel> SELECT * FROM t WHERE <range> LOCK IN SHARE MODE

``repair_copy_<n>__<channel>`` is made by ``CREATE TABLE ... LIKE t`` on the primary just
before (replicated like any DDL) and dropped after. Every one of these names is the
channel's own (bridge.server.sqlnames.owned): another channel into the same replica applies
none of them, and its checksum never reads them. The primary's own rows are not touched.
The replica applier sees the marker and, in the same replica transaction as the rows
and the position, replaces its rows of the range by the copy (bridge.apply.applier).
Because it is a transaction in the binlog, it lands at the same point of the stream
as the primary's read of the range: concurrent writes stay in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bridge.check.checksum import SCHEMA, Checksummer, ChecksumRun, ChunkResult, connect
from bridge.check.positions import primary_position, wait_for_replica
from bridge.config import MysqlUrl
from bridge.server import sqlnames
from bridge.server.sqlnames import quote_name

log = logging.getLogger(__name__)
# The marker travels as a row event, which the replica's table must take as the primary's
# wrote it: its character set is named, not left to each server's rdma_bridge database
# default (a primary whose default is latin1 and a replica's utf8mb4 made every repair of
# that primary's channel stop as "Unknown error")
MARKER_COLLATION = "utf8mb4_bin"
REPAIRS_DDL = """CREATE TABLE IF NOT EXISTS {table} (
  id BIGINT AUTO_INCREMENT PRIMARY KEY, db VARCHAR(64) NOT NULL, tbl VARCHAR(64) NOT NULL,
  copy_table VARCHAR(64) NOT NULL, where_sql TEXT NOT NULL,
  created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB
  DEFAULT CHARSET=utf8mb4 COLLATE=""" + MARKER_COLLATION
MARKERS_COLLATIONS = ("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                      "AND COLLATION_NAME IS NOT NULL AND COLLATION_NAME <> %s")


def pending_diffs(replica_conn, channel: str) -> list[tuple[int, ChunkResult]]:
    """The channel's unrepaired mismatches, the latest record of each chunk."""
    diffs = sqlnames.owned(sqlnames.CHECKSUM_DIFFS, channel)
    with replica_conn.cursor() as cur:
        if not cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema=%s AND table_name=%s",
                           (SCHEMA, diffs)):
            return []
        cur.execute(f"SELECT id, db, tbl, chunk, chunk_index, lower_boundary, upper_boundary, where_sql, master_cnt, "
                    f"master_crc, this_cnt, this_crc FROM {SCHEMA}.{quote_name(diffs)} "
                    "WHERE repaired_at IS NULL ORDER BY id")
        latest: dict[tuple, tuple[int, ChunkResult]] = {}
        for row in cur.fetchall():
            latest[(row[1], row[2], row[3])] = (row[0], ChunkResult(*row[1:]))
    return list(latest.values())


class Repairer:
    def __init__(self, primary: MysqlUrl, replica: MysqlUrl, channel: str = "default",
                 progress: Callable[[str], None] = log.info) -> None:
        self.primary_url, self.replica_url, self.channel, self.progress = primary, replica, channel, progress
        self.primary = connect(primary, "primary")
        self.replica = connect(replica, "replica")
        self.markers = f"{SCHEMA}.{quote_name(sqlnames.owned(sqlnames.REPAIR_MARKERS, channel))}"
        self.diffs = f"{SCHEMA}.{quote_name(sqlnames.owned(sqlnames.CHECKSUM_DIFFS, channel))}"

    def close(self) -> None:
        self.primary.close()
        self.replica.close()

    def run(self) -> tuple[int, ChecksumRun | None]:
        """(chunks repaired, the re-check of those chunks)."""
        diffs = pending_diffs(self.replica, self.channel)
        if not diffs:
            self.progress(f"nothing to repair: no unrepaired mismatches of channel {self.channel!r} in {self.diffs}")
            return 0, None
        with self.primary.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
            cur.execute(REPAIRS_DDL.format(table=self.markers))
            cur.execute(MARKERS_COLLATIONS, (SCHEMA, sqlnames.owned(sqlnames.REPAIR_MARKERS, self.channel),
                                            MARKER_COLLATION))
            if cur.fetchone()[0]:  # made by an older version in the database's default: made again, as both sides
                cur.execute(f"DROP TABLE {self.markers}")  # take it now (a CONVERT would widen TEXT on one side only)
                cur.execute(REPAIRS_DDL.format(table=self.markers))
        for n, (diff_id, chunk) in enumerate(diffs, start=1):
            self._repair(diff_id, chunk)
            self.progress(f"repaired {n}/{len(diffs)}: {chunk.db}.{chunk.tbl} chunk {chunk.chunk} "
                          f"({chunk.lower or '-inf'} .. {chunk.upper or '+inf'}]")
        checker = Checksummer(self.primary_url, self.replica_url, self.channel, progress=self.progress)
        try:
            recheck = checker.run(only=[c for _, c in diffs])
        finally:
            checker.close()
        return len(diffs), recheck

    def _repair(self, diff_id: int, chunk: ChunkResult) -> None:
        copy = sqlnames.owned(f"{sqlnames.REPAIR_COPY}_{diff_id}", self.channel)
        target, copy_name = f"{quote_name(chunk.db)}.{quote_name(chunk.tbl)}", f"{SCHEMA}.{quote_name(copy)}"
        with self.primary.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {copy_name}")
            cur.execute(f"CREATE TABLE {copy_name} LIKE {target}")
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO {self.markers} (db, tbl, copy_table, where_sql) "
                        "VALUES (%s, %s, %s, %s)", (chunk.db, chunk.tbl, copy, chunk.where_sql))
            cur.execute(f"INSERT INTO {copy_name} SELECT * FROM {target} WHERE {chunk.where_sql}")
            cur.execute("COMMIT")
            cur.execute(f"DROP TABLE {copy_name}")
        wait_for_replica(self.replica, self.replica_url, self.channel, primary_position(self.primary), 300.0)
        with self.replica.cursor() as cur:
            cur.execute(f"UPDATE {self.diffs} SET repaired_at=CURRENT_TIMESTAMP(6) WHERE db=%s AND tbl=%s "
                        "AND chunk=%s AND repaired_at IS NULL", (chunk.db, chunk.tbl, chunk.chunk))
