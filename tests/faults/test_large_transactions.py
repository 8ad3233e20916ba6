"""Transactions far larger than the ring stream through it as CHUNK frames and are
applied in one replica transaction; a cut in the middle rolls the partial
transaction back and it is replayed whole."""

import threading
import time

import pytest

from tests.conftest import BridgePair
from tests.faults.proxy import FaultProxy
from tests.helpers import numbers

RING = 1 << 18  # 256 KiB: chunks of at most 32 KiB


def big_insert(pair, s, rows, start=0):
    pair.sql(f"INSERT INTO {s}.big SELECT seq + {start}, REPEAT(CHAR(65 + seq % 26), 1000), seq % 7 "
             f"FROM {numbers(pair.primary, s, rows - 1, 0)}")


def create(pair, s):
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.big (id INT PRIMARY KEY, pad TEXT, k INT)",
             f"CREATE TABLE {s}.small (id INT PRIMARY KEY)")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_transaction_larger_than_the_ring(urls, fresh_schema, transport):
    s = fresh_schema("large")
    pair = BridgePair(urls, transport, ring_bytes=RING).start()
    try:
        create(pair, s)
        big_insert(pair, s, 20000)  # ~20 MB of rows, 80x the ring
        pair.sql(f"INSERT INTO {s}.small VALUES (1)",
                 f"UPDATE {s}.big SET k = k + 1 WHERE id % 3 = 0",  # ~6,700 row updates, also chunked
                 f"DELETE FROM {s}.big WHERE id % 5 = 0")
        pair.assert_same(s)
    finally:
        pair.stop()


def test_cut_in_the_middle_of_a_chunked_transaction_replays_it_whole(urls, fresh_schema):
    s = fresh_schema("largecut")
    pair = BridgePair(urls, "tcp", ring_bytes=RING)
    pair.start_replica()
    proxy = FaultProxy(tuple(pair.replica_node.address))
    pair.start_primary(replica_addr=proxy.address)
    try:
        create(pair, s)
        pair.sync()
        writer = threading.Thread(target=big_insert, args=(pair, s, 30000))
        writer.start()
        deadline = time.monotonic() + 30
        while not pair.replica_node.applier.in_transaction:  # some chunks applied, not committed
            assert time.monotonic() < deadline, "never saw the chunked transaction open"
            time.sleep(0.002)
        proxy.cut()
        writer.join()
        pair.assert_same(s)
        assert pair.primary_node.counts.reconnects >= 1
    finally:
        proxy.close()
        pair.stop()


def test_100mb_transaction_through_an_8mib_ring_is_never_held_whole(sandbox):
    """Real bridge processes; while the transaction passes, each one's RSS grows by no
    more than its ring (which fills) plus a tenth of the transaction (chunks in flight)."""
    from bench.large_txn import run

    box, _ = sandbox
    result = run(rows=200_000, row_bytes=520, ring_bytes=8 << 20, transport="shm", state_dir=str(box.dir))
    assert result["identical"], result
    assert result["transaction_binlog_mb"] >= 100, result
    for side, peak in result["peak_rss_mb"].items():
        growth = peak - result["idle_rss_mb"][side]
        assert growth < result["ring_mb"] + result["transaction_binlog_mb"] / 10, (side, result)
