"""What differs between MariaDB and MySQL, decided once per server connection.

``Flavor.of(conn)`` reads the server's version (and which semi-sync plugin it loaded)
once per connection and answers every question whose answer depends on the server:
statement and variable names (``SHOW REPLICAS`` / ``SHOW SLAVE HOSTS``, ``SHOW BINARY
LOG STATUS`` / ``SHOW MASTER STATUS``, ``gtid_executed`` / ``gtid_binlog_pos``), the
semi-sync plugin's names, the row hash both ends of a checksum can compute, how
information_schema marks generated columns, the grants files, and the client programs.
The rest of the code asks it; nothing else tests for a flavor by name.

Facts used (MySQL 8.0/8.4/9.x reference manual, MariaDB knowledge base):
- MySQL 8.0.22 renamed ``SHOW SLAVE HOSTS`` to ``SHOW REPLICAS``; 8.4 removed the old
  name. MySQL 8.2 renamed ``SHOW MASTER STATUS`` to ``SHOW BINARY LOG STATUS``; 8.4
  removed the old one. MariaDB keeps both old names (and has ``SHOW REPLICA HOSTS`` /
  ``SHOW BINLOG STATUS`` from 10.5.2).
- MySQL 8.0.26 added the ``semisync_source`` / ``semisync_replica`` plugins
  (``rpl_semi_sync_source_*``); 8.4 removed ``semisync_master``. The source plugin sends
  the 0xEF header only to a dump connection that set ``@rpl_semi_sync_replica=1``; the
  old plugin and MariaDB's built-in semi-sync look for ``@rpl_semi_sync_slave``.
- MySQL 9.7 has no ``MD5()``, and no MySQL has ``CRC32C()`` (MariaDB 10.8+); both have
  ``SHA2()`` and ``CRC32()``.
- MariaDB's information_schema.COLUMNS has ``IS_GENERATED``; MySQL marks generated
  columns in ``EXTRA`` (``VIRTUAL GENERATED`` / ``STORED GENERATED``; an expression
  default is ``DEFAULT_GENERATED``, which is not a generated column).

Pure over a DB-API cursor: no driver is imported here.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

MARIADB, MYSQL = "mariadb", "mysql"
# sql_mode modes MySQL 8 retired and refuses (error 3899 by number, 1231 by name), which
# MariaDB still sets: IGNORE_BAD_TABLE_OPTIONS (bit 4), POSTGRESQL .. MYSQL40 and the
# NO_*_OPTIONS modes (8-17), NO_AUTO_CREATE_USER (28, in MariaDB's default sql_mode).
MYSQL_RETIRED_SQL_MODE_BITS = 1 << 4 | 0x3FF << 8 | 1 << 28
# sql_mode names one flavor has and the other refuses: those retired modes and MariaDB's
# own (bits 31 up); MySQL's own
_MARIADB_ONLY_SQL_MODES = frozenset({
    "IGNORE_BAD_TABLE_OPTIONS", "POSTGRESQL", "ORACLE", "MSSQL", "DB2", "MAXDB", "NO_KEY_OPTIONS",
    "NO_TABLE_OPTIONS", "NO_FIELD_OPTIONS", "MYSQL323", "MYSQL40", "NO_AUTO_CREATE_USER", "EMPTY_STRING_IS_NULL",
    "SIMULTANEOUS_ASSIGNMENT", "TIME_ROUND_FRACTIONAL"})
_MYSQL_ONLY_SQL_MODES = frozenset({"TIME_TRUNCATE_FRACTIONAL"})
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
# Row hashes, best first: CRC32+CRC32C sums (fastest, 64 bits per row), then MD5 halves,
# then SHA2 halves. Both ends of a checksum use the first one both have.
ROW_HASHES = ("crc32c", "md5", "sha2")


def kind_of(server_version: str) -> str:
    """mariadb or mysql, from a server's version string."""
    return MARIADB if "mariadb" in server_version.lower() else MYSQL


def version_of(server_version: str) -> tuple[int, int, int]:
    found = _VERSION.search(server_version)
    return tuple(int(n) for n in found.groups()) if found else (0, 0, 0)  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Flavor:
    """One server's dialect. ``semi_sync``: the names its loaded semi-sync plugin uses
    (``master`` for MariaDB and MySQL's old plugin, ``source`` for MySQL's new one; ``''``
    where neither is loaded)."""

    kind: str
    version: tuple[int, int, int]
    semi_sync: str = ""

    @classmethod
    def from_version(cls, server_version: str, semi_sync: str | None = None) -> Flavor:
        return _from_version(server_version, semi_sync)

    @classmethod
    def read(cls, cur) -> Flavor:
        """The flavor of the server ``cur`` is connected to (two queries)."""
        cur.execute("SELECT VERSION()")
        version = cur.fetchone()[0]
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                    "('rpl_semi_sync_source_enabled', 'rpl_semi_sync_master_enabled')")
        names = {row[0].lower() for row in cur.fetchall()}
        semi_sync = "source" if "rpl_semi_sync_source_enabled" in names else \
            "master" if "rpl_semi_sync_master_enabled" in names else ""
        return cls.from_version(version, semi_sync)

    @classmethod
    def of(cls, conn) -> Flavor:
        """The flavor of a connection's server, read once per connection object."""
        found = getattr(conn, "_bridge_flavor", None)
        if found is None:
            with conn.cursor() as cur:
                found = cls.read(cur)
            conn._bridge_flavor = found
        return found

    @property
    def is_mysql(self) -> bool:
        return self.kind == MYSQL

    @property
    def name(self) -> str:
        """``mysql-9.7``, ``mariadb-10.11``: for messages and reports."""
        return f"{self.kind}-{self.version[0]}.{self.version[1]}"

    # --- statements and variables -----------------------------------------------

    @property
    def show_replicas(self) -> str:
        """Lists the replicas connected to this primary (server id first, then host)."""
        return "SHOW REPLICAS" if self.is_mysql and self.version >= (8, 0, 22) else "SHOW SLAVE HOSTS"

    @property
    def binlog_status(self) -> str:
        """The current binlog file and position (first two columns)."""
        return "SHOW BINARY LOG STATUS" if self.is_mysql and self.version >= (8, 2, 0) else "SHOW MASTER STATUS"

    @property
    def gtid_position_sql(self) -> str:
        """One value: the GTID set of every transaction in this server's binlog."""
        return "SELECT @@GLOBAL.gtid_executed" if self.is_mysql else "SELECT @@GLOBAL.gtid_binlog_pos"

    @property
    def read_only_sql(self) -> str:
        """Two values: read_only, and super_read_only (which stops every account; 0 on MariaDB, which has none)."""
        return "SELECT @@GLOBAL.read_only, " + ("@@GLOBAL.super_read_only" if self.is_mysql else "0")

    @property
    def gtid_variable(self) -> str:
        return "gtid_executed" if self.is_mysql else "gtid_binlog_pos"

    def keeps_gtids(self, gtid_mode: str) -> bool:
        """A server of this flavor with ``gtid_mode`` (its @@GLOBAL.gtid_mode; '' on MariaDB)
        commits a replicated transaction with its primary's GTID (SET GTID_NEXT), as a
        native MySQL replica does: MySQL with gtid_mode ON or ON_PERMISSIVE."""
        return self.is_mysql and gtid_mode.upper() in ("ON", "ON_PERMISSIVE")

    @property
    def needs_gtid_mode(self) -> bool:
        """The bridge positions by GTID: MySQL assigns GTIDs only with gtid_mode ON
        (MariaDB always does)."""
        return self.is_mysql

    @property
    def logs_partial_json(self) -> bool:
        """Whether binlog_row_value_options exists (MySQL 8: PARTIAL_JSON logs a JSON
        update as a diff, not the full row image the bridge needs)."""
        return self.is_mysql

    @property
    def binlog_rows_v2(self) -> bool:
        """Row events in a BINLOG statement go v2 as MySQL logs them (MySQL 8's BINLOG
        refuses v1: error 1730); v1 as MariaDB logs them."""
        return self.is_mysql

    @property
    def snapshot_position(self) -> bool:
        """A consistent-snapshot transaction names its binlog position
        (``binlog_snapshot_file`` / ``_position``, MariaDB), which ``BINLOG_GTID_POS()``
        turns into GTIDs: no lock needed. MySQL has none: its snapshots take the lock."""
        return not self.is_mysql

    @property
    def replication_privilege_hint(self) -> str:
        """What the reader's account needs to read binlog positions and list replicas."""
        return "REPLICATION CLIENT" if self.is_mysql else "BINLOG MONITOR, REPLICATION MASTER ADMIN"

    # --- a native replica of this flavor (the sandbox's control, the benchmarks' baseline)

    @property
    def start_replica(self) -> str:
        return "START REPLICA"  # MariaDB 10.5.1+, MySQL 8.0.22+

    @property
    def stop_replica(self) -> str:
        return "STOP REPLICA"

    def replica_channel(self, verb: str, channel: str) -> str:
        """``verb`` (START or STOP) of one named replication channel."""
        name = channel.replace("'", "''")
        return f"{verb} REPLICA FOR CHANNEL '{name}'" if self.is_mysql else f"{verb} SLAVE '{name}'"

    @property
    def dump_starts_mid_file(self) -> bool:
        """A GTID dump starts where the server's GTID index points in the file (MariaDB
        11.4+, binlog_gtid_index): its ROTATE names that position and its
        FORMAT_DESCRIPTION goes with position 0. Other servers read the file from its
        start: ROTATE at 4, the FORMAT_DESCRIPTION as written."""
        return not self.is_mysql and self.version >= (11, 4, 0)

    @property
    def replica_gtid_sql(self) -> str:
        """One value: the GTID set a native replica of this flavor has applied."""
        return "SELECT @@GLOBAL.gtid_executed" if self.is_mysql else "SELECT @@GLOBAL.gtid_slave_pos"

    @property
    def replica_semi_sync_variable(self) -> str:
        return "rpl_semi_sync_replica_enabled" if self._semi_sync_names == "source" else "rpl_semi_sync_slave_enabled"

    @property
    def replica_workers_variable(self) -> str:
        """How many applier threads a native replica runs (0 or 1: one)."""
        return "replica_parallel_workers" if self.is_mysql else "slave_parallel_threads"

    def change_source(self, port: int, user: str, password: str, tls_ca: str | None) -> tuple[str, tuple]:
        """(statement, parameters) pointing a native replica at a primary on this host by GTID."""
        params = (port, user, password) + ((tls_ca,) if tls_ca else ())
        if self.is_mysql:  # without TLS the password travels RSA-encrypted: the replica asks for the key
            tls = ", SOURCE_SSL=1, SOURCE_SSL_VERIFY_SERVER_CERT=1, SOURCE_SSL_CA=%s" if tls_ca else ""
            return ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT=%s, SOURCE_USER=%s, "
                    "SOURCE_PASSWORD=%s, SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1" + tls, params)
        tls = ", MASTER_SSL=1, MASTER_SSL_VERIFY_SERVER_CERT=1, MASTER_SSL_CA=%s" if tls_ca else ""
        return ("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, "
                "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos" + tls, params)

    @property
    def replica_disabled_event(self) -> str:
        """information_schema.EVENTS.STATUS of an event a replica holds disabled."""
        return "REPLICA_SIDE_DISABLED" if self.is_mysql and self.version >= (8, 0, 22) else "SLAVESIDE_DISABLED"

    # --- semi-sync ----------------------------------------------------------------

    @property
    def _semi_sync_names(self) -> str:
        """The loaded plugin's names, else those this version's current plugin uses."""
        return self.semi_sync or ("source" if self.is_mysql and self.version >= (8, 0, 26) else "master")

    def semi_sync_variable(self, name: str) -> str:
        """``enabled`` -> rpl_semi_sync_master_enabled or rpl_semi_sync_source_enabled."""
        return f"rpl_semi_sync_{self._semi_sync_names}_{name}"

    @property
    def semi_sync_status_prefix(self) -> str:
        return f"Rpl_semi_sync_{self._semi_sync_names}_"

    @property
    def semi_sync_plugins(self) -> str:
        """How to make semi-sync available on this server, for an error message."""
        if not self.is_mysql:
            return "built into MariaDB"
        return "INSTALL PLUGIN rpl_semi_sync_source SONAME 'semisync_source.so' (MySQL 8.0.26+; " \
               "older: rpl_semi_sync_master SONAME 'semisync_master.so')"

    @property
    def dump_semi_sync_variable(self) -> str:
        """The user variable a dump connection sets to be served as a semi-sync replica."""
        return "@rpl_semi_sync_replica" if self._semi_sync_names == "source" else "@rpl_semi_sync_slave"

    # --- checks and copies ----------------------------------------------------------

    def sql_mode(self, mode: str) -> str:
        """The names in ``mode`` (a sql_mode as text, e.g. a routine's) this server takes:
        a MariaDB primary's default has NO_AUTO_CREATE_USER, which MySQL 8 retired and
        refuses (error 1231), as it refuses the other retired modes and MariaDB's own."""
        foreign = _MARIADB_ONLY_SQL_MODES if self.is_mysql else _MYSQL_ONLY_SQL_MODES
        return ",".join(name for name in mode.split(",") if name and name.upper() not in foreign)

    @property
    def row_hashes(self) -> tuple[str, ...]:
        if self.is_mysql:
            return ("md5", "sha2") if self.version < (9, 0, 0) else ("sha2",)
        return ROW_HASHES if self.version >= (10, 8, 0) else ("md5", "sha2")

    def row_hash_with(self, other: Flavor | None = None) -> str:
        """The best row hash this server and ``other`` (the other end) both compute."""
        theirs = other.row_hashes if other is not None else ROW_HASHES
        return next(h for h in ROW_HASHES if h in self.row_hashes and h in theirs)

    @property
    def not_generated(self) -> str:
        """An information_schema.COLUMNS condition: a column the server does not compute."""
        if self.is_mysql:
            return "INSTR(EXTRA, 'VIRTUAL GENERATED') = 0 AND INSTR(EXTRA, 'STORED GENERATED') = 0"  # no %: a parameter
        return "IS_GENERATED='NEVER'"

    # --- the applier's privileges: each one's alternatives on *.*, the first as GRANT names it

    @property
    def binlog_apply_privileges(self) -> tuple[str, ...]:
        """To apply row events in the server (BINLOG, --apply-mode binlog)."""
        return ("REPLICATION_APPLIER", "BINLOG_ADMIN", "SUPER") if self.is_mysql else ("BINLOG REPLAY", "SUPER")

    @property
    def relay_privileges(self) -> tuple[tuple[str, ...], ...]:
        """To point a replication channel at the relay and read its status (--apply-mode relay)."""
        if self.is_mysql:
            return ("REPLICATION_SLAVE_ADMIN", "SUPER"), ("REPLICATION CLIENT", "SUPER")
        return ("REPLICATION SLAVE ADMIN", "SUPER"), ("SLAVE MONITOR", "REPLICATION CLIENT", "SUPER")

    @property
    def definer_privileges(self) -> tuple[str, ...]:
        """To replay triggers, routines, views and events with the primary's DEFINER."""
        return ("SET_ANY_DEFINER", "SET_USER_ID", "SUPER") if self.is_mysql else ("SET USER", "SUPER")

    @property
    def orphan_definer_privileges(self) -> tuple[str, ...]:
        """To replay an object whose DEFINER exists only on the primary (MySQL 8.2+, as
        a native replica's applier may); () where the server needs none."""
        return ("ALLOW_NONEXISTENT_DEFINER", "SUPER") if self.is_mysql else ()

    @property
    def read_only_privileges(self) -> tuple[str, ...]:
        """To write on a replica that runs read_only=ON (MariaDB 11 no longer counts SUPER)."""
        return ("CONNECTION_ADMIN", "SUPER") if self.is_mysql else ("READ_ONLY ADMIN",)

    def grants_file(self, role: str) -> str:
        """``primary`` or ``replica``: the least-privilege grants file in sql/."""
        return f"{role}_grants_mysql.sql" if self.is_mysql else f"{role}_grants.sql"

    @property
    def dump_program(self) -> str:
        return "mysqldump" if self.is_mysql else "mariadb-dump"

    @property
    def client_program(self) -> str:
        return "mysql" if self.is_mysql else "mariadb"


@functools.lru_cache(maxsize=64)
def _from_version(server_version: str, semi_sync: str | None) -> Flavor:
    """Flavor.from_version, made once per version string (a stream's format asks per group)."""
    kind, version = kind_of(server_version), version_of(server_version)
    if semi_sync is None:
        semi_sync = "master" if kind == MARIADB or version < (8, 0, 26) else "source"
    return Flavor(kind, version, semi_sync)
