"""One primary side, three replica sides (issue: fan-out with a semi-sync quorum): one
read of the binlog placed in three rings; a replica side frozen (SIGSTOP) holds the
others back for nothing and rejoins; one killed and restarted catches up while the
primary stays semi-sync with a quorum of two; the primary side restarted with the
replica sides at three different positions. Every replica ends equal to the primary,
row by row (the keyless ledger table shows a doubled or missing transaction)."""

import json
import signal
import threading
import time
import urllib.request

import pymysql
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl, PrimaryConfig, ReplicaConfig
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, wait_port
from bridge.lab.sandbox import Sandbox
from bridge.lab.workload import connect, create_schema
from bridge.model import GtidSet
from bridge.node.fanout import FanOutNode
from bridge.node.replica import ReplicaNode
from bridge.ops.metrics import prometheus_text
from bridge.ops.report import render_html, status_table
from bridge.ops.statusdoc import PrimaryStatus, deviations
from bridge.server import dbconn
from bridge.transport import rdma_available
from tests.conftest import primary_position, sandbox_up
from tests.helpers import (
    BackgroundWorkload,
    channel_row,
    semi_sync_status,
    set_semi_sync,
    wait_for,
    wait_shipped,
    wait_written,
)

REPLICAS = ("replica", "replica2", "replica3")
# rdma joins where a verbs device exists: `make test-rdma` runs these in its Soft-RoCE guest
TRANSPORTS = ["shm", "tcp"] + (["rdma"] if rdma_available() else [])
# a fan-out whose replica sides are served over different transports (--replica tcp://HOST:PORT):
# rdma members beside a tcp and a shm one where a verbs device exists, else shm beside tcp
MIXED = ("rdma", "tcp", "shm") if rdma_available() else ("shm", "tcp", "shm")
RING = 256 << 10  # small: a frozen replica side fills it within a second of the workload


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """A sandbox of its own: a primary and three replica servers."""
    sandbox = Sandbox(tmp_path_factory.mktemp("fanout"))
    info = sandbox_up(sandbox, replicas=3)
    yield info
    sandbox.down()


class FanOut:
    """A fan-out primary side in this process (its status read directly) feeding
    replica sides that are processes (frozen, killed) or nodes in this process."""

    def __init__(self, info, tmp_path, name, transport="shm"):
        """``transport``: every replica side's, or a tuple of each one's (a mixed fan-out)."""
        self.info, self.dir = info, str(tmp_path)
        self.transports = transport if isinstance(transport, tuple) else (transport,) * len(REPLICAS)
        self.transport = self.transports[0]
        self.channel = self.schema = f"{name}_{int(time.time())}"
        self.primary = connect(MysqlUrl.parse(info["primary_admin"]))
        self.start_gtid = primary_position(self.primary)
        self.ports = [free_port() for _ in REPLICAS]
        self.procs = [None] * len(REPLICAS)
        self.inproc = []
        self.node, self.thread, self.errors = None, None, []

    def start_replica(self, i, process=True, target=None, channel=None):
        if process:
            proc = replica_process(self.info[REPLICAS[i]], self.ports[i], self.transports[i], self.channel, self.dir,
                                   ring_bytes=RING)
            self.procs[i] = proc.start()
            wait_port(self.ports[i], alive=proc.check_alive)
        else:
            node = ReplicaNode(ReplicaConfig(target=MysqlUrl.parse(self.info[target or REPLICAS[i]]),
                                             listen=("127.0.0.1", self.ports[i]), transport=self.transports[i],
                                             ring_bytes=RING, channel=channel or self.channel))
            node.start()
            threading.Thread(target=node.run, daemon=True).start()
            self.inproc.append(node)

    def start(self, process=True, **overrides):
        """Three replica sides (processes, or nodes in this process), the schema, the fan-out."""
        for i in range(len(REPLICAS)):
            self.start_replica(i, process)
        self.create_schema()
        self.start_primary(**overrides)

    def create_schema(self):
        """The test's schema. A primary that does not answer for a minute fails the test with
        its process list (CREATE DATABASE hung once for 5 minutes, with heavy load beside the suite)."""
        url = MysqlUrl.parse(self.info["primary_admin"])
        conn = dbconn.connect(url, autocommit=True, read_timeout=60)
        try:
            create_schema(conn, self.schema)
        except pymysql.MySQLError as exc:
            look = connect(url)
            with look.cursor() as cur:
                cur.execute("SHOW FULL PROCESSLIST")
                pytest.fail(f"create schema {self.schema} on the primary: {exc}; its processes: {cur.fetchall()}")
        finally:
            conn.close()

    def start_primary(self, **overrides):
        replicas = tuple(("127.0.0.1", port) for port in self.ports)
        cfg = PrimaryConfig(source=MysqlUrl.parse(self.info["primary"]), replica=replicas[0], replicas=replicas,
                            transport=self.transport, transports=self.transports, start_gtid=self.start_gtid,
                            **{"heartbeat_s": 0.1, "server_id": 6100, "backpressure_timeout_s": 1.0,
                               "heartbeat_row_s": 0.1, **overrides})
        self.node = FanOutNode(cfg)

        def run():
            try:
                self.node.run()
            except Exception as exc:  # surfaced by the tests' alive()
                self.errors.append(exc)
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop_primary(self):
        self.node.stop()
        self.thread.join(15)
        self.node.close()

    def alive(self):
        assert not self.errors, self.errors
        for proc in self.procs:
            if proc is not None:
                proc.check_alive()

    def states(self):
        return [m["state"] for m in self.node.status()["replicas"]]

    def reached(self, i, target: GtidSet) -> bool:
        conn = connect(MysqlUrl.parse(self.info[f"{REPLICAS[i]}_admin"]))
        try:
            return GtidSet.parse(channel_row(conn, self.channel)[1]).contains_all(target)
        finally:
            conn.close()

    def sync(self, which=range(len(REPLICAS)), timeout_s=90.0):
        target = GtidSet.parse(primary_position(self.primary))
        wait_for(lambda: all(self.reached(i, target) for i in which), f"replicas {list(which)} at {target}",
                 timeout_s, alive=self.alive)

    def assert_all_same(self):
        self.sync()
        for role in REPLICAS:
            result = compare_databases(MysqlUrl.parse(self.info["primary_admin"]),
                                       MysqlUrl.parse(self.info[f"{role}_admin"]), [self.schema])
            assert result.ok, (role, [(d.table, d.missing, d.extra) for d in result.diffs])
            assert result.digests[f"{self.schema}.ledger"][0].rows > 0

    def close(self):
        if self.node is not None:
            self.stop_primary()
        for proc in self.procs:
            if proc is not None:
                proc.stop()
        for node in self.inproc:
            node.stop()
            node.close()
        self.primary.close()


@pytest.fixture
def fanout(box, tmp_path, request):
    made = []

    def make(transport="shm"):
        made.append(FanOut(box, tmp_path, request.node.name.split("[")[0][5:25], transport))
        return made[-1]
    yield make
    for f in made:
        f.close()


@pytest.mark.parametrize("transport", TRANSPORTS + [MIXED], ids=lambda t: "-".join(t) if isinstance(t, tuple) else t)
def test_three_replica_sides_from_one_read_end_equal(fanout, transport, mysql_primary, mysql_replica):
    f = fanout(transport)
    f.start(process=False, heartbeat_row_s=0.0)  # no heartbeat rows: once the load stops, nothing new is placed
    with BackgroundWorkload(MysqlUrl.parse(f.info["primary_admin"]), f.schema):
        wait_for(lambda: f.states() == ["streaming"] * 3, "all three in the shared stream", alive=f.alive)
        wait_shipped(f.node, 200, alive=f.alive)
    f.assert_all_same()
    assert f.states() == ["streaming"] * 3
    wait_for(lambda: [m["behind_s"] for m in f.node.status()["replicas"]] == [0.0] * 3,
             "each replica side seen to have applied everything placed", alive=f.alive)
    assert f.node.counts.binlog_reopens == 1  # one read of the binlog for all three
    # the compiled framing reads MariaDB's and MySQL's transactions; sql apply mode replica sides
    # (across flavors) take them decoded, one by one
    if mysql_primary == mysql_replica and transport != MIXED:
        assert f.node.counts.lane_runs > 0  # one lane call feeds all three rings, over shm and tcp alike
    doc = f.node.status()  # each replica side in /status, /metrics (a replica label) and `status`
    assert [m["transport"] for m in doc["replicas"]] == list(f.transports)
    assert deviations(doc, PrimaryStatus) == set()
    families = {fam.name: fam for fam in text_string_to_metric_families(prometheus_text("primary", doc))}
    states = {(s.labels["replica"], s.labels["state"]): s.value for s in families["rdma_bridge_replica_state"].samples}
    assert sum(states.values()) == 3 and all(states[(f"127.0.0.1:{port}", "streaming")] == 1 for port in f.ports)
    table = status_table({"taken_at": "now", "nodes": {"primary": doc}})
    assert all(f"replica 127.0.0.1:{port}" in table for port in f.ports), table
    page = render_html({"taken_at": "now", "nodes": {"primary": doc}})
    assert all(f"<td>127.0.0.1:{port}</td><td>streaming</td>" in page for port in f.ports)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_sleeping_member_is_woken_by_the_placement_itself(fanout, transport):
    """Ten transactions a second, each finding the three replica sides asleep: each member's
    time from placement to its consumer taking the frame (the ``deliver`` stage, measured
    inside the bridge) stays near member 1's. Before, over rdma a further member's wakeup
    went out only when its completion was reaped at the next placement (100 ms later here)."""
    f = fanout(transport)
    f.start(process=False, heartbeat_row_s=0.0)
    wait_for(lambda: f.states() == ["streaming"] * 3, "all three in the shared stream", alive=f.alive)
    with f.primary.cursor() as cur:
        for i in range(30):
            time.sleep(0.1)  # every replica side back asleep
            cur.execute(f"INSERT INTO {f.schema}.ledger (account, amount, note) VALUES (1, {i}, 'wake')")
    f.sync()
    delivered = [node.stages.summary()["deliver"]["p50"] for node in f.inproc]
    for i, p50 in enumerate(delivered[1:], 2):
        # within 2x member 1's, or 10 ms of it (the resolution of the emulated guest)
        assert p50 <= max(2 * delivered[0], delivered[0] + 10_000), f"member {i}: {delivered} µs"
    f.assert_all_same()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_frozen_replica_side_holds_nobody_back_and_rejoins(fanout, transport):
    f = fanout(transport)
    f.start()
    wait_for(lambda: f.states() == ["streaming"] * 3, "all three in the shared stream", alive=f.alive)
    with BackgroundWorkload(MysqlUrl.parse(f.info["primary_admin"]), f.schema):
        wait_shipped(f.node, alive=f.alive)
        f.procs[1].proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: f.states()[1] != "streaming", "the frozen one to leave the shared stream",
                     alive=f.alive)
            wait_shipped(f.node, 300, alive=f.alive)  # the workload goes on; the two others keep up
            f.sync(which=(0, 2), timeout_s=30)
            assert not f.reached(1, GtidSet.parse(primary_position(f.primary)))  # it is frozen
            assert f.node.status()["replicas"][0]["behind_s"] is not None
            assert f.states()[0] == f.states()[2] == "streaming"
        finally:
            f.procs[1].proc.send_signal(signal.SIGCONT)
        wait_for(lambda: f.states() == ["streaming"] * 3, "the frozen one back in the shared stream",
                 timeout_s=90, alive=f.alive)
    f.assert_all_same()


@pytest.mark.parametrize("mode,transport", [("applied", "shm"), ("received", "shm"), ("received", "tcp"),
                                            ("received", MIXED)] + [("received", "rdma")] * ("rdma" in TRANSPORTS),
                         ids=lambda t: "-".join(t) if isinstance(t, tuple) else t)
def test_quorum_of_two_keeps_semi_sync_while_one_is_killed_and_restarted(fanout, semi_sync_box, mode, transport,
                                                                         mysql_primary, mysql_replica):
    f = fanout(transport)
    f.start(semi_sync=mode, semi_sync_quorum=2)
    wait_for(lambda: f.states() == ["streaming"] * 3, "all three in the shared stream", alive=f.alive)
    wait_for(lambda: semi_sync_status(semi_sync_box)["clients"] == "1", "the fan-out as semi-sync client")
    with BackgroundWorkload(MysqlUrl.parse(f.info["primary_admin"]), f.schema):
        wait_for(lambda: semi_sync_status(semi_sync_box)["status"] == "ON", "semi-sync ON", alive=f.alive)
        async_before = int(semi_sync_status(semi_sync_box)["no_tx"])
        killed, f.procs[2] = f.procs[2], None  # gone on purpose: not a failure alive() reports
        assert killed.stop(signal.SIGKILL) == -signal.SIGKILL
        wait_for(lambda: f.states()[2] != "streaming", "the killed one out of the shared stream", alive=f.alive)
        for _ in range(20):  # two of three still answer: the primary stays semi-sync
            time.sleep(0.1)
            assert semi_sync_status(semi_sync_box)["status"] == "ON"
        f.start_replica(2)
        wait_for(lambda: f.states() == ["streaming"] * 3, "the restarted one back in the shared stream",
                 timeout_s=90, alive=f.alive)
        assert f.node.counts.acks_sent > 0
        if mode == "received" and not (mysql_primary or mysql_replica) and transport != MIXED:
            # the ship lane feeds all three rings and sends the ACKs itself: it runs while all three stream
            # and no ACK waits on the general path, which right after the rejoin may not have happened yet
            wait_for(lambda: f.node.counts.lane_runs > 0, "a run of the ship lane over all three rings",
                     timeout_s=30, alive=f.alive)
            assert f.node.stages.summary(False)["ack"]["count"] > 0  # the "ack" stage: ACKs the lane sent
    assert int(semi_sync_status(semi_sync_box)["no_tx"]) - async_before <= 2  # a commit in flight at the kill
    f.assert_all_same()


def test_over_tcp_a_frozen_replica_side_never_holds_the_quorums_acks(fanout, semi_sync_box, mysql_primary,
                                                                      mysql_replica):
    """Quorum 2 of 3 over tcp, one replica side frozen (SIGSTOP) under load: the ship lane
    asks it for answers that do not come, acknowledges on the two others' and hands the
    silent one's to its transport between calls; the primary stays semi-sync, and once the
    frozen one goes on it answers everything it was asked and all three hold the same."""
    f = fanout("tcp")
    f.start(semi_sync="received", semi_sync_quorum=2)
    wait_for(lambda: f.states() == ["streaming"] * 3, "all three in the shared stream", alive=f.alive)
    wait_for(lambda: semi_sync_status(semi_sync_box)["clients"] == "1", "the fan-out as semi-sync client")
    with BackgroundWorkload(MysqlUrl.parse(f.info["primary_admin"]), f.schema):
        wait_for(lambda: semi_sync_status(semi_sync_box)["status"] == "ON", "semi-sync ON", alive=f.alive)
        wait_shipped(f.node, alive=f.alive)
        async_before = int(semi_sync_status(semi_sync_box)["no_tx"])
        acks_before, lane_acks_before = f.node.counts.acks_sent, f.node.stages.summary(False)["ack"]["count"]
        f.procs[1].proc.send_signal(signal.SIGSTOP)
        try:
            for _ in range(30):  # two of three answer: the primary stays semi-sync
                time.sleep(0.1)
                assert semi_sync_status(semi_sync_box)["status"] == "ON"
            assert f.node.counts.acks_sent - acks_before >= 20  # acknowledged all along, not once at the end
            if not (mysql_primary or mysql_replica):  # ... by the lane itself (its "ack" stage), not handed back
                assert f.node.stages.summary(False)["ack"]["count"] - lane_acks_before >= 20
        finally:
            f.procs[1].proc.send_signal(signal.SIGCONT)
        wait_shipped(f.node, 100, alive=f.alive)
    assert int(semi_sync_status(semi_sync_box)["no_tx"]) - async_before <= 2
    wait_for(lambda: f.states() == ["streaming"] * 3, "the frozen one streaming again", timeout_s=90, alive=f.alive)
    f.assert_all_same()


def test_primary_side_restarted_with_replicas_at_three_positions(fanout):
    f = fanout()
    f.start()
    url = MysqlUrl.parse(f.info["primary_admin"])
    with BackgroundWorkload(url, f.schema):
        wait_for(lambda: f.states() == ["streaming"] * 3, "all three in the shared stream", alive=f.alive)
        wait_shipped(f.node, alive=f.alive)
        f.procs[2].stop()  # the third stops first ...
        f.procs[2] = None
        wait_shipped(f.node, alive=f.alive)
        f.stop_primary()  # ... then the primary side, with the second replica side stopped just before
        f.node = None
        f.procs[1].stop()
        wait_written(f.primary)  # the workload goes on: three positions, the first the furthest
        f.start_replica(1)
        f.start_replica(2)
        f.start_primary()
        wait_for(lambda: f.states() == ["streaming"] * 3, "all three in the shared stream again", timeout_s=90,
                 alive=f.alive)
        wait_shipped(f.node, alive=f.alive)
    f.assert_all_same()


def test_two_replica_sides_on_one_replica_server_are_refused(box, tmp_path, caplog):
    """The third replica side applies (another channel) into the first's replica server:
    the same transactions would apply there twice; it is refused, the others stream."""
    f = FanOut(box, tmp_path, "one_server")
    try:
        f.start_replica(0, process=False)
        f.start_replica(1, process=False)
        f.start_replica(2, process=False, target="replica", channel=f.channel + "_b")
        create_schema(f.primary, f.schema)
        f.start_primary()
        wait_for(lambda: f.states()[2] == "refused", "the third refused", alive=f.alive)
        assert "both apply into the replica server" in caplog.text
        with f.primary.cursor() as cur:
            cur.execute(f"CREATE TABLE {f.schema}.after (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO {f.schema}.after VALUES (1)")
        target = GtidSet.parse(primary_position(f.primary))
        wait_for(lambda: f.reached(0, target) and f.reached(1, target), "the two others streaming", alive=f.alive)
        assert f.states()[:2] == ["streaming"] * 2
    finally:
        f.close()


@pytest.fixture
def semi_sync_box(box):
    admin = connect(MysqlUrl.parse(box["primary_admin"]))
    set_semi_sync(admin, timeout=1000, enabled="ON")
    yield admin
    set_semi_sync(admin, enabled="OFF")
    admin.close()


def test_primary_side_process_killed_mid_workload_and_restarted(fanout):
    """The fan-out as a real process, killed (SIGKILL) while it feeds three replica sides
    under load, one of them stopped a moment before (three positions); started again,
    every replica side converges with nothing lost or doubled."""
    f = fanout()
    for i in range(3):
        f.start_replica(i)
    create_schema(f.primary, f.schema)
    extra = [a for port in f.ports[1:] for a in ("--replica", f"127.0.0.1:{port}")]

    def primary():
        return primary_process(f.info["primary"], f.ports[0], f.transport, f.start_gtid, f.dir,
                               extra=(*extra, "--server-id", "6200", "--backpressure-timeout", "1")).start()

    def states(proc):
        with urllib.request.urlopen(f"http://{proc.metrics_address}/status", timeout=5) as answer:
            return [m["state"] for m in json.loads(answer.read())["replicas"]]

    def all_streaming(proc):
        try:
            return states(proc) == ["streaming"] * 3
        except OSError:
            proc.check_alive()
            return False

    proc = primary()
    try:
        # bounded (about 100 txn/s): restarted, each replica side first catches up from its own
        # position on a dump of its own, and on two cores three of them in sql apply mode (a MySQL
        # primary into MariaDB) frame about 240 txn/s each, less than an unbounded writer's 270
        with BackgroundWorkload(MysqlUrl.parse(f.info["primary_admin"]), f.schema, pause_s=0.05):
            wait_for(lambda: all_streaming(proc), "all three in the shared stream", alive=f.alive)
            wait_written(f.primary, 100)
            f.procs[2].stop()
            f.procs[2] = None
            wait_written(f.primary, 100)
            assert proc.stop(signal.SIGKILL) == -signal.SIGKILL
            wait_written(f.primary, 100)
            f.start_replica(2)
            proc = primary()
            wait_for(lambda: all_streaming(proc), "all three in the shared stream again", timeout_s=90,
                     alive=f.alive)
            wait_written(f.primary, 100)
        f.assert_all_same()
    finally:
        proc.stop()
