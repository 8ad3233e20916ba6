"""Apply mode relay end to end: the two bridge processes as users start them
(`start-replica --apply-mode relay`), the replica side pointing the replica server's own
channel at itself, the server's IO and SQL threads applying what the ring carries. On a
sandbox of its own (its replica becomes a real replica of the primary, which the shared
sandbox's binlog-mode tests must not meet), one flavor on both ends.

Each test ends comparing both databases: same rows, nothing lost, nothing applied twice;
and the replica holds the primary's GTIDs, as a native replica does."""

from __future__ import annotations

import json
import signal
import urllib.request

import pytest

from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, start_pair
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import MixedWorkload, connect, create_schema
from bridge.model import GtidSet
from bridge.relay.target import RelayTarget
from bridge.server.flavor import Flavor
from tests.conftest import primary_position, sandbox_up, server_flavors
from tests.helpers import BackgroundWorkload, wait_for, wait_written

CHANNEL = "bridge"
BIG_ROWS, BIG_ROW_BYTES = 100_000, 1000  # one transaction of about 100 MB


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    primary, replica = server_flavors()
    if primary != replica:
        pytest.skip("apply mode relay: one flavor per pair")
    own = Sandbox(tmp_path_factory.mktemp("relaymode"))
    info = sandbox_up(own)
    urls = {k: MysqlUrl.parse(v) for k, v in info.items() if v.startswith("mysql://")}
    yield own, info, urls
    own.down()


class Relay:
    """The pair in relay mode, the replica server's channel, and what the tests look at."""

    def __init__(self, box, tmp_path, extra_replica: tuple[str, ...] = ()) -> None:
        self.box, self.info, self.urls = box
        self.pconn, self.rconn = connect(self.urls["primary_admin"]), connect(self.urls["replica_admin"])
        self.flavor = Flavor.of(self.rconn)
        self.port = free_port()
        self.replica = replica_process(self.info["replica"], self.port, "shm", CHANNEL, str(tmp_path),
                                       extra=("--apply-mode", "relay", *extra_replica))
        self.primary = primary_process(self.info["primary"], self.port, "shm", "", str(tmp_path),
                                       extra=("--heartbeat-interval", "0"))
        self.alive = lambda: None
        self.server = RelayTarget(self.urls["replica_admin"], CHANNEL)

    def start(self) -> Relay:
        self.alive = start_pair(self.replica, self.primary, self.port)
        return self

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://{self.replica.metrics_address}/status", timeout=5) as answer:
            return json.loads(answer.read())

    def executed(self) -> GtidSet:
        return self.server.executed()

    def caught_up(self, what: str, timeout_s: float = 120.0) -> None:
        """Until the replica server has executed everything the primary committed."""
        with self.pconn.cursor() as cur:
            cur.execute(self.flavor.gtid_position_sql)
            written = GtidSet.parse(cur.fetchone()[0])
        try:
            wait_for(lambda: self.executed().contains_all(written), what, timeout_s, self.alive)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self.server.status()}\nreplica side: {self.replica.log_tail()}") from None

    def assert_same(self, schemas: list[str]) -> None:
        result = compare_databases(self.urls["primary_admin"], self.urls["replica_admin"], schemas)
        assert result.ok and result.digests, [(d.table, d.missing, d.extra) for d in result.diffs]

    def stop(self) -> None:
        for proc in (self.primary, self.replica):
            proc.stop()
        with self.rconn.cursor() as cur:  # the channel would keep reconnecting to a port that is gone
            cur.execute(self.flavor.replica_channel("STOP", CHANNEL))
        for conn in (self.pconn, self.rconn):
            conn.close()
        self.server.close()


@pytest.fixture
def relay(box, tmp_path):
    pair = Relay(box, tmp_path)
    yield pair
    pair.stop()


def _set_replica(conn, flavor: Flavor, **settings) -> None:
    """Global settings of the replica server that take effect with its channel stopped."""
    with conn.cursor() as cur:
        cur.execute(flavor.replica_channel("STOP", CHANNEL))
        for name, value in settings.items():
            cur.execute(f"SET GLOBAL {name} = %s", (value,))
        cur.execute(flavor.replica_channel("START", CHANNEL))


def test_a_relay_fed_replica_is_a_real_replica(relay):
    """A mixed workload with DDL and a 100 MB transaction under the server's own parallel
    applier, read-only: equal, both threads running, the primary's GTIDs on the replica."""
    pair = relay.start()
    flavor = pair.flavor
    parallel = {"replica_parallel_workers": 4} if flavor.is_mysql else \
        {"slave_parallel_threads": 4, "slave_parallel_mode": "optimistic"}
    wait_for(lambda: pair.server.status().io_running == "Yes", "the channel connected to the relay", 60, pair.alive)
    _set_replica(pair.rconn, flavor, **parallel, **{"super_read_only" if flavor.is_mysql else "read_only": 1})
    schema = "relay_real"
    try:
        create_schema(pair.pconn, schema)
        MixedWorkload(pair.pconn, schema, seed=5).run(1500)
        with pair.pconn.cursor() as cur:
            cur.execute(f"CREATE TABLE {schema}.bulk (id INT PRIMARY KEY, pad VARCHAR(1000))")
            if flavor.is_mysql:
                cur.execute("SET SESSION cte_max_recursion_depth = 10000")
            cur.execute("BEGIN")
            for start in range(0, BIG_ROWS, 5000):
                cur.execute(f"INSERT INTO {schema}.bulk SELECT seq, REPEAT('x', {BIG_ROW_BYTES - 24}) FROM "
                            + _numbers(flavor, schema, start, start + 5000))
            cur.execute("COMMIT")
            cur.execute(f"ALTER TABLE {schema}.bulk ADD COLUMN relay_note VARCHAR(10) NULL")
        MixedWorkload(pair.pconn, schema, seed=6).run(300)
        pair.caught_up("the replica executed every transaction", timeout_s=300)
        st = pair.server.status()
        assert (st.io_running, st.sql_running, st.io_errno, st.sql_errno) == ("Yes", "Yes", 0, 0), st
        assert pair.executed().contains_all(GtidSet.parse(primary_position(pair.pconn))), "not the primary's GTIDs"
        doc = pair.status()
        assert doc["apply_mode"] == "relay" and doc["relay"]["channel"]["sql_running"] == "Yes", doc["relay"]
        assert doc["apply_stopped"] is None and doc["relay"]["dumps_served"] >= 1
        pair.assert_same([schema])
    finally:
        _set_replica(pair.rconn, flavor, **{"super_read_only" if flavor.is_mysql else "read_only": 0})


def _numbers(flavor: Flavor, schema: str, start: int, end: int) -> str:
    """A derived table of the integers start+1 .. end in a column ``seq``."""
    if flavor.is_mysql:
        return (f"(WITH RECURSIVE n(seq) AS (SELECT {start + 1} UNION ALL SELECT seq + 1 FROM n WHERE seq < {end}) "
                "SELECT seq FROM n) AS numbers")
    return f"{schema}.seq_{start + 1}_to_{end}"  # MariaDB's sequence engine


@pytest.mark.parametrize("fault", ["replica side killed", "replica server killed", "primary side restarted",
                                   "STOP and START REPLICA"])
def test_after_a_fault_nothing_is_lost_or_applied_twice(relay, fault):
    pair = relay.start()
    schema = "relay_fault_" + fault.split()[0].lower() + fault.split()[1].lower()
    create_schema(pair.pconn, schema)
    with BackgroundWorkload(pair.urls["primary_admin"], schema, seed=len(fault)):
        wait_written(pair.pconn, 100, alive=pair.alive)
        if fault == "replica side killed":
            assert pair.replica.stop(signal.SIGKILL) == -signal.SIGKILL
            wait_written(pair.pconn, 100)
            pair.replica.start()
        elif fault == "replica server killed":
            pair.box.stop_server("replica", signal.SIGKILL)
            wait_written(pair.pconn, 100)
            pair.box.up()
            pair.rconn = connect(pair.urls["replica_admin"])
        elif fault == "primary side restarted":
            assert pair.primary.stop(signal.SIGKILL) == -signal.SIGKILL
            wait_written(pair.pconn, 100)
            pair.primary.start()
        else:
            with pair.rconn.cursor() as cur:
                cur.execute(pair.flavor.replica_channel("STOP", CHANNEL))
            wait_written(pair.pconn, 100)
            with pair.rconn.cursor() as cur:
                cur.execute(pair.flavor.replica_channel("START", CHANNEL))
        wait_written(pair.pconn, 100, alive=pair.alive)
    pair.caught_up(f"the replica caught up after: {fault}")
    st = pair.server.status()
    assert (st.io_running, st.sql_running, st.sql_errno) == ("Yes", "Yes", 0), st
    pair.assert_same([schema])


def test_an_apply_error_stops_the_servers_channel_and_status_says_so(relay):
    """A row deleted on the replica, then updated on the primary: the server's SQL thread
    stops with its error (Last_SQL_Error), the replica side's status shows it, and the
    primary side waits; once the DBA puts the row back and starts the channel, it goes on."""
    pair = relay.start()
    schema = "relay_error"
    with pair.pconn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {schema}")
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT INTO {schema}.t VALUES (1, 'one'), (2, 'two')")
    pair.caught_up("the rows on the replica")
    with pair.rconn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DELETE FROM {schema}.t WHERE id = 2")
    with pair.pconn.cursor() as cur:
        cur.execute(f"UPDATE {schema}.t SET v = 'TWO' WHERE id = 2")
        cur.execute(f"INSERT INTO {schema}.t VALUES (3, 'three')")
    wait_for(lambda: pair.server.status().sql_errno != 0, "the replica's SQL thread stopped on the error", 60,
             pair.alive)
    st = pair.server.status()
    assert st.sql_running == "No" and st.sql_errno == 1032, st  # a row the event names is not there
    wait_for(lambda: pair.status()["apply_stopped"] is not None, "the replica side's status shows it", 10, pair.alive)
    stopped = pair.status()["apply_stopped"]
    assert stopped["code"] == 1032 and st.sql_error[:40] in stopped["error"], stopped
    with pair.rconn.cursor() as cur:  # the DBA's fix, as on any replica
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"INSERT INTO {schema}.t VALUES (2, 'two')")
        cur.execute(pair.flavor.replica_channel("START", CHANNEL))
    pair.caught_up("the replica after the fix")
    wait_for(lambda: pair.status()["apply_stopped"] is None, "the replica side's status clears it", 10, pair.alive)
    pair.assert_same([schema])
    pair.primary.check_alive()
