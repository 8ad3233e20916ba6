"""One writer per ring, and refused starts change nothing.

Two primary sides against one replica side while a workload runs: without
--take-over the second is refused naming the first, which goes on; with it the first
is fenced (told, cut off from the ring) and the second goes on. Either way both
databases end equal row by row: no frame of a fenced session is ever applied.
"""

import time

import pytest

from bridge.config import ReplicaConfig
from bridge.errors import ChannelBusy, ChannelLocked, ConfigError, Fenced, PreflightError, StartRefused
from bridge.lab.workload import connect, create_schema
from bridge.node.primary import PrimaryNode
from bridge.node.replica import ReplicaNode
from tests.conftest import BridgePair
from tests.helpers import BackgroundWorkload, wait_for, wait_shipped


def second_primary(pair, **overrides) -> PrimaryNode:
    """Another primary side (another process, as far as the replica side can tell)."""
    from bridge.config import PrimaryConfig

    cfg = PrimaryConfig(source=pair.urls["primary"], replica=tuple(pair.replica_node.address),
                        transport=pair.transport, start_gtid=pair.start_gtid, heartbeat_s=0.1,
                        server_id=pair.server_id + 500, **overrides)
    return PrimaryNode(cfg)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_second_primary_side_is_refused_naming_the_running_one(urls, fresh_schema, transport):
    s = fresh_schema("fence")
    pair = BridgePair(urls, transport).start()
    try:
        create_schema(pair.primary, s)
        with BackgroundWorkload(urls["primary_admin"], s):
            wait_shipped(pair.primary_node)
            other = second_primary(pair)
            with pytest.raises(ChannelBusy, match=rf"fed by the primary side pid \d+ on .*server id "
                                                 rf"{pair.server_id}.*--take-over"):
                other.connect()
            other.close()
            wait_shipped(pair.primary_node)  # the running one goes on
        pair.assert_same(s)
        assert not pair.errors and pair.primary_node.counts.reconnects == 0  # the running one never noticed
    finally:
        pair.stop()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_take_over_fences_the_running_primary_side(urls, fresh_schema, transport):
    take_over(urls, fresh_schema("takeover"), transport)


def take_over(urls, s, transport):
    """A second primary side with --take-over while the first ships a workload (also run
    over rdma by tests/rdma)."""
    pair = BridgePair(urls, transport).start()
    epochs = []
    try:
        create_schema(pair.primary, s)
        with BackgroundWorkload(urls["primary_admin"], s):
            wait_shipped(pair.primary_node)
            epochs.append(pair.replica_node.consumer.epoch)
            newcomer = second_primary(pair, take_over=True)
            newcomer.connect()
            pair._thread(newcomer.run, "newcomer")
            wait_for(lambda: pair.errors, "the fenced primary side to stop")
            epochs.append(pair.replica_node.consumer.epoch)
            wait_shipped(newcomer)
        (side, error), = pair.errors
        assert side == "primary" and isinstance(error, Fenced) and "took channel" in str(error)
        pair.errors.clear()
        pair.stop_primary()
        pair.primary_node = newcomer  # stopped with the pair
        pair.assert_same(s)
        assert epochs[1] > epochs[0]
    finally:
        pair.stop()


def test_a_second_replica_side_on_one_channel_or_one_port_is_refused(urls):
    pair = BridgePair(urls, "shm")
    address = pair.start_replica()
    try:
        with pytest.raises(ChannelLocked, match=f"channel '{pair.channel}' on replica .* is applied by another "
                                                 "replica side"):
            ReplicaNode(ReplicaConfig(target=urls["replica"], listen=("127.0.0.1", 0), channel=pair.channel))
        with pytest.raises(ConfigError, match=f"listen on 127.0.0.1:{address[1]}: the address is in use"):
            ReplicaNode(ReplicaConfig(target=urls["replica"], listen=address, channel="other"))
    finally:
        pair.stop()


def test_a_new_channel_does_not_replay_the_binlog_into_another_channels_data(urls):
    first = BridgePair(urls, "shm").start()
    first.sync()
    first.stop()
    pair = BridgePair(urls, "shm")
    pair.start_gtid = None  # not given: from the start of the binlog, into a replica that holds `first`'s data
    pair.start_replica()
    try:
        with pytest.raises(StartRefused, match=r"would replay the primary's binlog from its start.*--start-gtid"):
            pair.start_primary()
        with pair.replica.cursor() as cur:
            assert cur.execute("SELECT 1 FROM rdma_bridge.bridge_meta WHERE channel=%s", (pair.channel,)) == 0
    finally:
        pair.stop()


def test_a_refused_start_writes_nothing_anywhere(urls):
    """start-primary pointed at the replica (no binlog there) is refused by its preflight
    before it writes its heartbeat row: nothing lands on that server."""
    pair = BridgePair(urls, "shm", heartbeat_s=0.05)
    pair.start_replica()
    admin = connect(urls["replica_admin"])
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM rdma_bridge.heartbeat")
            before = cur.fetchone()[0]
        wrong = urls["replica_admin"]
        with pytest.raises(PreflightError, match="log_bin is OFF"):
            pair.start_primary(source=wrong)
        time.sleep(0.3)
        with admin.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM rdma_bridge.heartbeat")
            assert cur.fetchone()[0] == before
    finally:
        admin.close()
        pair.stop()
