"""Lag the usual tools read: with --heartbeat-table the primary side keeps a row of a
pt-heartbeat table on the primary, and Debian's own `pt-heartbeat --check` (percona-
toolkit), run against the bridge-fed replica as a DBA runs it against a native one,
reads a lag under a second while a workload runs, and a lag that grows once the primary
side is stopped; so do ProxySQL's query (its monitor with
mysql-monitor_replication_lag_use_percona_heartbeat) and the ReplicationLagQuery that
docs/operations.md gives Orchestrator. Both bridge processes as users start them; the
databases compared at the end."""

import shutil
import subprocess
import time

import pytest

from bridge.check.compare import compare_databases
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, start_pair
from bridge.lab.workload import connect
from tests.conftest import primary_position
from tests.helpers import table_rows, wait_for

pytestmark = pytest.mark.skipif(shutil.which("pt-heartbeat") is None,
                                reason="pt-heartbeat is not installed (make percona: Debian's percona-toolkit)")
TABLE = "rdma_bridge.pt_heartbeat"
# ProxySQL's monitor, word for word (lib/MySQL_Monitor.cpp), in a session at UTC as the
# docs say the replica server must run for it; Orchestrator's query as the docs give it
PROXYSQL = f"SELECT MAX(ROUND(TIMESTAMPDIFF(MICROSECOND, ts, SYSDATE(6))/1000000)) AS Seconds_Behind_Master FROM {TABLE}"
ORCHESTRATOR = f"SELECT ROUND(TIMESTAMPDIFF(MICROSECOND, MAX(ts), UTC_TIMESTAMP(6))/1000000) FROM {TABLE}"


def tool_lags(conn) -> tuple[float, float]:
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("SET time_zone='+00:00'")
        cur.execute(PROXYSQL)
        proxysql = float(cur.fetchone()[0])
        cur.execute("SET time_zone=DEFAULT")
        cur.execute(ORCHESTRATOR)
        return proxysql, float(cur.fetchone()[0])


def pt_check(url, master_server_id: int, tmp_path) -> float:
    """`pt-heartbeat --check` against ``url``: the lag in seconds it prints."""
    defaults = tmp_path / "pt.cnf"  # the password in a file, not on the command line
    defaults.write_text(f"[client]\nuser={url.user}\npassword={url.password}\n")
    defaults.chmod(0o600)
    schema, table = TABLE.split(".")
    done = subprocess.run(["pt-heartbeat", f"--defaults-file={defaults}", "--check", "--utc", "--no-version-check",
                           "--master-server-id", str(master_server_id), "--database", schema, "--table", table,
                           "--host", url.host, "--port", str(url.port)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return float(done.stdout.split()[0])


def test_pt_heartbeat_reads_the_bridge_fed_replicas_lag(sandbox, urls, fresh_schema, tmp_path):
    _, info = sandbox
    schema = fresh_schema("ptbeat")
    pconn, rconn = connect(urls["primary_admin"]), connect(urls["replica_admin"])
    with pconn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute("SELECT @@server_id")
        primary_id = int(cur.fetchone()[0])
    pconn.commit()
    port = free_port()
    replica = replica_process(info["replica"], port, "shm", schema, str(tmp_path))
    primary = primary_process(info["primary"], port, "shm", primary_position(pconn), str(tmp_path),
                              extra=("--heartbeat-table", TABLE, "--heartbeat-interval", "0.1"))
    try:
        alive = start_pair(replica, primary, port)
        with pconn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {schema}")
            cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        wait_for(lambda: table_rows(rconn, "rdma_bridge", "pt_heartbeat") == 1, "the pt-heartbeat row on the replica",
                 alive=alive)
        lags = []
        for i in range(1, 101):  # a workload: the row keeps coming through it
            with pconn.cursor() as cur:
                cur.execute(f"INSERT INTO {schema}.t VALUES (%s, %s)", (i, f"row {i}"))
            pconn.commit()
            if i % 25 == 0:
                lags.append(pt_check(urls["replica_admin"], primary_id, tmp_path))
            time.sleep(0.01)
        assert max(lags) < 1.0, lags
        assert max(tool_lags(rconn)) <= 1.0
        wait_for(lambda: table_rows(rconn, schema) == 100, "100 rows on the replica", alive=alive)
        with rconn.cursor() as cur:  # the row as pt-heartbeat --update writes it: the primary's id, file, position
            cur.execute(f"SELECT server_id, file, position FROM {TABLE}")
            server_id, file, position = cur.fetchone()
        rconn.commit()
        assert server_id == primary_id and file and position > 0
        primary.stop()
        time.sleep(2.5)
        stopped = pt_check(urls["replica_admin"], primary_id, tmp_path)
        time.sleep(1.0)
        assert pt_check(urls["replica_admin"], primary_id, tmp_path) > stopped >= 1.5
        assert min(tool_lags(rconn)) >= 3.0
    finally:
        primary.stop()
        replica.stop()
    result = compare_databases(urls["primary_admin"], urls["replica_admin"], [schema])
    assert result.ok, [(d.table, d.missing, d.extra) for d in result.diffs]
    assert result.digests[f"{schema}.t"][0].rows == 100


def test_a_reader_that_may_not_write_the_table_turns_the_heartbeat_off_with_the_grant_named(urls, caplog):
    from dataclasses import replace

    from bridge.source.heartbeat import HeartbeatWriter

    admin = urls["primary_admin"]
    conn = connect(admin)
    with conn.cursor() as cur:  # may connect, may not write anything
        cur.execute("CREATE USER IF NOT EXISTS 'rdma_nobeat'@'127.0.0.1' IDENTIFIED BY 'nobeat'")
    conn.commit()
    url = replace(admin, user="rdma_nobeat", password="nobeat")  # the admin's URL options (TLS) kept
    writer = HeartbeatWriter(url, 0.05, "test", "percona.heartbeat")
    writer.start()
    try:
        wait_for(lambda: writer.state == "off: no privilege", "the heartbeat off")
    finally:
        writer.close()
    assert writer.written == 0
    assert "grant CREATE, INSERT, UPDATE ON rdma_bridge.*, percona.* " in caplog.text
