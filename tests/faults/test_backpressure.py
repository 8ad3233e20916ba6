"""A replica that cannot apply (global read lock) while the primary keeps writing
into a small ring: the primary side waits up to the backpressure timeout, then
stops with a clear error naming the backlog, or waits as long as it takes when the
timeout is 0. Either way nothing is lost."""

import contextlib
import time

from bridge.errors import BackpressureTimeout
from bridge.lab.workload import connect
from tests.conftest import BridgePair

ROW = "x" * 3000


@contextlib.contextmanager
def stalled_replica(urls, schema, transport, timeout_s):
    """A synced pair with a 64 KiB ring whose replica is then blocked by a global
    read lock; yields (pair, unlock)."""
    pair = BridgePair(urls, transport, ring_bytes=1 << 16)
    pair.start_replica()
    pair.start_primary(backpressure_timeout_s=timeout_s)
    lock = connect(urls["replica_admin"])
    try:
        pair.sql(f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v TEXT)")
        pair.sync()
        with lock.cursor() as cur:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        yield pair, lambda: lock.cursor().execute("UNLOCK TABLES")
    finally:
        lock.close()
        pair.stop()


def fill(pair, s, count=100):
    """~300 KB of transactions: far more than the ring holds."""
    pair.sql(*[f"INSERT INTO {s}.t VALUES ({i}, '{ROW}')" for i in range(count)])


def test_backpressure_timeout_stops_with_the_backlog_named_then_resumes(urls, fresh_schema):
    s = fresh_schema("bp")
    with stalled_replica(urls, s, "tcp", timeout_s=1.0) as (pair, unlock):
        fill(pair, s)
        deadline = time.monotonic() + 20
        while not pair.errors and time.monotonic() < deadline:
            time.sleep(0.05)
        (side, error), = pair.errors
        assert side == "primary" and isinstance(error, BackpressureTimeout)
        assert "ring full for 1.0s" in str(error) and "frames" in str(error) and "replica applies slower" in str(error)
        unlock()
        pair.errors.clear()
        pair.stop_primary()
        pair.start_primary(backpressure_timeout_s=1.0)  # a restart resumes from the replica's position
        pair.assert_same(s)


def test_zero_timeout_waits_as_long_as_it_takes(urls, fresh_schema):
    s = fresh_schema("bpwait")
    with stalled_replica(urls, s, "shm", timeout_s=0) as (pair, unlock):
        fill(pair, s)
        time.sleep(2.5)  # well past any default timeout: the ring has been full a while
        assert pair.primary_node.producer.backlog_frames > 0 and not pair.errors
        unlock()
        pair.assert_same(s)
