"""The replica server's replication channel pointed at the relay: MySQL's
``CHANGE REPLICATION SOURCE TO ... FOR CHANNEL``, MariaDB's ``CHANGE MASTER 'name' TO``,
positioned by the replica's own GTIDs (a restart of either end resumes where the replica
is), reconnecting every second while the relay is down, with heartbeats while idle, and
without TLS unless asked for (the relay listens on loopback by default)."""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from bridge.server import errorcodes
from bridge.server.flavor import Flavor


@dataclass(frozen=True, slots=True)
class RelayChannel:
    """One channel of the replica server, fed by the relay at ``host:port``."""

    flavor: Flavor
    name: str
    host: str
    port: int
    user: str
    heartbeat_s: float = 1.0
    tls_ca: str | None = None  # TLS, the relay's certificate verified against this CA (a path the server reads)

    def _named(self) -> str:
        return self.name.replace("'", "''")

    def change(self) -> tuple[str, tuple]:
        """(statement, parameters: host, port, user, then the password's place)."""
        if self.flavor.is_mysql:
            return ("CHANGE REPLICATION SOURCE TO SOURCE_HOST=%s, SOURCE_PORT=%s, SOURCE_USER=%s, SOURCE_PASSWORD=%s, "
                    f"SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1, SOURCE_HEARTBEAT_PERIOD={self.heartbeat_s:g}, "
                    f"{self._tls('SOURCE')} FOR CHANNEL '{self._named()}'", (self.host, self.port, self.user))
        return (f"CHANGE MASTER '{self._named()}' TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, "
                f"MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, "
                f"MASTER_HEARTBEAT_PERIOD={self.heartbeat_s:g}, {self._tls('MASTER')}",
                (self.host, self.port, self.user))

    def _tls(self, prefix: str) -> str:
        if self.tls_ca is None:
            return f"{prefix}_SSL=0"
        path = self.tls_ca.replace("'", "''").replace("%", "%%")  # in the statement's text, which has %s parameters
        return (f"{prefix}_SSL=1, {prefix}_SSL_CA='{path}', "
                f"{prefix}_SSL_VERIFY_SERVER_CERT=1")

    @property
    def start(self) -> str:
        return self.flavor.replica_channel("START", self.name)

    @property
    def stop(self) -> str:
        return self.flavor.replica_channel("STOP", self.name)

    def configure(self, cur, password: str) -> None:
        """Stop the channel if it runs, point it at the relay, start it (on ``cur``, a
        cursor of an account with the privileges to: REPLICATION_SLAVE_ADMIN on MySQL,
        REPLICATION SLAVE ADMIN on MariaDB)."""
        try:
            cur.execute(self.stop)
        except pymysql.MySQLError as exc:  # a channel that does not exist yet: nothing to stop
            if errorcodes.code_of(exc) not in errorcodes.NO_CHANNEL:
                raise
        statement, params = self.change()
        cur.execute(statement, (*params, password))
        cur.execute(self.start)

    def printed(self) -> str:
        """The statements for a DBA to run (``--relay-configure no``): the password is
        named, never shown."""
        statement, params = self.change()
        quoted = tuple(f"'{p}'" if isinstance(p, str) else str(p) for p in params)
        return (statement % (*quoted, "'<the relay password>'") + f";\n{self.start};")
