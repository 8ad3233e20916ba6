"""The replica server in relay mode, as the replica side sees it: which GTIDs it has
executed (what the primary side resumes after, what the relay may forget), its channel's
replication status (IO and SQL threads, their last errors, how far behind), and a wait
for a GTID to be executed. The replica side never writes to it, except to point its
channel at the relay (bridge.relay.channel): anything it wrote would be a transaction of
the replica's own (MySQL: an errant GTID), which a native replica never has."""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from bridge.config import MysqlUrl
from bridge.errors import ConfigError, TargetConnectionLost
from bridge.model import GtidSet
from bridge.relay.channel import RelayChannel
from bridge.server import dbconn, errorcodes
from bridge.server.flavor import Flavor


@dataclass(frozen=True, slots=True)
class ChannelStatus:
    """One look at the channel (SHOW REPLICA STATUS FOR CHANNEL, SHOW SLAVE 'name' STATUS);
    ``exists`` False where the server has no such channel."""

    exists: bool
    io_running: str = "No"  # Yes, No, Connecting
    sql_running: str = "No"
    io_errno: int = 0
    io_error: str = ""
    sql_errno: int = 0
    sql_error: str = ""
    seconds_behind: int | None = None  # NULL while the SQL thread is stopped
    retrieved: str = ""  # MySQL: Retrieved_Gtid_Set; MariaDB: Gtid_IO_Pos
    executed: str = ""
    # MySQL's multi-threaded applier: the first worker's error, where the coordinator's
    # (Last_SQL_Error) names the worker that stopped after it (3030, commit order)
    worker_errno: int = 0
    worker_error: str = ""

    @property
    def cause(self) -> tuple[int, str]:
        """Why applying stopped (code, text): the first failing worker's error where there is
        one, else the SQL thread's, else the IO thread's; (0, ...) when stopped by STOP REPLICA."""
        if self.sql_running != "Yes" and self.worker_errno:
            return self.worker_errno, self.worker_error
        if self.sql_running != "Yes" and self.sql_errno:
            return self.sql_errno, self.sql_error
        if self.io_running == "No" and self.io_errno:
            return self.io_errno, self.io_error
        return 0, "stopped (STOP REPLICA, or not started)"

    @property
    def stopped(self) -> bool:
        """The channel does not apply: its SQL thread or its IO thread stopped (on an error,
        or by STOP REPLICA); an IO thread still connecting is not stopped (it retries)."""
        return self.exists and (self.sql_running != "Yes" or self.io_running == "No")

    def to_json(self) -> dict:
        return {"io_running": self.io_running, "sql_running": self.sql_running, "io_errno": self.io_errno,
                "io_error": self.io_error, "sql_errno": self.sql_errno, "sql_error": self.sql_error,
                "seconds_behind": self.seconds_behind, "retrieved_gtid_set": self.retrieved,
                "executed_gtid_set": self.executed, "worker_errno": self.worker_errno,
                "worker_error": self.worker_error}


class RelayTarget:
    """A connection to the replica server, for ``channel``."""

    def __init__(self, url: MysqlUrl, channel: str) -> None:
        self.url, self.channel = url, channel
        self.conn = self._connect()
        self.flavor = Flavor.of(self.conn)
        with self.conn.cursor() as cur:
            cur.execute("SELECT CONCAT(@@hostname, ':', @@port, ' id ', @@server_id)")
            self.identity = cur.fetchone()[0]
            if self.flavor.is_mysql:
                cur.execute("SELECT @@GLOBAL.gtid_mode")
                mode = str(cur.fetchone()[0]).upper()
                if mode != "ON":
                    raise ConfigError(f"apply mode relay: replica {url} has gtid_mode={mode}; its channel is "
                                      "positioned by GTIDs (SOURCE_AUTO_POSITION=1): set gtid_mode=ON and "
                                      "enforce_gtid_consistency=ON there")

    def _connect(self) -> pymysql.Connection:
        try:
            return dbconn.connect(self.url, autocommit=True)
        except pymysql.MySQLError as exc:
            raise TargetConnectionLost(f"relay: connect to replica {self.url}: {exc}") from exc

    def _query(self, sql: str, args=None, dict_rows: bool = False) -> list:
        """One query, reconnecting once where the connection was lost."""
        for attempt in (1, 2):
            try:
                with self.conn.cursor(pymysql.cursors.DictCursor if dict_rows else None) as cur:
                    cur.execute(sql, args)
                    return list(cur.fetchall())
            except pymysql.MySQLError as exc:
                if attempt == 2 or errorcodes.code_of(exc) not in errorcodes.CONNECTION_LOST:
                    if errorcodes.code_of(exc) in errorcodes.CONNECTION_LOST:
                        raise TargetConnectionLost(f"relay: replica {self.url}: {exc}") from exc
                    raise
                self.close()
                self.conn = self._connect()
        raise AssertionError("unreachable")

    def executed(self) -> GtidSet:
        """The GTIDs the replica server has applied (MySQL gtid_executed, MariaDB gtid_slave_pos)."""
        return GtidSet.parse(str(self._query(self.flavor.replica_gtid_sql)[0][0] or ""))

    def wait_executed(self, gtid: str, timeout_s: float) -> bool:
        """Until the replica server has applied ``gtid`` (True) or ``timeout_s`` passed."""
        sql = "SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)" if self.flavor.is_mysql else "SELECT MASTER_GTID_WAIT(%s, %s)"
        return self._query(sql, (gtid, timeout_s))[0][0] == 0

    def status(self) -> ChannelStatus:
        name = self.channel.replace("'", "''")
        query, prefix, source = (f"SHOW REPLICA STATUS FOR CHANNEL '{name}'", "Replica", "Source") \
            if self.flavor.is_mysql else (f"SHOW SLAVE '{name}' STATUS", "Slave", "Master")
        try:
            rows = self._query(query, dict_rows=True)
        except pymysql.MySQLError as exc:
            if errorcodes.code_of(exc) in errorcodes.NO_CHANNEL:
                return ChannelStatus(False)
            raise
        if not rows:
            return ChannelStatus(False)
        row = rows[0]
        behind = row.get(f"Seconds_Behind_{source}")
        sql_running, sql_errno = str(row.get(f"{prefix}_SQL_Running") or "No"), int(row.get("Last_SQL_Errno") or 0)
        worker = self._first_worker_error() if self.flavor.is_mysql and sql_errno and sql_running != "Yes" else None
        return ChannelStatus(
            True, str(row.get(f"{prefix}_IO_Running") or "No"), sql_running,
            int(row.get("Last_IO_Errno") or 0), str(row.get("Last_IO_Error") or ""),
            sql_errno, str(row.get("Last_SQL_Error") or ""),
            None if behind is None else int(behind),
            str(row.get("Retrieved_Gtid_Set") if self.flavor.is_mysql else row.get("Gtid_IO_Pos")) or "",
            str(row.get("Executed_Gtid_Set") or "") if self.flavor.is_mysql else str(self.executed()),
            *(worker or (0, "")))

    def _first_worker_error(self) -> tuple[int, str] | None:
        """MySQL: the earliest error of the channel's applier workers, leaving out the workers
        that stopped because an earlier one failed (3030: replica_preserve_commit_order); which
        worker the coordinator's Last_SQL_Error names is a race between them."""
        rows = self._query("SELECT LAST_ERROR_NUMBER, LAST_ERROR_MESSAGE FROM "
                           "performance_schema.replication_applier_status_by_worker WHERE CHANNEL_NAME = %s "
                           "AND LAST_ERROR_NUMBER NOT IN (0, %s) ORDER BY LAST_ERROR_TIMESTAMP LIMIT 1",
                           (self.channel, errorcodes.WORKER_STOPPED_AFTER_ERROR))
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def configure(self, channel: RelayChannel, password: str) -> None:
        """Point the channel at the relay and start it (bridge.relay.channel)."""
        try:
            with self.conn.cursor() as cur:
                channel.configure(cur, password)
        except pymysql.MySQLError as exc:
            denied = errorcodes.code_of(exc) in (1045, 1227, 1142)  # access denied, needs a privilege
            hint = ("; the --target user needs REPLICATION_SLAVE_ADMIN (MySQL) or REPLICATION SLAVE ADMIN (MariaDB), "
                    "or start with --relay-configure no and run the printed statement yourself") if denied else ""
            raise ConfigError(f"relay: point channel {channel.name!r} of replica {self.url} at the relay: "
                              f"{exc.args[-1]}{hint}") from exc

    def close(self) -> None:
        try:
            self.conn.close()
        except pymysql.MySQLError:
            pass

