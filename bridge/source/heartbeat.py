"""Heartbeat rows on the primary, pt-heartbeat style: every interval the primary side
writes ``rdma_bridge.heartbeat`` (its name, the wall-clock µs just before the write)
on the primary. The row travels the binlog and the bridge like any other, and the
replica side records primary-write -> replica-commit as the ``lag`` stage. Across two
hosts the lag is only as exact as their clock sync (see bridge.ops.metrics).

The bridge's primary user needs ``CREATE, INSERT, UPDATE`` on ``rdma_bridge.*`` for
it (sql/primary_grants.sql); without them the writer logs why once and stops.
"""

from __future__ import annotations

import logging
import threading
import time

import pymysql

from bridge.config import MysqlUrl
from bridge.errors import BridgeError
from bridge.server import sqlnames
from bridge.source.preflight import connect

log = logging.getLogger(__name__)
SCHEMA, TABLE = sqlnames.HEARTBEAT.split(".")
CREATE = (f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{TABLE} (source VARCHAR(128) NOT NULL PRIMARY KEY, "
          "ts_us BIGINT NOT NULL) ENGINE=InnoDB")
WRITE = f"REPLACE INTO {SCHEMA}.{TABLE} (source, ts_us) VALUES (%s, %s)"
DENIED = {1044, 1142, 1227}  # no privilege on the database / table / operation


class HeartbeatWriter:
    def __init__(self, url: MysqlUrl, interval_s: float, name: str) -> None:
        self.url, self.interval_s, self.name = url, interval_s, name
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
        return {"interval_s": self.interval_s, "written": self.written, "failures": self.failures,
                "state": self.state}

    def _run(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = connect(self.url, "primary (heartbeat)")
                    with conn.cursor() as cur:
                        cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA}")
                        cur.execute(CREATE)
                with conn.cursor() as cur:
                    cur.execute(WRITE, (self.name, time.time_ns() // 1000))
                self.written += 1
                self.state = "writing"
            except pymysql.MySQLError as exc:
                code = exc.args[0] if exc.args else 0
                if code in DENIED:
                    self.state = "off: no privilege"
                    log.warning("heartbeat off: %s may not write %s.%s on the primary (%s); grant CREATE, "
                                "INSERT, UPDATE ON %s.* (sql/primary_grants.sql) or pass --heartbeat-interval 0",
                                self.url.user, SCHEMA, TABLE, exc.args[-1], SCHEMA)
                    break
                conn = self._failed(conn, exc)
            except BridgeError as exc:  # could not connect: the primary may be restarting
                conn = self._failed(conn, exc)
            self._stop.wait(self.interval_s)
        if conn is not None:
            conn.close()

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
