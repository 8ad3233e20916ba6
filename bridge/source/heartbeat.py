"""Heartbeat rows on the primary, pt-heartbeat style: every interval the primary side
writes ``rdma_bridge.heartbeat`` (its name, the wall-clock µs just before the write)
on the primary. The row travels the binlog and the bridge like any other, and the
replica side records primary-write -> replica-commit as the ``lag`` stage. Across two
hosts the lag is only as exact as their clock sync (see bridge.ops.metrics).

The bridge's primary user needs ``CREATE, INSERT, UPDATE`` on ``rdma_bridge.*`` for
it (sql/primary_grants.sql); without them the writer logs why once and stops.

With ``pt_table`` it also keeps a row of a table in pt-heartbeat's format (ts as
pt-heartbeat --utc writes it, the primary's server_id, its binlog file and position), in
a transaction of its own, so that pt-heartbeat --check, ProxySQL and Orchestrator read
the bridge-fed replica's lag as they read a native replica's.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time

import pymysql

from bridge.config import MysqlUrl
from bridge.errors import BridgeError
from bridge.server import sqlnames
from bridge.server.flavor import Flavor
from bridge.source.preflight import connect

log = logging.getLogger(__name__)
SCHEMA, TABLE = sqlnames.HEARTBEAT.split(".")
CREATE = (f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{TABLE} (source VARCHAR(128) NOT NULL PRIMARY KEY, "
          "ts_us BIGINT NOT NULL) ENGINE=InnoDB")
WRITE = f"REPLACE INTO {SCHEMA}.{TABLE} (source, ts_us) VALUES (%s, %s)"
DENIED = {1044, 1142, 1227}  # no privilege on the database / table / operation
# pt-heartbeat's own table definition (its --create-table), written as its --update does
PT_CREATE = ("CREATE TABLE IF NOT EXISTS {} (ts VARCHAR(26) NOT NULL, server_id INT UNSIGNED NOT NULL PRIMARY KEY, "
             "file VARCHAR(255) DEFAULT NULL, position BIGINT UNSIGNED DEFAULT NULL, "
             "relay_master_log_file VARCHAR(255) DEFAULT NULL, exec_master_log_pos BIGINT UNSIGNED DEFAULT NULL) "
             "ENGINE=InnoDB")
PT_WRITE = "REPLACE INTO {} (ts, server_id, file, position) VALUES (%s, %s, %s, %s)"


def pt_timestamp(ts_us: int) -> str:
    """``ts_us`` as pt-heartbeat --utc writes its ts column: UTC, 'T', microseconds."""
    when = datetime.datetime.fromtimestamp(ts_us / 1e6, datetime.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")


class HeartbeatWriter:
    def __init__(self, url: MysqlUrl, interval_s: float, name: str, pt_table: str | None = None) -> None:
        self.url, self.interval_s, self.name = url, interval_s, name
        self.pt_table = pt_table  # "schema.table" in pt-heartbeat's format, or None
        self._pt_name = sqlnames.table_name(*pt_table.split(".")) if pt_table else ""
        self._server_id, self._binlog_status = 0, ""  # the primary's, read with the table's creation
        self.written = 0
        self.failures = 0
        self.state = "starting"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.is_alive() or self.state != "starting"

    def start(self) -> None:
        self._thread.start()

    def status(self) -> dict:
        out = {"interval_s": self.interval_s, "written": self.written, "failures": self.failures,
               "state": self.state}
        if self.pt_table:
            out["pt_heartbeat_table"] = self.pt_table
        return out

    def _run(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = connect(self.url, "primary (heartbeat)")
                    with conn.cursor() as cur:
                        cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
                        cur.execute(CREATE)
                    if self.pt_table:
                        self._create_pt(conn)
                ts_us = time.time_ns() // 1000
                with conn.cursor() as cur:
                    cur.execute(WRITE, (self.name, ts_us))
                if self.pt_table:
                    self._write_pt(conn, ts_us)
                self.written += 1
                self.state = "writing"
            except pymysql.MySQLError as exc:
                code = exc.args[0] if exc.args else 0
                if code in DENIED:
                    self.state = "off: no privilege"
                    schemas = dict.fromkeys(t.split(".")[0] for t in (f"{SCHEMA}.{TABLE}", self.pt_table) if t)
                    log.warning("heartbeat off: %s may not write its rows on the primary (%s); grant CREATE, "
                                "INSERT, UPDATE ON %s (sql/primary_grants.sql) or pass --heartbeat-interval 0",
                                self.url.user, exc.args[-1], ", ".join(f"{s}.*" for s in schemas))
                    break
                conn = self._failed(conn, exc)
            except BridgeError as exc:  # could not connect: the primary may be restarting
                conn = self._failed(conn, exc)
            self._stop.wait(self.interval_s)
        if conn is not None:
            conn.close()

    def _create_pt(self, conn) -> None:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {sqlnames.quote_name(self.pt_table.split('.')[0])}")
            cur.execute(PT_CREATE.format(self._pt_name))
            cur.execute("SELECT @@server_id")
            self._server_id = int(cur.fetchone()[0])
            self._binlog_status = Flavor.of(conn).binlog_status

    def _write_pt(self, conn, ts_us: int) -> None:
        """pt-heartbeat's row, its own transaction: a heartbeat-only transaction of the
        bridge's table stays the replica's cheap path. file/position: NULL where the user
        may not read the binlog status."""
        with conn.cursor() as cur:
            try:
                cur.execute(self._binlog_status)
                row = cur.fetchone()
            except pymysql.MySQLError as exc:
                if (exc.args[0] if exc.args else 0) not in DENIED:
                    raise
                row = None
            cur.execute(PT_WRITE.format(self._pt_name),
                        (pt_timestamp(ts_us), self._server_id, row[0] if row else None, row[1] if row else None))

    def _failed(self, conn, exc: Exception):
        self.failures += 1
        self.state = "retrying"
        if self.failures == 1 or self.failures % 100 == 0:
            log.warning("heartbeat write to %s failed (%d so far): %s", self.url, self.failures, exc)
        if conn is not None:
            try:
                conn.close()
            except pymysql.MySQLError:
                pass
        return None

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
