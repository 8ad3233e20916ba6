"""A crash between a DDL and its position update: on replay the DDL has already
taken effect. The bridge marks pending_ddl_seq before running a DDL, and a replay
of that seq accepts 'already exists / already gone', so it neither fails nor
applies twice. Without the mark the same error stops applying."""

import pytest

from tests.conftest import BridgePair


def simulate_crash_after_ddl(pair, ddl, mark_pending=True):
    """The replica ran `ddl` and died before recording its position."""
    with pair.replica.cursor() as cur:
        cur.execute(ddl)
        if mark_pending:
            cur.execute("UPDATE rdma_bridge.bridge_meta SET pending_ddl_seq=applied_seq+1 WHERE channel=%s",
                        (pair.channel,))


@pytest.mark.parametrize("ddl", ["ALTER TABLE {s}.t ADD COLUMN c INT", "CREATE TABLE {s}.n (id INT)",
                                 "DROP TABLE {s}.old", "CREATE INDEX iv ON {s}.t (v)",
                                 "ALTER TABLE {s}.t DROP COLUMN v", "CREATE DATABASE {s}_extra"])
def test_replayed_ddl_after_a_crash_is_idempotent(urls, fresh_schema, ddl):
    s = fresh_schema("ddlreplay")
    pair = BridgePair(urls, "shm").start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)",
                 f"CREATE TABLE {s}.old (id INT)", f"INSERT INTO {s}.t VALUES (1, 1)")
        pair.sync()
        pair.stop_primary()  # the primary side is down while the replica "crashes"
        simulate_crash_after_ddl(pair, ddl.format(s=s))
        pair.sql(ddl.format(s=s), f"INSERT INTO {s}.t (id) VALUES (2)")
        pair.start_primary()
        pair.assert_same(s)
    finally:
        pair.stop()


def test_without_the_pending_mark_the_same_error_stops_applying(urls, fresh_schema):
    s = fresh_schema("ddlfatal")
    pair = BridgePair(urls, "shm").start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
        pair.sync()
        pair.stop_primary()
        simulate_crash_after_ddl(pair, f"ALTER TABLE {s}.t ADD COLUMN c INT", mark_pending=False)
        pair.sql(f"ALTER TABLE {s}.t ADD COLUMN c INT")
        pair.start_primary()
        with pytest.raises(AssertionError, match="Duplicate column name 'c'"):
            pair.sync(timeout_s=10)
        assert pair.replica_node.halt.code == 1060 and not pair.errors  # stopped applying, not dead
    finally:
        pair.stop()
