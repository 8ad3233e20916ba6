"""Consistent snapshots of the primary and the GTID position they show.

MariaDB: ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` gives each connection a view
that is consistent with the binlog (the ``binlog_snapshot_file`` /
``binlog_snapshot_position`` status variables of that session), and
``BINLOG_GTID_POS()`` turns that binlog position into a GTID position: no lock at all
(what mariadb-dump --single-transaction --gtid does). Several connections must see one
and the same moment: they open their snapshots while ``FLUSH TABLES WITH READ LOCK``
holds commits for a moment (RELOAD privilege), and their snapshot positions are
compared. MySQL has no snapshot position: the lock is always taken and
``@@GLOBAL.gtid_executed`` read under it (what mysqldump does).

The snapshot lasts as long as its connections' transactions: DDL on a table being
copied waits for the copy (metadata lock), as it does for mariadb-dump.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pymysql
import pymysql.converters

from bridge.config import MysqlUrl
from bridge.errors import ConfigError, SourceError
from bridge.model import GtidSet
from bridge.server import dbconn
from bridge.server.flavor import Flavor

log = logging.getLogger(__name__)
SESSION = ("SET SESSION time_zone='+00:00'", "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")


# PyMySQL's conversions: Python types -> SQL (kept, for query parameters) and column
# types -> Python (dropped: values stay as the server printed them)
ENCODERS_ONLY = {k: v for k, v in pymysql.converters.conversions.items() if not isinstance(k, int)}


@dataclass
class Snapshot:
    conns: list[pymysql.Connection]  # each inside its consistent-snapshot transaction
    gtid: GtidSet
    flavor: Flavor

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.rollback()
                conn.close()
            except pymysql.MySQLError:
                pass


def raw_connect(url: MysqlUrl, what: str) -> pymysql.Connection:
    """A connection whose values come back as the server prints them (str, bytes for
    binary strings): no conversion, so none can lose anything."""
    try:
        conn = dbconn.connect(url, conv=ENCODERS_ONLY, autocommit=True)
    except pymysql.MySQLError as exc:
        raise SourceError(f"clone: connect to {what} {url}: {exc.args[-1] if exc.args else exc}") from exc
    return conn


def open_snapshot(url: MysqlUrl, workers: int) -> Snapshot:
    conns = [raw_connect(url, "primary") for _ in range(workers)]
    try:
        flavor = Flavor.of(conns[0])
        if flavor.snapshot_position and workers == 1:
            gtid = _begin(conns[0], flavor)
        else:
            gtid = _begin_locked(conns, flavor, url)
    except pymysql.MySQLError as exc:
        for conn in conns:
            conn.close()
        raise SourceError(f"clone: consistent snapshot of primary {url}: {exc.args[-1] if exc.args else exc}") \
            from exc
    log.info("clone: consistent snapshot of %s at GTID %s (%d connection%s)", url, gtid or "(empty binlog)",
             workers, "s" * (workers > 1))
    return Snapshot(conns, gtid, flavor)


def _begin(conn: pymysql.Connection, flavor: Flavor) -> GtidSet:
    with conn.cursor() as cur:
        for statement in SESSION:
            cur.execute(statement)
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        if not flavor.snapshot_position:
            return GtidSet()
        cur.execute("SHOW SESSION STATUS WHERE Variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')")
        found = {name.lower(): value for name, value in cur.fetchall()}
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (found["binlog_snapshot_file"],
                                                        int(found["binlog_snapshot_position"])))
        return GtidSet.parse(cur.fetchone()[0] or "")


def _begin_locked(conns: list[pymysql.Connection], flavor: Flavor, url: MysqlUrl) -> GtidSet:
    """Every snapshot opened while commits wait: all of them one moment."""
    lock = conns[0]
    with lock.cursor() as cur:
        try:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        except pymysql.MySQLError as exc:
            raise ConfigError(f"clone: FLUSH TABLES WITH READ LOCK on primary {url} refused ({exc.args[-1]}): "
                              "several copy connections need it for one consistent moment (GRANT RELOAD), or "
                              "use --parallel 1") from exc
        try:
            positions = {_begin(conn, flavor) for conn in conns[1:]} if len(conns) > 1 else set()
            cur.execute(flavor.gtid_position_sql)
            gtid = GtidSet.parse(cur.fetchone()[0] or "")
            _begin(lock, flavor)
        finally:
            cur.execute("UNLOCK TABLES")
    if flavor.snapshot_position and positions and positions != {gtid}:  # cannot happen under the lock: say so
        raise SourceError(f"clone: snapshots of {url} disagree on their position ({positions} vs {gtid})")
    return gtid

