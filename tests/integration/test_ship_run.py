"""The primary side's one-call paths: over shm the ship lane (bridge.source.ship) loops in
one call, over tcp each step frames the common transactions the dump's buffer holds whole
straight into the ring (RingProducer.place_run) and publishes them together; everything
else (DDL, a transaction to chunk, a non-ASCII name, a full ring, the server's own events)
goes the per-transaction way, in order with them. Each test ends with both databases
compared row by row, with the compiled paths and with their pure-Python twins."""

import pytest

from bridge.ring import producer
from bridge.source import lanes, ship
from bridge.wire import hotpath, native
from tests.conftest import BridgePair
from tests.helpers import concurrent_writes, wait_for

KINDS = ["twin"] + (["compiled"] if native.COMPILED and lanes.COMPILED else [])


@pytest.fixture(params=KINDS)
def run_kind(request, monkeypatch):
    if request.param == "twin":
        monkeypatch.setattr(producer, "hot", hotpath)
        monkeypatch.setattr(lanes, "DumpReader", ship.DumpReader)
        monkeypatch.setattr(lanes, "ShipLane", ship.ShipLane)
    return request.param


@pytest.fixture(params=["shm", "tcp"])
def run_pair(request, urls, run_kind):
    # a ring of 256 kB: transactions over 64 kB go in chunks
    pair = BridgePair(urls, request.param, apply_mode="binlog", heartbeat_s=0.05, ring_bytes=1 << 18).start()
    yield pair
    pair.stop()


def test_runs_ship_the_common_case_in_order_with_everything_else(run_pair, fresh_schema, urls):
    db = fresh_schema("runs")
    run_pair.sql(f"CREATE DATABASE {db}", f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(40))",
                 f"CREATE TABLE {db}.`tablé` (id INT PRIMARY KEY, b LONGBLOB)")

    def statements(first):
        for i in range(first, first + 250):
            yield f"INSERT INTO {db}.t (id, v) VALUES ({i}, 'row {i}')"
            if i % 50 == 0:  # a non-ASCII name; every other one a transaction to chunk (3 x 30 kB)
                n = 30_000 if i % 100 else 10
                yield (f"INSERT INTO {db}.`tablé` VALUES ({i}, REPEAT('x', {n})), ({i + 1}, REPEAT('y', {n})), "
                       f"({i + 2}, REPEAT('z', {n}))")

    # DDL among them: a barrier, in order
    concurrent_writes(urls["primary_admin"], statements, lambda: run_pair.sql(f"ALTER TABLE {db}.t ADD COLUMN w INT "
                                                                              "DEFAULT 7"))
    run_pair.sql(f"UPDATE {db}.t SET w = id % 3 WHERE id % 2 = 0")
    run_pair.assert_same(db)
    counts = run_pair.primary_node.counts
    assert counts.lane_runs > 0 and counts.runs == 0, "the ship lane shipped nothing"
    assert type(run_pair.primary_node._lane) is lanes.ShipLane
    assert counts.transactions_shipped >= 1000 + 20
    assert counts.heartbeats_shipped > 0  # heartbeats ride the runs too
    applied = run_pair.replica_node.counts  # counted as each apply lane run returns, just after its commits
    wait_for(lambda: applied.transactions_applied >= 1020, "the replica side to count what it applied", 10)
