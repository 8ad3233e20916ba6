"""A replica that runs read_only=ON, as replicas normally do: the applier writes through
it (the grants files give it READ_ONLY ADMIN on MariaDB, CONNECTION_ADMIN on MySQL), the
replica stays read_only, and an applier account that may not write through it, or
MySQL's super_read_only=ON, is refused at start with the fix. Both bridge processes as
users start them; the databases compared at the end."""

import os
import subprocess
import sys

import pytest

from bridge.check.compare import compare_databases
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, start_pair
from bridge.lab.workload import connect
from bridge.server.flavor import Flavor
from tests.conftest import primary_position
from tests.helpers import table_rows, wait_for

ROWS = 30


def set_read_only(conn, on: bool, super_read_only: bool = False) -> None:
    with conn.cursor() as cur:
        if super_read_only or not on:
            if Flavor.of(conn).is_mysql:
                cur.execute(f"SET GLOBAL super_read_only={'ON' if super_read_only else 'OFF'}")
        cur.execute(f"SET GLOBAL read_only={'ON' if on else 'OFF'}")


def read_only(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT @@global.read_only")
        return int(cur.fetchone()[0])


def test_a_read_only_replica_is_applied_to_and_stays_read_only(sandbox, urls, fresh_schema, tmp_path):
    _, info = sandbox
    schema = fresh_schema("readonly")
    pconn, rconn = connect(urls["primary_admin"]), connect(urls["replica_admin"])
    port = free_port()
    replica = replica_process(info["replica"], port, "shm", schema, str(tmp_path))
    primary = primary_process(info["primary"], port, "shm", primary_position(pconn), str(tmp_path))
    set_read_only(rconn, True)
    try:
        alive = start_pair(replica, primary, port)
        with pconn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {schema}")
            cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20))")
            for i in range(1, ROWS + 1):
                cur.execute(f"INSERT INTO {schema}.t VALUES (%s, %s)", (i, f"row {i}"))
        pconn.commit()
        wait_for(lambda: table_rows(rconn, schema) == ROWS, f"{ROWS} rows on the read_only replica", alive=alive)
        assert read_only(rconn) == 1  # the bridge never switched it to writable
    finally:
        primary.stop()
        replica.stop()
        set_read_only(rconn, False)
    result = compare_databases(urls["primary_admin"], urls["replica_admin"], [schema])
    assert result.ok, [(d.table, d.missing, d.extra) for d in result.diffs]
    assert result.digests[f"{schema}.t"][0].rows == ROWS
    with open(replica.log_path, errors="replace") as log:
        assert "runs read_only=ON: the applier writes through it" in log.read()


def start_replica(url: str, channel: str):
    return subprocess.run([sys.executable, "-m", "bridge", "start-replica", "--target", url, "--listen",
                           f"127.0.0.1:{free_port()}", "--channel", channel, "--metrics", "off"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "RDMA_BRIDGE_SECRET": ""})


def test_an_applier_that_may_not_write_through_read_only_is_refused_with_the_grant(urls, fresh_schema):
    rconn = connect(urls["replica_admin"])
    flavor = Flavor.of(rconn)
    grant = flavor.read_only_privileges[0]
    channel = fresh_schema("ro_refused")
    r = urls["replica"]
    with rconn.cursor() as cur:  # the replica grants, less the one that writes through read_only
        cur.execute("CREATE USER IF NOT EXISTS 'ro_applier'@'127.0.0.1' IDENTIFIED BY 'pw-ro'")
        cur.execute("GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX ON *.* TO "
                    "'ro_applier'@'127.0.0.1'")
    set_read_only(rconn, True)
    try:
        refused = start_replica(f"mysql://ro_applier:pw-ro@127.0.0.1:{r.port}", channel)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
        line = refused.stderr.strip().splitlines()[-1]
        assert "runs read_only=ON and ro_applier may not write through it" in line, line
        assert f"GRANT {grant} ON *.* TO 'ro_applier'@'127.0.0.1'" in line, line
        assert "never switches the replica to writable" in line, line
        if flavor.is_mysql:
            set_read_only(rconn, True, super_read_only=True)
            refused = start_replica(f"mysql://{r.user}:{r.password}@127.0.0.1:{r.port}", channel)
            line = refused.stderr.strip().splitlines()[-1]
            assert refused.returncode != 0 and "super_read_only=ON" in line and "CONNECTION_ADMIN" in line, line
        assert read_only(rconn) == 1
    finally:
        set_read_only(rconn, False)
        with rconn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS 'ro_applier'@'127.0.0.1'")


@pytest.mark.parametrize("on", [True, False])
def test_doctor_says_whether_the_replica_is_read_only_and_the_applier_can_write_through_it(urls, on):
    rconn = connect(urls["replica_admin"])
    r = urls["replica"]
    set_read_only(rconn, on)
    try:
        out = subprocess.run([sys.executable, "-m", "bridge", "doctor", "--target",
                              f"mysql://{r.user}:{r.password}@127.0.0.1:{r.port}"],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "RDMA_BRIDGE_SECRET": ""})
    finally:
        set_read_only(rconn, False)
    line = next(line for line in out.stdout.splitlines() if "replica read_only" in line)
    if on:
        assert line.startswith("PASS") and "applications cannot write, the applier can" in line, line
    else:
        assert line.startswith("INFO") and "read_only=OFF" in line, line
