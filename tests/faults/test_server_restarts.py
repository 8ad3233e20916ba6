"""Restarting the replica server or the primary server under a running bridge: the
bridge reconnects (bounded, counted) and resumes from the replica's recorded
position; both databases end identical."""

import threading
import time

import pytest

from bridge.workload import MixedWorkload, connect, create_schema
from tests.conftest import BridgePair


def applied_seq(conn, channel):
    with conn.cursor() as cur:
        cur.execute("SELECT applied_seq FROM rdma_bridge.bridge_meta WHERE channel=%s", (channel,))
        row = cur.fetchone()
    return row[0] if row else 0


def wait_applied(pair, at_least, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while applied_seq(pair.replica, pair.channel) < at_least:
        assert not pair.errors, pair.errors
        assert time.monotonic() < deadline, f"replica stuck below seq {at_least}"
        time.sleep(0.02)


class BackgroundWorkload:
    def __init__(self, url, schema):
        self.workload, self.stop_event = MixedWorkload(connect(url), schema), threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        while not self.stop_event.is_set():
            self.workload.run(20)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_replica_server_restart_mid_workload(sandbox, urls, transport):
    box, _ = sandbox
    pair = BridgePair(urls, transport).start()
    schema = f"replica_restart_{transport}"
    try:
        create_schema(pair.primary, schema)
        with BackgroundWorkload(urls["primary_admin"], schema):
            wait_applied(pair, 200)
            box.stop_server("replica")
            time.sleep(0.3)
            box.up()
            pair.replica = connect(urls["replica_admin"])
            wait_applied(pair, applied_seq(pair.replica, pair.channel) + 200)
        pair.assert_same(schema)
        assert pair.replica_node.target_reconnects >= 1
    finally:
        pair.stop()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_primary_server_restart_mid_stream(sandbox, urls, transport):
    box, _ = sandbox
    pair = BridgePair(urls, transport).start()
    schema = f"primary_restart_{transport}"
    try:
        create_schema(pair.primary, schema)
        with BackgroundWorkload(urls["primary_admin"], schema):
            wait_applied(pair, 200)
        box.stop_server("primary")
        time.sleep(0.3)
        box.up()
        pair.primary = connect(urls["primary_admin"])
        MixedWorkload(pair.primary, schema, seed=11).run(300)
        pair.assert_same(schema)
        assert pair.primary_node.reconnects >= 1
    finally:
        pair.stop()
