"""The binlog stream connection dies under the reader (KILL of its dump thread on the
primary). The library would reconnect by itself and replay from its first position,
delivering transactions twice; the bridge must instead resume from the replica's
recorded position: nothing lost, nothing doubled."""

import time

import pytest

from bridge.lab.workload import create_schema
from tests.conftest import BridgePair, primary_position
from tests.helpers import BackgroundWorkload, wait_shipped


def dump_threads(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%%' "
                    "AND USER='rdma_repl'")
        return [row[0] for row in cur.fetchall()]


def wait_for_dump_thread(conn, killed, timeout=30.0):
    """The bridge's dump threads on the primary that are not killed yet, once it has
    (re)connected (a killed one may still be listed for a moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        threads = [t for t in dump_threads(conn) if t not in killed]
        if threads:
            return threads
        time.sleep(0.05)
    raise AssertionError(f"the bridge did not reopen its binlog stream within {timeout:.0f}s")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_killed_binlog_stream_resumes_without_duplicates(urls, transport):
    schema = f"streamloss_{transport}"
    pair = BridgePair(urls, transport)
    # The schema exists on both sides before the channel starts (not binlogged), so a
    # replay from an earlier position cannot hide behind a DROP/CREATE DATABASE.
    with pair.primary.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        create_schema(pair.primary, schema)
        cur.execute("SET SESSION sql_log_bin=1")
    create_schema(pair.replica, schema)
    pair.start_gtid = primary_position(pair.primary)
    pair.start()
    try:
        killed = set()
        with BackgroundWorkload(urls["primary_admin"], schema):
            for _ in range(3):
                wait_shipped(pair.primary_node)
                for thread_id in wait_for_dump_thread(pair.primary, killed):
                    with pair.primary.cursor() as cur:
                        cur.execute(f"KILL {thread_id}")
                    killed.add(thread_id)
        assert len(killed) >= 3
        result = pair.assert_same(schema)
        assert result.digests[f"{schema}.ledger"][0].rows > 0
        assert pair.primary_node.counts.reconnects >= 3
    finally:
        pair.stop()
