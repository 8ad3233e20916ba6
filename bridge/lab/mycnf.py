"""The sandbox's my.cnf, per server kind (bridge.server.flavor: mariadb, mysql) and role.

Every server reads only its own ``--defaults-file``. MariaDB's primary gets the binlog
settings the reader needs; a second primary its own GTID domain. MySQL servers all run
with GTIDs (``gtid_mode=ON``: the replica keeps the primary's GTIDs, as a native MySQL
replica does), the semi-sync plugins loaded; the primaries write a binlog, the replicas
none (their GTIDs are kept in mysql.gtid_executed).
docker/generate.py makes the compose demo's server flags from the same text.
"""

from __future__ import annotations

from bridge.server.flavor import MYSQL

# where each server keeps its files and listens: the same for both kinds
_PLACES = """datadir={dir}/data
socket={dir}/mysqld.sock
pid-file={dir}/mysqld.pid
log-error={dir}/error.log
tmpdir={dir}/tmp
port={port}
bind-address=127.0.0.1
server_id={server_id}
skip-name-resolve
"""
COMMON_CNF = "[mariadbd]\n" + _PLACES + """character_set_server=utf8mb4
collation_server=utf8mb4_general_ci
innodb_log_file_size=16M
innodb_buffer_pool_size=64M
gtid_strict_mode=ON
gtid_domain_id=0
max_connections=200
"""
PRIMARY_CNF = """log_bin=mysql-bin
binlog_format=ROW
binlog_row_image=FULL
binlog_row_metadata=FULL
rpl_semi_sync_master_wait_point=AFTER_SYNC
rpl_semi_sync_master_timeout=1000
"""
LOCAL_CHARSET_CNF = "character_set_server=utf8mb4\ncollation_server=utf8mb4_general_ci\n"  # container flavors: theirs
NATIVE_CNF = """relay_log=relay-bin
slave_parallel_mode=optimistic
"""
# role -> (server id, extra lines); primary2: a second primary, in its own GTID domain;
# standby: a native replica with a binlog of its own that keeps the primary's transactions,
# promotable (a failover's new primary)
ROLES = {"primary": (1, PRIMARY_CNF), "replica": (2, ""), "native": (3, NATIVE_CNF),
         "primary2": (4, PRIMARY_CNF + "gtid_domain_id=1\n"),
         "standby": (5, PRIMARY_CNF + NATIVE_CNF + "log_slave_updates=ON\n")}

MYSQL_CNF = "[mysqld]\n" + _PLACES + """mysqlx=OFF
performance_schema=OFF
innodb_redo_log_capacity=16M
innodb_buffer_pool_size=64M
max_connections=200
gtid_mode=ON
enforce_gtid_consistency=ON
binlog_row_image=FULL
binlog_row_metadata=FULL
plugin-load-add=semisync_source.so
plugin-load-add=semisync_replica.so
loose-rpl_semi_sync_source_wait_point=AFTER_SYNC
loose-rpl_semi_sync_source_timeout=1000
"""
MYSQL_PRIMARY_CNF = "log_bin=mysql-bin\n"
# A replica keeps its GTIDs in mysql.gtid_executed without a binlog of its own, as the
# MariaDB sandbox's replica has none: one fsync per commit, not two
# (relay_log_recovery: a replica whose server's own threads apply, apply mode relay, starts
# again from what it executed after a crash, its relay log dropped: MySQL's crash-safe setting)
MYSQL_REPLICA_CNF = "skip-log-bin\nrelay_log_recovery=ON\n"
MYSQL_ROLES = {"primary": (1, MYSQL_PRIMARY_CNF), "replica": (2, MYSQL_REPLICA_CNF),
               "native": (3, MYSQL_REPLICA_CNF + "relay_log=relay-bin\n"), "primary2": (4, MYSQL_PRIMARY_CNF),
               "standby": (5, MYSQL_PRIMARY_CNF + "relay_log=relay-bin\nlog_replica_updates=ON\n")}

# sandbox up --tls: every server serves TLS with a certificate of the sandbox's own CA, and
# refuses clients over TCP without it (unix-socket clients, as root here, are let in)
TLS_CNF = """ssl-ca={tls}/ca.pem
ssl-cert={tls}/localhost.pem
ssl-key={tls}/localhost-key.pem
require_secure_transport=ON
"""


def role_settings(kind: str, role: str) -> tuple[int, str]:
    """(server id, extra my.cnf lines) of a role; replicaN: 9 + N, like the replica."""
    roles = MYSQL_ROLES if kind == MYSQL else ROLES
    if role in roles:
        return roles[role]
    return 9 + int(role.removeprefix("replica")), MYSQL_REPLICA_CNF if kind == MYSQL else ""


def server_cnf(kind: str, role: str, dir: str, port: int, local: bool, tls_dir: str | None) -> str:
    """The whole my.cnf of one sandbox server; ``local``: this host's mariadbd, whose
    character set is set here (a container flavor keeps its own default)."""
    server_id, extra = role_settings(kind, role)
    common = MYSQL_CNF if kind == MYSQL else COMMON_CNF if local else COMMON_CNF.replace(LOCAL_CHARSET_CNF, "")
    return (common.format(dir=dir, port=port, server_id=server_id) + extra +
            (TLS_CNF.format(tls=tls_dir) if tls_dir else ""))
