"""The channel's position row on a real replica: in binlog mode it travels as a row
event inside the transaction's BINLOG statement (no SQL statement for it), keeps the
columns it does not write, falls back to SQL where bridge_meta is not as the bridge
created it, and a row deleted by hand stops the applier with the statement that
puts it back."""

import time

import pytest

from bridge.model import GtidSet
from tests.conftest import BridgePair, primary_position


def _status(conn, name: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE %s", (name,))
        return int(cur.fetchone()[1])


def _row(pair):
    with pair.replica.cursor() as cur:
        cur.execute("SELECT applied_seq, gtid_set, pending_ddl_seq, UNIX_TIMESTAMP(updated_at), epoch "
                    "FROM rdma_bridge.bridge_meta WHERE channel=%s", (pair.channel,))
        return cur.fetchone()


def _workload(pair, s, n=50):
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)")
    pair.sql(*[f"INSERT INTO {s}.t VALUES ({i}, {i})" for i in range(n)])
    pair.sql(*[f"UPDATE {s}.t SET v = v + 1 WHERE id = {i}" for i in range(0, n, 2)])


def test_the_position_is_a_row_event_that_keeps_the_other_columns(urls, fresh_schema):
    pair = BridgePair(urls, "shm", apply_mode="binlog").start()
    try:
        s = fresh_schema("pos")
        pair.sql(f"CREATE DATABASE {s}_warm")  # the first transaction probes the replica
        pair.sync()
        seq, _, _, _, epoch = _row(pair)
        started = time.time()
        _workload(pair, s)
        pair.sync()
        inserts = _status(pair.replica, "Com_insert")
        pair.sql(*[f"UPDATE {s}.t SET v = v * 2 WHERE id = {i}" for i in range(20)])
        pair.assert_same(s)
        # no INSERT ... ON DUPLICATE KEY UPDATE of the position for these 20 update-only transactions
        assert _status(pair.replica, "Com_insert") == inserts
        applied_seq, gtids, pending, updated_at, epoch_after = _row(pair)
        assert pair.replica_node.applier._binlog.position_table is not None
        assert applied_seq == seq + 2 + 50 + 25 + 20 and GtidSet.parse(gtids).contains_all(
            GtidSet.parse(primary_position(pair.primary))) and pending == 0
        assert epoch_after == epoch >= 1  # a column the event does not write keeps its value
        assert started - 1 <= float(updated_at) <= time.time() + 1
    finally:
        pair.stop()
    assert not pair.errors, pair.errors


def test_a_bridge_meta_that_differs_gets_the_position_by_sql(urls, fresh_schema):
    with BridgePair(urls, "shm").replica.cursor() as cur:
        cur.execute("ALTER TABLE rdma_bridge.bridge_meta MODIFY gtid_set MEDIUMTEXT NOT NULL")
        try:
            pair = BridgePair(urls, "shm", apply_mode="binlog").start()
            try:
                s = fresh_schema("possql")
                _workload(pair, s)
                pair.assert_same(s)
                assert pair.replica_node.applier._binlog.position_table is None
                assert _row(pair)[0] == 2 + 50 + 25
            finally:
                pair.stop()
            assert not pair.errors, pair.errors
        finally:
            cur.execute("ALTER TABLE rdma_bridge.bridge_meta MODIFY gtid_set TEXT NOT NULL")


def test_a_position_row_deleted_by_hand_stops_with_the_statement_that_puts_it_back(urls, fresh_schema):
    pair = BridgePair(urls, "shm", apply_mode="binlog").start()
    try:
        s = fresh_schema("posgone")
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (0)")
        pair.sync()
        seq, gtids = _row(pair)[:2]
        with pair.replica.cursor() as cur:
            cur.execute("DELETE FROM rdma_bridge.bridge_meta WHERE channel=%s", (pair.channel,))
        pair.sql(f"INSERT INTO {s}.t VALUES (1)")
        with pytest.raises(AssertionError, match=rf"channel '{pair.channel}' in rdma_bridge.bridge_meta is gone .* "
                                                 rf"holds seq {seq}: put it back with INSERT INTO rdma_bridge"):
            pair.sync(timeout_s=10)
        message = pair.replica_node.halt.error  # applying stopped; the replica side runs on
        assert not pair.errors
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {s}.t")
            assert cur.fetchone()[0] == 1  # the transaction was rolled back
            cur.execute(message.split("put it back with ", 1)[1])  # the statement given restores the position
            cur.execute("SELECT applied_seq, gtid_set FROM rdma_bridge.bridge_meta WHERE channel=%s", (pair.channel,))
            assert cur.fetchone() == (seq, gtids)
        pair.replica.commit()
        pair.replica_node.resume()
        pair.assert_same(s)  # the transaction applied once, after the fix
    finally:
        pair.stop()
