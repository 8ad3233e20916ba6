"""A replica that cannot apply (global read lock) while the primary keeps writing
into a small ring: the primary side waits up to the backpressure timeout, then
stops with a clear error naming the backlog, or waits as long as it takes when the
timeout is 0. Either way nothing is lost."""

import threading
import time

from bridge.errors import BackpressureTimeout
from bridge.workload import connect
from tests.conftest import BridgePair

ROW = "x" * 3000


def fill(pair, s, start, count):
    pair.sql(*[f"INSERT INTO {s}.t VALUES ({i}, '{ROW}')" for i in range(start, start + count)])


def test_backpressure_timeout_stops_with_the_backlog_named_then_resumes(urls, fresh_schema):
    s = fresh_schema("bp")
    pair = BridgePair(urls, "tcp", ring_bytes=1 << 16)
    pair.start_replica()
    pair.start_primary(backpressure_timeout_s=1.0)
    lock = connect(urls["replica_admin"])
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v TEXT)")
        pair.sync()
        with lock.cursor() as cur:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        fill(pair, s, 0, 100)  # ~300 KB into a 64 KiB ring
        deadline = time.monotonic() + 20
        while not pair.errors and time.monotonic() < deadline:
            time.sleep(0.05)
        (side, error), = pair.errors
        assert side == "primary" and isinstance(error, BackpressureTimeout)
        assert "ring full for 1.0s" in str(error) and "frames" in str(error) and "replica applies slower" in str(error)
        with lock.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        pair.errors.clear()
        pair.primary_node.close()
        pair.start_primary(backpressure_timeout_s=1.0)  # a restart resumes from the replica's position
        pair.assert_same(s)
    finally:
        lock.close()
        pair.stop()


def test_zero_timeout_waits_as_long_as_it_takes(urls, fresh_schema):
    s = fresh_schema("bpwait")
    pair = BridgePair(urls, "shm", ring_bytes=1 << 16)
    pair.start_replica()
    pair.start_primary(backpressure_timeout_s=0)
    lock = connect(urls["replica_admin"])
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v TEXT)")
        pair.sync()
        with lock.cursor() as cur:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        writer = threading.Thread(target=fill, args=(pair, s, 0, 100))
        writer.start()
        writer.join()
        time.sleep(2.5)  # well past any default timeout: the ring has been full a while
        assert pair.primary_node.producer.backlog_frames > 0 and not pair.errors
        with lock.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        pair.assert_same(s)
    finally:
        lock.close()
        pair.stop()
