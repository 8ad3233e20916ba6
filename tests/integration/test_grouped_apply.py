"""Grouped apply: a backlog of small transactions is applied as groups (one replica
transaction each) in source order; hot-spot updates, uniform inserts, DDL and a
chunked large transaction in the same backlog; both sides compared row by row."""

import threading

import pytest

from bridge.lab.workload import connect
from tests.conftest import BridgePair
from tests.helpers import numbers, wait_for


def backlog(pair, s):
    pair.sql(*[f"UPDATE {s}.hot SET n = n + 1, last = {i} WHERE id = {i % 3}" for i in range(300)])  # hot spot
    pair.sql(*[f"INSERT INTO {s}.uni VALUES ({i}, {i * 7 % 101})" for i in range(300)])  # uniform
    pair.sql(f"ALTER TABLE {s}.uni ADD COLUMN extra INT DEFAULT 5")  # a barrier in the middle
    pair.sql(*[f"UPDATE {s}.uni SET extra = {i} WHERE id = {i}" for i in range(0, 300, 3)])
    pair.sql(f"INSERT INTO {s}.big SELECT seq, REPEAT('x', 500) FROM {numbers(pair.primary, s, 3999, 0)}")  # chunked
    pair.sql(*[f"DELETE FROM {s}.uni WHERE id = {i}" for i in range(0, 300, 10)],
             *[f"UPDATE {s}.hot SET n = n * 2 WHERE id = {i % 3}" for i in range(30)])


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_backlog_applies_in_groups_and_in_order(urls, fresh_schema, transport):
    s = fresh_schema("groups")
    pair = BridgePair(urls, transport, ring_bytes=1 << 20).start()
    lock = connect(urls["replica_admin"])
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.hot (id INT PRIMARY KEY, n BIGINT, last INT)",
                 f"INSERT INTO {s}.hot VALUES (0,0,0),(1,0,0),(2,0,0)",
                 f"CREATE TABLE {s}.uni (id INT PRIMARY KEY, v INT)", f"CREATE TABLE {s}.big (id INT PRIMARY KEY, p TEXT)")
        pair.sync()
        with lock.cursor() as cur:
            cur.execute("FLUSH TABLES WITH READ LOCK")  # the backlog piles up in the ring
        writer = threading.Thread(target=backlog, args=(pair, s))
        writer.start()
        wait_for(lambda: pair.primary_node.counts.transactions_shipped >= 300, "a backlog in the ring")
        with lock.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        writer.join()
        pair.assert_same(s)
        assert pair.replica_node.counts.largest_group > 10, pair.replica_node.counts.largest_group
    finally:
        lock.close()
        pair.stop()
