"""The apply lane (bridge.apply.lane and its compiled twin _lane) on the real replica
server: the common case applied in one call per group, and everything else (an error
answer, a lost connection, a transaction that is not the common kind) handed to the
general path, which names it. Every test ends with both databases compared row by row.
Each runs with the compiled lane and with its pure-Python twin."""

import threading

import pytest

from bridge.apply import lane as apply_lane
from bridge.apply.lane import lane as twin_lane
from bridge.lab.workload import connect
from tests.conftest import BridgePair
from tests.helpers import wait_for

KINDS = ["twin"] + (["compiled"] if apply_lane.COMPILED else [])


@pytest.fixture(params=KINDS)
def lane_kind(request, monkeypatch):
    if request.param == "twin":
        monkeypatch.setattr(apply_lane, "Lane", twin_lane.Lane)
    return request.param


@pytest.fixture(params=["shm", "tcp"])
def lane_pair(request, urls, lane_kind):
    pair = BridgePair(urls, request.param, apply_mode="binlog", heartbeat_s=0.05).start()
    yield pair
    pair.stop()


def test_lane_applies_the_common_case_and_the_rest_goes_the_general_way(lane_pair, fresh_schema):
    db = fresh_schema("lane")
    lane_pair.sql(f"CREATE DATABASE {db}", f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(40), n DOUBLE)")
    for i in range(300):
        lane_pair.sql(f"INSERT INTO {db}.t VALUES ({i}, 'row {i}', {i} * 1.5)")
    lane_pair.sql("BEGIN", f"UPDATE {db}.t SET v = CONCAT(v, '!') WHERE id < 50",
                  f"DELETE FROM {db}.t WHERE id BETWEEN 100 AND 120", "COMMIT")
    lane_pair.sql(f"ALTER TABLE {db}.t ADD COLUMN w INT DEFAULT 7")  # DDL: the general path, a barrier
    for i in range(300, 400):
        lane_pair.sql(f"INSERT INTO {db}.t (id, v, n) VALUES ({i}, 'after ddl', 0)")
    lane_pair.assert_same(db)
    counts = lane_pair.replica_node.counts
    # a lane run counts what it applied when it returns (within LANE_WAIT_MS of its last commit)
    wait_for(lambda: counts.transactions_applied >= 402, "the lane's last run to count what it applied", 10)
    assert counts.lane_groups > 0, "the lane applied nothing"
    assert counts.lane_groups < counts.groups_applied + 1
    assert counts.heartbeats_applied > 0  # heartbeats ride the lane too: its lag stage is recorded
    assert lane_pair.replica_node.stages.summary(with_histograms=False)["lag"]["count"] > 0


def test_an_error_answer_stops_applying_at_the_transaction_at_fault(lane_pair, fresh_schema):
    db = fresh_schema("lane_err")
    lane_pair.sql(f"CREATE DATABASE {db}", f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(40))")
    lane_pair.sync()
    with lane_pair.replica.cursor() as cur:  # a row only the replica has: the primary's insert of it fails
        cur.execute(f"INSERT INTO {db}.t VALUES (25, 'replica only')")
    lane_pair.replica.commit()
    for i in range(50):
        lane_pair.sql(f"INSERT INTO {db}.t VALUES ({i}, 'primary {i}')")
    node = lane_pair.replica_node
    wait_for(lambda: node.halt is not None, "applying to stop", 30)
    halt = node.halt
    assert "Duplicate entry '25'" in halt.error or "1062" in str(halt.code), halt.error
    assert node.counts.lane_groups > 0
    with lane_pair.replica.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), MAX(id) FROM {db}.t WHERE v LIKE 'primary%'")
        assert cur.fetchone() == (25, 24)  # everything before the one at fault, nothing after it
        cur.execute(f"DELETE FROM {db}.t WHERE id = 25")
    lane_pair.replica.commit()
    node.resume()
    lane_pair.assert_same(db)


def test_a_lost_replica_connection_loses_and_repeats_nothing(lane_pair, fresh_schema, urls):
    db = fresh_schema("lane_lost")
    lane_pair.sql(f"CREATE DATABASE {db}", f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    lane_pair.sync()
    done, count = threading.Event(), [0]

    def load():
        conn = connect(urls["primary_admin"])
        with conn.cursor() as cur:
            while not done.is_set() and count[0] < 5000:
                count[0] += 1
                cur.execute(f"INSERT INTO {db}.t VALUES ({count[0]}, {count[0]})")
        conn.close()

    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    admin = connect(urls["replica_admin"])
    node = lane_pair.replica_node
    try:
        for _ in range(3):
            wait_for(lambda: node.counts.lane_groups > 0 and count[0] > 50, "the lane to apply", 30)
            with admin.cursor() as cur:
                cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER='rdma_apply' AND "
                            "ID <> CONNECTION_ID()")
                for (pid,) in cur.fetchall():
                    cur.execute(f"KILL CONNECTION {pid}")
            before = node.counts.reconnects
            wait_for(lambda: node.counts.reconnects > before, "a reconnect", 30)
    finally:
        done.set()
        writer.join(30)
        admin.close()
    lane_pair.assert_same(db)
    assert node.counts.reconnects > 0
