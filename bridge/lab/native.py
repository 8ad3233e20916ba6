"""The sandbox's native replicas of the primary (``sandbox up --native-replica``, the
benchmarks' baseline; ``--standby``, a failover drill's new primary): the primary's schemas
copied with its own dump program from one consistent snapshot, then MariaDB's or MySQL's
own GTID replication started from that snapshot's position. ``box`` is the Sandbox."""

from __future__ import annotations

import re
import subprocess

from bridge.errors import SandboxError
from bridge.lab.runners import root_connection
from bridge.server.flavor import Flavor


def configure_native(box, state: dict, role: str) -> None:
    """Copy the primary's schemas (mariadb-dump or mysqldump, one consistent snapshot)
    and replicate from the snapshot's GTID position: a native replica started at the
    position alone would stop at the first row event for a table it lacks (the
    bridge's rdma_bridge.heartbeat, created on the primary by an earlier run)."""
    primary = root_connection(box.server(state, "primary"))
    flavor = Flavor.of(primary)
    with primary.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute("CREATE USER IF NOT EXISTS 'rdma_native'@'127.0.0.1' IDENTIFIED BY %s",
                    (state["passwords"]["apply"],))
        cur.execute("GRANT REPLICATION SLAVE ON *.* TO 'rdma_native'@'127.0.0.1'")
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT IN "
                    "('mysql', 'information_schema', 'performance_schema', 'sys')")
        schemas = [row[0] for row in cur.fetchall()]
        cur.execute(flavor.gtid_position_sql)
        position = cur.fetchone()[0]
    primary.close()
    if schemas:
        position = _copy_schemas(box, state, schemas, flavor, role)
    native = root_connection(box.server(state, role))
    with native.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute("CREATE USER IF NOT EXISTS 'rdma_admin'@'127.0.0.1' IDENTIFIED BY %s",
                    (state["passwords"]["admin"],))
        cur.execute("GRANT ALL ON *.* TO 'rdma_admin'@'127.0.0.1' WITH GRANT OPTION")
        if not flavor.is_mysql:  # MySQL's position came with the dump (its GTID_PURGED)
            cur.execute("SET GLOBAL gtid_slave_pos=%s", (position,))
            if role == "standby" and position:  # its binlog starts there: a dump from it may too
                cur.execute("SET GLOBAL gtid_binlog_state=%s", (position,))
        statement, params = flavor.change_source(state["ports"]["primary"], "rdma_native",
                                                 state["passwords"]["apply"],
                                                 str(box.dir / "tls" / "ca.pem") if state.get("tls") else None)
        cur.execute(statement, params)
        cur.execute(flavor.start_replica)
    native.close()
    state[f"{role}_configured"] = True
    box.save(state)

def _copy_schemas(box, state: dict, schemas: list[str], flavor: Flavor, role: str) -> str:
    """The primary's ``schemas`` into a native replica (``role``), not into its binlog;
    the snapshot's GTID position (MariaDB's; MySQL's dump sets the replica's
    GTID_PURGED itself)."""
    primary, native = box.server(state, "primary"), box.server(state, role)
    gtid_options = ("--set-gtid-purged=ON",) if flavor.is_mysql else ("--master-data=2", "--gtid")
    dump = subprocess.run(box.runner(primary).command(
        flavor.dump_program, f"--socket={primary.socket}", "--user=root", "--single-transaction", *gtid_options,
        "--routines", "--events", "--triggers", "--databases", *schemas), capture_output=True)
    found = re.search(rb"gtid_slave_pos='([^']*)'", dump.stdout)
    if dump.returncode != 0 or not (found or flavor.is_mysql):
        why = dump.stderr.decode(errors='replace').strip()[-500:] or 'no GTID position in the dump'
        raise SandboxError(f"sandbox: copying the primary's schemas for the {role} server failed: {why}")
    loaded = subprocess.run(box.runner(native).command(flavor.client_program, f"--socket={native.socket}",
                                                          "--user=root"),
                            input=b"SET SESSION sql_log_bin=0;\n" + dump.stdout, capture_output=True)
    if loaded.returncode != 0:
        raise SandboxError(f"sandbox: loading the primary's schemas into the {role} server failed: "
                           f"{loaded.stderr.decode(errors='replace').strip()[-500:]}")
    return found.group(1).decode() if found else ""
