"""Faults on the wire, injected by a TCP proxy: on the bridge link (tcp transport:
control and data), on the binlog connection to the primary, and on the applier's
connection to the replica. Each ends in a row-by-row comparison."""

import dataclasses
import threading
import time

import pytest

from bridge.lab.workload import connect, create_schema
from tests.conftest import BridgePair
from tests.faults.proxy import FaultProxy
from tests.helpers import BackgroundWorkload, wait_for, wait_shipped


def url_via(url, proxy):
    return dataclasses.replace(url, host=proxy.address[0], port=proxy.address[1])


@pytest.fixture
def link(urls):
    """A tcp pair whose primary side reaches the replica through a fault proxy."""
    pair = BridgePair(urls, "tcp")
    pair.start_replica()
    proxy = FaultProxy(tuple(pair.replica_node.address))
    pair.start_primary(replica_addr=proxy.address)
    yield pair, proxy
    proxy.close()
    pair.stop()


def test_link_cuts_mid_workload(link, urls):
    pair, proxy = link
    create_schema(pair.primary, "cut_link")
    with BackgroundWorkload(urls["primary_admin"], "cut_link"):
        for _ in range(3):
            wait_shipped(pair.primary_node)
            proxy.cut()
    pair.assert_same("cut_link")
    assert pair.primary_node.counts.reconnects >= 3 and proxy.injected["cut"] == 3


def test_link_stall_and_delay(link, urls):
    pair, proxy = link
    create_schema(pair.primary, "stall_link")
    with BackgroundWorkload(urls["primary_admin"], "stall_link"):
        wait_shipped(pair.primary_node)
        proxy.stall(2.0)
        time.sleep(2.5)
        proxy.delay(0.002)
        time.sleep(0.5)
        proxy.delay(0)
    pair.assert_same("stall_link")


def test_corrupted_frame_is_never_applied_and_is_resent(link, fresh_schema):
    pair, proxy = link
    s = fresh_schema("corrupt")
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v LONGTEXT)")
    pair.sync()
    proxy.corrupt(after_bytes=5000)  # inside the payload of the next frame
    pair.sql(f"INSERT INTO {s}.t VALUES (1, REPEAT('abcdefgh', 4000))", f"INSERT INTO {s}.t VALUES (2, 'after')")
    pair.assert_same(s)
    assert proxy.injected["corrupt"] == 1
    assert pair.replica_node.counts.corrupt_frames == 1
    assert pair.primary_node.counts.reconnects >= 1


def test_binlog_connection_cut_and_stall(urls, caplog):
    caplog.set_level("WARNING", logger="bridge.node.primary")
    pair = BridgePair(urls, "shm")
    pair.start_replica()
    proxy = FaultProxy((urls["primary"].host, urls["primary"].port))
    pair.start_primary(source=url_via(urls["primary"], proxy))
    try:
        create_schema(pair.primary, "binlog_faults")
        with BackgroundWorkload(urls["primary_admin"], "binlog_faults"):
            wait_shipped(pair.primary_node)
            proxy.cut()
            counts = pair.primary_node.counts
            # the stall must find the stream flowing again, not the reconnect's own queries
            wait_for(lambda: counts.binlog_reopens >= 2, "the binlog stream reopened after the cut", timeout_s=30)
            shipped = counts.transactions_shipped
            wait_for(lambda: counts.transactions_shipped > shipped, "transactions shipped after the reopen",
                     timeout_s=30)
        # caught up first: a replica slower than the load (MySQL's, in sql mode) fills the ring, and
        # a primary side waiting for ring space reads nothing, so it could not notice the stall
        pair.sync()
        proxy.stall(3.0)  # past the read timeout: detected through missing heartbeats
        time.sleep(3.5)
        pair.assert_same("binlog_faults")
        assert pair.primary_node.counts.reconnects >= 2
        lost = [r.getMessage() for r in caplog.records if "session lost" in r.getMessage()]
        assert any("the server closed it" in m for m in lost), lost  # the cut
        assert any("nothing for 2s, not even a heartbeat" in m for m in lost), lost  # the stall
    finally:
        proxy.close()
        pair.stop()


@pytest.mark.parametrize("workers", [1, 4])
def test_replica_connection_cut(urls, workers):
    pair = BridgePair(urls, "shm", workers=workers)
    proxy = FaultProxy((urls["replica"].host, urls["replica"].port))
    pair.start_replica(target=url_via(urls["replica"], proxy))
    pair.start_primary()
    try:
        schema = f"apply_faults_{workers}"
        create_schema(pair.primary, schema)
        with BackgroundWorkload(urls["primary_admin"], schema):
            for n in (1, 2):  # each cut once the replica side is back from the one before
                wait_shipped(pair.primary_node)
                proxy.cut()
                wait_for(lambda: pair.replica_node.counts.reconnects >= n, f"reconnect {n}", timeout_s=30)
        pair.assert_same(schema)
        assert pair.replica_node.counts.reconnects == 2
    finally:
        proxy.close()
        pair.stop()


def test_link_cut_resends_unapplied_frames_from_the_ring(link, fresh_schema, urls):
    """The binlog stream survives a link cut: the new session gets the frames the
    replica had not applied from the local ring, without re-reading the binlog."""
    pair, proxy = link
    s = fresh_schema("resend")
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)")
    pair.sync()
    lock = connect(urls["replica_admin"])
    with lock.cursor() as cur:
        cur.execute("FLUSH TABLES WITH READ LOCK")  # frames arrive, none can be applied
    pair.sql(*[f"INSERT INTO {s}.t VALUES ({i}, {i})" for i in range(50)])
    deadline = time.monotonic() + 10
    while pair.primary_node.producer.write_seq < pair.primary_node.producer.next_seq - 1 or \
            pair.primary_node.counts.transactions_shipped < 52:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proxy.cut()
    threading.Timer(0.5, lambda: lock.cursor().execute("UNLOCK TABLES")).start()
    pair.assert_same(s)
    # the first few inserts (one group) were being applied, blocked, when the link fell;
    # everything after them came from the ring
    assert 40 <= pair.primary_node.counts.frames_resent <= 50
    assert pair.primary_node.counts.binlog_reopens == 1  # the stream was never reopened
    lock.close()
