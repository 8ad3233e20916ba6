"""Parallel apply (--workers N): a backlog of hot-spot and uniform transactions,
DDL and a chunked large transaction goes through N replica connections; conflicting
transactions never reorder, commits stay in primary order (the replica only ever
shows a prefix), and both sides end identical row by row."""

import threading
import time

from bridge.lab.workload import connect
from tests.conftest import BridgePair
from tests.helpers import applied_seq
from tests.integration.test_grouped_apply import backlog


def held_backlog(pair, urls, write, hold_s=1.0):
    """Run ``write`` while the replica is read-locked, so its work piles up in the ring."""
    lock = connect(urls["replica_admin"])
    try:
        with lock.cursor() as cur:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(hold_s)
        with lock.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        writer.join()
    finally:
        lock.close()


def test_hot_spot_uniform_ddl_and_large_transactions_through_four_workers(urls, fresh_schema):
    s = fresh_schema("par")
    pair = BridgePair(urls, "shm", ring_bytes=1 << 20, workers=4).start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.hot (id INT PRIMARY KEY, n BIGINT, last INT)",
                 f"INSERT INTO {s}.hot VALUES (0,0,0),(1,0,0),(2,0,0)",
                 f"CREATE TABLE {s}.uni (id INT PRIMARY KEY, v INT)", f"CREATE TABLE {s}.big (id INT PRIMARY KEY, p TEXT)")
        pair.sync()
        held_backlog(pair, urls, lambda: backlog(pair, s))
        pair.assert_same(s)  # hot rows: n*2 and last=i do not commute, so a reorder shows here
        stats = pair.replica_node.applier.stats
        assert stats.parallel_windows > 0 and stats.segments > stats.parallel_windows, stats
        assert stats.conflicts > 0, stats  # the hot rows chained segments
    finally:
        pair.stop()


def test_the_replica_only_ever_shows_a_prefix_of_the_primary(urls, fresh_schema):
    """Every primary transaction appends id i to a log and changes its own unique-keyed row
    (no conflicts: the window really runs on four connections);
    snapshots read on the replica while four workers apply must hold ids 1..k with no
    gap, and the position row in the same snapshot must name exactly k transactions."""
    s = fresh_schema("prefix")
    pair = BridgePair(urls, "tcp", ring_bytes=1 << 20, workers=4).start()
    reader = connect(urls["replica_admin"])
    snapshots, stop = [], threading.Event()

    def sample():
        with reader.cursor() as cur:
            while not stop.is_set():
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute(f"SELECT COUNT(*), COALESCE(MAX(id), 0) FROM {s}.log")
                count, top = cur.fetchone()
                cur.execute("SELECT applied_seq FROM rdma_bridge.bridge_meta WHERE channel=%s", (pair.channel,))
                seq = cur.fetchone()[0]
                cur.execute("COMMIT")
                snapshots.append((count, top, seq))

    def write():
        for i in range(1, 601):
            pair.sql("BEGIN", f"INSERT INTO {s}.log VALUES ({i})",
                     f"UPDATE {s}.acct SET n = n + {i}, email = 'u{i}@x' WHERE id = {i}", "COMMIT")

    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.log (id INT PRIMARY KEY)",
                 f"CREATE TABLE {s}.acct (id INT PRIMARY KEY, n BIGINT, email VARCHAR(40) UNIQUE)",
                 f"INSERT INTO {s}.acct (id, n) VALUES " + ",".join(f"({i}, 0)" for i in range(601)))
        pair.sync()
        base_seq = applied_seq(pair.replica, pair.channel)  # the database's word, not the node's memory
        sampler = threading.Thread(target=sample)
        sampler.start()
        held_backlog(pair, urls, write)
        pair.sync()
        stop.set()
        sampler.join()
        pair.assert_same(s)
        assert pair.replica_node.applier.stats.parallel_windows > 0
        moving = [snap for snap in snapshots if 0 < snap[0] < 600]
        assert moving, "no snapshot caught the backlog being applied"
        for count, top, seq in snapshots:
            assert count == top, f"gap on the replica: {count} rows but id {top}"
            assert seq == base_seq + count, f"position seq {seq} does not name the {count} applied rows"
    finally:
        stop.set()
        reader.close()
        pair.stop()


def test_a_row_locked_on_the_replica_makes_the_window_finish_serially(urls, fresh_schema):
    """A replica client holds a row lock a worker needs past the worker's lock wait:
    that segment and the ones after it roll back and are applied again in order."""
    s = fresh_schema("fallback")
    pair = BridgePair(urls, "shm", ring_bytes=1 << 20, workers=3).start()
    holder = connect(urls["replica_admin"])
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)",
                 f"INSERT INTO {s}.t VALUES " + ",".join(f"({i}, 0)" for i in range(300)))
        pair.sync()
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT v FROM {s}.t WHERE id = 250 FOR UPDATE")  # in the last segment

        def write():
            pair.sql(*[f"UPDATE {s}.t SET v = v + {i} WHERE id = {i}" for i in range(300)])

        held_backlog(pair, urls, write)
        time.sleep(3.0)  # past LOCK_WAIT_TIMEOUT_S: the segment gave up
        holder.rollback()
        pair.assert_same(s)
        assert pair.replica_node.applier.stats.fallbacks >= 1
    finally:
        holder.close()
        pair.stop()
