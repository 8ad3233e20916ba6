"""Semi-sync against MariaDB's real semi-sync primary: ACK on receipt or on apply keeps
it ON; `applied` gives read-your-writes on the replica; a killed bridge degrades it to
async, and the restarted bridge records why and records the recovery."""

import time

import pytest

from bridge.errors import PreflightError
from bridge.lab.workload import connect
from tests.conftest import BridgePair
from tests.helpers import semi_sync_on, semi_sync_status, wait_for


def started(urls, mode, transport="shm", **kw):
    pair = BridgePair(urls, transport, **kw)
    pair.start_replica()
    pair.start_primary(semi_sync=mode)
    return pair


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("mode", ["received", "applied"])
def test_acks_keep_the_primary_semi_sync_and_count_every_transaction(urls, fresh_schema, semi_sync_primary, mode,
                                                                     transport, mysql_primary, mysql_replica):
    s = fresh_schema("semi")
    pair = started(urls, mode, transport)
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
        semi_sync_on(semi_sync_primary, pair, s)
        before = semi_sync_status(semi_sync_primary)
        for i in range(50):
            pair.sql(f"INSERT INTO {s}.t VALUES ({i})")
        after = semi_sync_status(semi_sync_primary)
        assert after["status"] == "ON"
        assert int(after["yes_tx"]) - int(before["yes_tx"]) >= 50
        assert after["no_tx"] == before["no_tx"]
        assert pair.primary_node.counts.acks_sent >= 50
        # the one-call paths read MariaDB's and MySQL's events in binlog apply mode; a sql apply mode
        # replica (across flavors) takes them decoded, event by event
        if mysql_primary == mysql_replica:
            assert pair.primary_node.counts.taken_whole > 0  # ACK requests noted on the one-call path too
            if mode == "received":  # the ship lane sends them itself (tcp: once the replica side answers);
                # a run is counted when it returns, at most 20 ms after its last transaction
                wait_for(lambda: pair.primary_node.counts.lane_runs > 0, "a ship lane run", 10)
        pair.assert_same(s)
        assert pair.primary_node.status()["semi_sync"]["state"] == "sync"
    finally:
        pair.stop()


def test_applied_mode_reads_its_writes_on_the_replica(urls, fresh_schema, semi_sync_primary):
    s = fresh_schema("ryw")
    pair = started(urls, "applied")
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)")
        semi_sync_on(semi_sync_primary, pair, s)
        stale = 0
        with pair.replica.cursor() as cur:
            for i in range(300):
                pair.sql(f"INSERT INTO {s}.t VALUES ({i}, {i})")  # autocommit: returns after the ACK
                cur.execute(f"SELECT v FROM {s}.t WHERE id = {i}")
                stale += cur.fetchone() is None
                pair.replica.commit()  # a fresh snapshot for the next read
        assert stale == 0
        assert semi_sync_status(semi_sync_primary)["status"] == "ON"
        pair.assert_same(s)
    finally:
        pair.stop()


def test_a_killed_bridge_degrades_to_async_and_the_restart_records_why_and_the_recovery(
        urls, fresh_schema, semi_sync_primary):
    s = fresh_schema("degrade")
    pair = started(urls, "received")
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1)")
        semi_sync_on(semi_sync_primary, pair, s)
        pair.sync()
        pair.stop_primary()  # the bridge's primary side is gone: nobody ACKs
        started_at = time.monotonic()
        pair.sql(f"INSERT INTO {s}.t VALUES (2)")  # waits the primary's 1 s timeout, then goes async
        assert time.monotonic() - started_at >= 0.9
        assert semi_sync_status(semi_sync_primary)["status"] == "OFF"
        pair.start_primary(semi_sync="received")  # the restart
        node = pair.primary_node
        wait_for(lambda: node.semi_sync.status()["degradations"]["bridge stopped"] == 1,
                 "the restarted bridge to record the degradation")
        pair.sql(f"INSERT INTO {s}.t VALUES (3)")
        semi_sync_on(semi_sync_primary, pair, s)  # ACKed commits switch the primary back ON (11.8: once caught up)
        wait_for(lambda: node.semi_sync.status()["state"] == "sync", "the recovery to be recorded")
        st = node.status()["semi_sync"]
        assert st["recoveries"] == 1 and st["last_reason"] == "bridge stopped" and st["async_total_s"] > 0
        from bridge.ops.metrics import prometheus_text
        from bridge.ops.report import status_table

        text = prometheus_text("primary", node.status())
        assert 'rdma_bridge_semi_sync_degradations_total{role="primary",reason="bridge stopped"} 1.0' in text
        assert 'rdma_bridge_semi_sync_on{role="primary"} 1.0' in text
        table = status_table({"taken_at": "now", "nodes": {"primary": node.status()}})
        assert "received mode, primary is SYNC" in table and "bridge stopped: 1" in table
        assert semi_sync_status(semi_sync_primary)["status"] == "ON"
        pair.assert_same(s)
    finally:
        pair.stop()


def test_semi_sync_mode_refused_when_the_primary_has_it_disabled(urls):
    pair = BridgePair(urls, "shm")
    try:
        pair.start_replica()
        with pytest.raises(PreflightError, match="semi-sync is disabled.*rpl_semi_sync_(master|source)_enabled"):
            pair.start_primary(semi_sync="received")
    finally:
        pair.stop()


def test_a_full_ring_stops_the_acks_and_is_recorded_as_backpressure(urls, fresh_schema, semi_sync_primary):
    """The replica cannot apply (read lock), the small ring fills: the bridge cannot
    place, so it cannot ACK; the primary goes async after its own 1 s timeout instead of
    stalling, and the bridge records the reason as backpressure. Unlocked, it catches up
    and semi-sync comes back."""
    s = fresh_schema("bp")
    pair = BridgePair(urls, "shm", ring_bytes=1 << 16)
    pair.start_replica()
    pair.start_primary(semi_sync="received", backpressure_timeout_s=0)  # wait for space as long as it takes
    lock = connect(urls["replica_admin"])
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, p VARCHAR(2000))")
        pair.sync()
        with lock.cursor() as cur:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        started = time.monotonic()
        pair.sql(*[f"INSERT INTO {s}.t VALUES ({i}, REPEAT('x', 2000))" for i in range(80)])  # > 64 KiB
        assert time.monotonic() - started < 30  # the primary was not stalled for long
        node = pair.primary_node
        wait_for(lambda: node.semi_sync.status()["degradations"]["backpressure"] >= 1, "a backpressure record")
        assert semi_sync_status(semi_sync_primary)["status"] == "OFF"
        with lock.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        pair.sql(f"INSERT INTO {s}.t VALUES (1000, 'after')")
        wait_for(lambda: node.semi_sync.status()["state"] == "sync", "semi-sync back on")
        pair.assert_same(s)
    finally:
        lock.close()
        pair.stop()
