"""Restarting the replica server or the primary server under a running bridge: the
bridge reconnects (bounded, counted) and resumes from the replica's recorded
position; both databases end identical."""

import time

import pytest

from bridge.lab.workload import MixedWorkload, connect, create_schema
from tests.conftest import BridgePair
from tests.helpers import BackgroundWorkload, applied_seq, wait_for


def wait_applied(pair, at_least):
    def reached():
        assert not pair.errors, pair.errors
        return applied_seq(pair.replica, pair.channel) >= at_least
    wait_for(reached, f"the replica to apply seq {at_least}")


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
        assert pair.replica_node.counts.reconnects >= 1
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
        assert pair.primary_node.counts.reconnects >= 1
    finally:
        pair.stop()
