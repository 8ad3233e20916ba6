"""Apply mode relay end to end: the two bridge processes as users start them
(`start-replica --apply-mode relay`), the replica side pointing the replica server's own
channel at itself, the server's IO and SQL threads applying what the ring carries. On a
sandbox of its own (its replica becomes a real replica of the primary, which the shared
sandbox's binlog-mode tests must not meet), one flavor on both ends.

Each test ends comparing both databases: same rows, nothing lost, nothing applied twice;
and the replica holds the primary's GTIDs, as a native replica does."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, start_pair
from bridge.lab.workload import MixedWorkload, connect, create_schema
from bridge.model import GtidSet
from bridge.ops.statusdoc import ReplicaStatus, deviations
from bridge.relay.target import RelayTarget
from bridge.server.flavor import Flavor
from tests.conftest import primary_position, relay_sandbox
from tests.helpers import BackgroundWorkload, semi_sync_status, set_semi_sync, table_rows, wait_for, wait_written

CHANNEL = "bridge"
BIG_ROWS, BIG_ROW_BYTES = 100_000, 1000  # one transaction of about 100 MB


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    with relay_sandbox(tmp_path_factory, "relaymode") as (own, info):
        yield own, info, {k: MysqlUrl.parse(v) for k, v in info.items() if v.startswith("mysql://")}


class Relay:
    """The pair in relay mode, the replica server's channel, and what the tests look at."""

    def __init__(self, box, tmp_path, extra_replica: tuple[str, ...] = (), extra_primary: tuple[str, ...] = (),
                 channel: str = CHANNEL, transport: str = "shm") -> None:
        self.box, self.info, self.urls = box
        self.pconn, self.rconn = connect(self.urls["primary_admin"]), connect(self.urls["replica_admin"])
        self.flavor = Flavor.of(self.rconn)
        self.port, self.channel = free_port(), channel
        self.replica = replica_process(self.info["replica"], self.port, transport, channel, str(tmp_path),
                                       extra=("--apply-mode", "relay", *extra_replica))
        self.primary = primary_process(self.info["primary"], self.port, transport, "", str(tmp_path),
                                       extra=("--heartbeat-interval", "0", *extra_primary))
        self.alive = lambda: None
        self.server = RelayTarget(self.urls["replica_admin"], channel)

    def start(self) -> Relay:
        self.alive = start_pair(self.replica, self.primary, self.port)
        return self

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://{self.replica.metrics_address}/status", timeout=5) as answer:
            return json.loads(answer.read())

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{self.replica.metrics_address}/metrics", timeout=5) as answer:
            return answer.read().decode()

    def fresh_table(self, schema: str, rows: int = 0) -> None:
        """``schema``.t (id, v) made anew on the primary, with ``rows`` rows."""
        with self.pconn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {schema}")
            cur.execute(f"CREATE DATABASE {schema}")
            cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20))")
            cur.executemany(f"INSERT INTO {schema}.t VALUES (%s, %s)", [(i, f"row {i}") for i in range(1, rows + 1)])

    def probe(self, name: str) -> tuple[int, str]:
        """The replica side's /ready or /live: (HTTP status, body)."""
        try:
            with urllib.request.urlopen(f"http://{self.replica.metrics_address}/{name}", timeout=5) as answer:
                return answer.status, answer.read().decode().strip()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode().strip()

    def primary_status(self) -> dict:
        with urllib.request.urlopen(f"http://{self.primary.metrics_address}/status", timeout=5) as answer:
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
            cur.execute(self.flavor.replica_channel("STOP", self.channel))
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
        assert deviations(doc, ReplicaStatus) == set()
        assert pair.probe("ready") == (200, "ok") and pair.probe("live") == (200, "ok")  # Kubernetes' probes
        metrics = pair.metrics()
        assert 'rdma_bridge_relay_channel_running{role="replica",thread="sql"} 1.0' in metrics, metrics
        assert 'rdma_bridge_relay_seconds_behind_source{role="replica"}' in metrics
        pair.assert_same([schema])
    finally:
        _set_replica(pair.rconn, flavor, **{"super_read_only" if flavor.is_mysql else "read_only": 0})


def _numbers(flavor: Flavor, schema: str, start: int, end: int) -> str:
    """A derived table of the integers start+1 .. end in a column ``seq``."""
    if flavor.is_mysql:
        return (f"(WITH RECURSIVE n(seq) AS (SELECT {start + 1} UNION ALL SELECT seq + 1 FROM n WHERE seq < {end}) "
                "SELECT seq FROM n) AS numbers")
    return f"{schema}.seq_{start + 1}_to_{end}"  # MariaDB's sequence engine


@pytest.mark.parametrize("fault,transport", [
    ("replica side killed", "shm"), ("replica server killed", "shm"), ("primary side restarted", "shm"),
    ("STOP and START REPLICA", "shm"), ("replica side killed", "tcp"), ("primary side restarted", "tcp")])
def test_after_a_fault_nothing_is_lost_or_applied_twice(box, tmp_path, fault, transport):
    """Each fault while a workload runs (the ship lane framing relay transactions over shm
    and over tcp): equal after, nothing lost or applied twice."""
    pair = Relay(box, tmp_path, transport=transport).start()
    try:
        _fault(pair, fault, f"relay_fault_{transport}_" + fault.split()[0].lower() + fault.split()[1].lower())
    finally:
        pair.stop()


def _fault(pair: Relay, fault: str, schema: str) -> None:
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
    pair.fresh_table(schema, rows=2)
    pair.caught_up("the rows on the replica")
    with pair.rconn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DELETE FROM {schema}.t WHERE id = 2")
    with pair.pconn.cursor() as cur:
        cur.execute(f"UPDATE {schema}.t SET v = 'TWO' WHERE id = 2")
        cur.execute(f"INSERT INTO {schema}.t VALUES (3, 'three')")
    try:
        # MySQL's multi-threaded applier sets the worker's error before its coordinator stops:
        # wait for both, as a DBA's script would
        wait_for(lambda: (s := pair.server.status()).sql_errno != 0 and s.sql_running == "No",
                 "the replica's SQL thread stopped on the error", 60, pair.alive)
        st = pair.server.status()
        code, why = st.cause  # MySQL: the failing worker's, where the coordinator names one stopped after it (3030)
        assert code == 1032 and st.sql_errno in (1032, 3030), st  # a row the event names is not there
        assert st.worker_errno == (1032 if pair.flavor.is_mysql else 0), st
        wait_for(lambda: pair.status()["apply_stopped"] is not None, "the replica side's status shows it", 10,
                 pair.alive)
        stopped = pair.status()["apply_stopped"]
        assert stopped["code"] == 1032 and why[:40] in stopped["error"], stopped
        code, why = pair.probe("ready")
        assert code == 503 and why.startswith("applying stopped: the replica server's channel stopped"), why
    finally:  # the DBA's fix, as on any replica (also when an assertion failed: the next tests share the servers)
        with pair.rconn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"INSERT IGNORE INTO {schema}.t VALUES (2, 'row 2')")
            cur.execute(pair.flavor.replica_channel("START", CHANNEL))
    pair.caught_up("the replica after the fix")
    wait_for(lambda: pair.status()["apply_stopped"] is None, "the replica side's status clears it", 10, pair.alive)
    pair.assert_same([schema])
    pair.primary.check_alive()


@pytest.mark.parametrize("mode", ["received", "applied"])
def test_semi_sync_acknowledges_what_the_replica_server_itself_received_or_executed(box, tmp_path, mode):
    """With the replica server's semi-sync on, the relay asks it for an ACK of each
    transaction: `received` is its ACK (its relay log holds the transaction), `applied`
    its executed GTIDs. The primary commits every transaction semi-synchronously."""
    pair = Relay(box, tmp_path, extra_primary=("--semi-sync", mode))
    flavor = pair.flavor
    with pair.rconn.cursor() as cur:  # before the replica side (re)starts the channel: its IO thread asks for it
        cur.execute(f"SET GLOBAL {flavor.replica_semi_sync_variable} = 1")
    set_semi_sync(pair.pconn, enabled=1, timeout=5000)
    schema = f"relay_semisync_{mode}"
    try:
        pair.start()
        pair.fresh_table(schema)
        wait_for(lambda: semi_sync_status(pair.pconn)["clients"] == "1", "the primary side as semi-sync client", 60,
                 pair.alive)
        with pair.pconn.cursor() as cur:  # MariaDB 11 turns its status ON at the first ACK of a commit
            cur.execute(f"INSERT INTO {schema}.t VALUES (0, 'warm')")
        wait_for(lambda: semi_sync_status(pair.pconn)["status"] == "ON", "semi-sync ON", 30, pair.alive)
        before = semi_sync_status(pair.pconn)
        with pair.pconn.cursor() as cur:
            for i in range(1, 51):
                cur.execute(f"INSERT INTO {schema}.t VALUES (%s, %s)", (i, f"row {i}"))
        after = semi_sync_status(pair.pconn)
        assert int(after["yes_tx"]) - int(before["yes_tx"]) >= 50, (before, after)
        assert int(after["no_tx"]) == int(before["no_tx"]), ("a commit went asynchronously", before, after)
        assert pair.primary_status()["semi_sync"]["acks_sent"] >= 50
        pair.caught_up("the replica after the semi-sync commits")
        pair.assert_same([schema])
    finally:
        set_semi_sync(pair.pconn, enabled=0)
        with pair.rconn.cursor() as cur:
            cur.execute(f"SET GLOBAL {flavor.replica_semi_sync_variable} = 0")
        pair.stop()


def _defaults(url, tmp_path, name: str) -> str:
    """A client option file with ``url``'s account (the password kept off command lines)."""
    path = tmp_path / f"{name}.cnf"
    path.write_text(f"[client]\nuser={url.user}\npassword={url.password}\nhost={url.host}\nport={url.port}\n")
    path.chmod(0o600)
    return str(path)


@pytest.mark.skipif(not all(shutil.which(t) for t in ("pt-online-schema-change", "pt-heartbeat",
                                                      "prometheus-mysqld-exporter")),
                    reason="percona-toolkit and prometheus-mysqld-exporter are not installed (make percona)")
def test_tools_that_no_one_here_wrote_see_a_replica(box, tmp_path):
    """On the replica server's default channel (`--channel ''`, the one a plain SHOW SLAVE
    STATUS shows): Debian's prometheus-mysqld-exporter reports its lag and running threads;
    `pt-online-schema-change --check-slave-lag` waits while its SQL thread is stopped and
    finishes once it runs; `pt-heartbeat --check` reads the lag of the primary's own
    `pt-heartbeat --update`."""
    pair = Relay(box, tmp_path, channel="").start()
    schema, flavor = "relay_tools", pair.flavor
    admin_p, admin_r = pair.urls["primary_admin"], pair.urls["replica_admin"]
    exporter = subprocess.Popen(
        ["prometheus-mysqld-exporter", f"--config.my-cnf={_defaults(admin_r, tmp_path, 'exporter')}",
         f"--web.listen-address=127.0.0.1:{(port := free_port())}", "--collect.slave_status"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "exporter.log", "wb"))  # noqa: SIM115 - the child's
    beat = None
    try:
        pair.fresh_table(schema, rows=500)
        with pair.pconn.cursor() as cur:
            cur.execute(f"CREATE TABLE {schema}.dsns (id INT AUTO_INCREMENT PRIMARY KEY, parent_id INT, "
                        "dsn VARCHAR(255) NOT NULL)")
            cur.execute(f"INSERT INTO {schema}.dsns (dsn) VALUES (%s)", (f"h={admin_r.host},P={admin_r.port}",))
        pair.caught_up("the tools' schema on the replica")

        beat = subprocess.Popen(["pt-heartbeat", f"--defaults-file={_defaults(admin_p, tmp_path, 'beat')}",
                                 "--update", "--create-table", "--utc", "--interval", "0.2", "--no-version-check",
                                 "--database", schema], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(lambda: table_rows(pair.rconn, schema, "heartbeat") == 1, "pt-heartbeat's row on the replica", 30,
                 pair.alive)
        checked = subprocess.run(["pt-heartbeat", f"--defaults-file={_defaults(admin_r, tmp_path, 'check')}",
                                  "--check", "--utc", "--no-version-check", "--master-server-id", "1",
                                  "--database", schema], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0 and float(checked.stdout.split()[0]) < 2.0, (checked.stdout, checked.stderr)

        if flavor.is_mysql:  # Debian's exporter (0.14) and percona-toolkit (3.5) ask SHOW SLAVE STATUS, gone in 8.4
            pytest.skip("Debian's prometheus-mysqld-exporter and pt-online-schema-change predate MySQL 8.4")

        def exported() -> dict[str, float]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                text = answer.read().decode()
            return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("mysql_slave_status_") and 'connection_name=""' in line}  # this channel
        wait_for(lambda: _scrape(exported).get("mysql_slave_status_slave_sql_running") == 1, "the exporter's scrape",
                 30, pair.alive)
        metrics = exported()
        assert metrics["mysql_slave_status_slave_io_running"] == 1 and \
            metrics["mysql_slave_status_seconds_behind_master"] == 0, metrics

        with pair.rconn.cursor() as cur:  # the replica stops applying: pt-osc must wait for it
            cur.execute(flavor.replica_channel("STOP", "") + " SQL_THREAD")
        wait_for(lambda: exported().get("mysql_slave_status_slave_sql_running") == 0, "the exporter sees it stopped",
                 30, pair.alive)

        def restart_later() -> None:
            time.sleep(4)
            conn = connect(admin_r)
            with conn.cursor() as cur:
                cur.execute(flavor.replica_channel("START", "") + " SQL_THREAD")
            conn.close()

        starter = threading.Thread(target=restart_later)
        starter.start()
        started = time.monotonic()
        osc = subprocess.run(["pt-online-schema-change", f"--defaults-file={_defaults(admin_p, tmp_path, 'osc')}",
                              f"D={schema},t=t", "--alter", "ADD COLUMN note VARCHAR(10) NULL", "--execute",
                              "--recursion-method", f"dsn=D={schema},t=dsns", "--check-slave-lag",
                              f"h={admin_r.host},P={admin_r.port}", "--max-lag", "1", "--check-interval", "0.5",
                              "--no-version-check", "--chunk-size", "100"], capture_output=True, text=True,
                             timeout=180)
        starter.join()
        assert osc.returncode == 0, (osc.stdout[-2000:], osc.stderr[-2000:])
        assert "is stopped.  Waiting" in osc.stderr and time.monotonic() - started >= 3.5, osc.stderr[-2000:]
        pair.caught_up("the replica after pt-online-schema-change")
        pair.assert_same([schema])
    finally:
        for proc in (exporter, beat):
            if proc is not None:
                proc.terminate()
                proc.wait(10)
        pair.stop()


def _scrape(exported) -> dict[str, float]:
    """The exporter's slave metrics, or none while it cannot be reached yet."""
    try:
        return exported()
    except OSError:
        return {}


def test_a_position_the_primary_purged_gets_the_primarys_own_error_1236(relay):
    """The replica server lacks transactions the primary has purged: its IO thread gets the
    error the primary itself gives such a dump (1236, its text), in Last_IO_Error, and the
    primary side stops with the missing range. Last in this module: the replica stays behind."""
    pair = relay.start()
    schema = "relay_purged"
    pair.fresh_table(schema)
    pair.caught_up("the table on the replica")
    pair.primary.stop()
    with pair.pconn.cursor() as cur:  # transactions the replica lacks, then their binlog purged
        cur.execute(f"INSERT INTO {schema}.t VALUES (1, 'a'), (2, 'b')")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW BINARY LOGS")
        newest = cur.fetchall()[-1][0]

    def purged() -> bool:  # a file a dump still reads (the stopped side's, until its thread ends) stays
        with pair.pconn.cursor() as cur:
            cur.execute("PURGE BINARY LOGS TO %s", (newest,))
            cur.execute("SHOW BINARY LOGS")
            return [row[0] for row in cur.fetchall()] == [newest]
    wait_for(purged, "the older binlog files purged", 30)
    pair.primary.start()
    # the IO thread's own report of a source's error 1236 (MySQL numbers it 13114), with the primary's words
    try:
        wait_for(lambda: pair.server.status().io_errno in (1236, 13114), "the IO thread refused with error 1236", 60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {pair.server.status()}\nprimary side: {pair.primary.log_tail(3000)}\n"
                             f"replica side: {pair.replica.log_tail(3000)}") from None
    st = pair.server.status()
    assert "1236" in st.io_error and "purged" in st.io_error, st.io_error
    wait_for(lambda: not pair.primary.alive(), "the primary side stopped", 30)
    assert "were purged" in pair.primary.log_tail(2000)
