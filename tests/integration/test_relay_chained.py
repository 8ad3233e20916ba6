"""A native replica of a bridge-fed replica (apply mode relay) stays equal: the
bridge-fed replica has a binlog of its own that keeps the primary's transactions
(log_slave_updates, as the sandbox's standby server runs), so a native replica chained
behind it, positioned by GTIDs, replicates from it as from any intermediate replica.

The sandbox's standby (a native replica of the primary) is turned into the bridge-fed
replica: its own channel from the primary removed, a relay-mode replica side pointing a
channel at itself. The sandbox's native replica is re-pointed from the primary to it."""

from __future__ import annotations

import json

import pytest

from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl
from bridge.lab.ports import free_port
from bridge.lab.procs import primary_process, replica_process, start_pair
from bridge.lab.runners import root_connection
from bridge.lab.workload import MixedWorkload, connect, create_schema
from bridge.model import GtidSet
from bridge.relay.target import RelayTarget
from bridge.server.flavor import Flavor
from tests.conftest import relay_sandbox
from tests.helpers import wait_for

CHANNEL = "bridge"


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    with relay_sandbox(tmp_path_factory, "relaychain", native_replica=True, standby=True) as own:
        yield own


def _executed(conn, flavor: Flavor) -> GtidSet:
    with conn.cursor() as cur:
        cur.execute(flavor.replica_gtid_sql)
        return GtidSet.parse(cur.fetchone()[0] or "")


def test_a_native_replica_chained_behind_the_bridge_fed_replica_stays_equal(chain, tmp_path):
    box, info = chain
    urls = {k: MysqlUrl.parse(v) for k, v in info.items() if isinstance(v, str) and v.startswith("mysql://")}
    pconn, sconn, nconn = (connect(urls[k]) for k in ("primary_admin", "standby_admin", "native_admin"))
    flavor = Flavor.of(pconn)
    state = json.loads(box.state_file.read_text())
    password = state["passwords"]["apply"]
    standby_port = urls["standby_admin"].port
    with sconn.cursor() as cur:  # the standby leaves the primary: the bridge feeds it from now on
        cur.execute(flavor.stop_replica)
        cur.execute("RESET REPLICA ALL" if flavor.is_mysql else "RESET SLAVE '' ALL")
    root = root_connection(box.server(state, "standby"))
    with root.cursor() as cur:  # the chained replica's account on its new source
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute("CREATE USER IF NOT EXISTS 'rdma_native'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute("GRANT REPLICATION SLAVE ON *.* TO 'rdma_native'@'127.0.0.1'")
    root.close()
    port = free_port()
    replica = replica_process(info["standby_admin"], port, "shm", CHANNEL, str(tmp_path),
                              extra=("--apply-mode", "relay"))
    primary = primary_process(info["primary"], port, "shm", "", str(tmp_path), extra=("--heartbeat-interval", "0"))
    alive = start_pair(replica, primary, port)
    server = RelayTarget(urls["standby_admin"], CHANNEL)
    schema = "relay_chain"
    try:
        wait_for(lambda: server.status().io_running == "Yes", "the standby's channel at the relay", 60, alive)
        with nconn.cursor() as cur:  # the native replica behind the bridge-fed one, by GTIDs
            cur.execute(flavor.stop_replica)
            statement, params = flavor.change_source(standby_port, "rdma_native", password, None)
            cur.execute(statement, params)
            cur.execute(flavor.start_replica)
        create_schema(pconn, schema)
        MixedWorkload(pconn, schema, seed=23).run(1100)  # its DDL (a column added) at transaction 997
        with pconn.cursor() as cur:
            cur.execute(flavor.gtid_position_sql)
            written = GtidSet.parse(cur.fetchone()[0])
        wait_for(lambda: _executed(nconn, flavor).contains_all(written), "the chained native replica caught up",
                 120, alive)
        for target in ("standby_admin", "native_admin"):
            result = compare_databases(urls["primary_admin"], urls[target], [schema])
            assert result.ok and result.digests, (target, [(d.table, d.missing, d.extra) for d in result.diffs])
        st = server.status()
        assert (st.io_running, st.sql_running, st.sql_errno) == ("Yes", "Yes", 0), st
    finally:
        primary.stop()
        replica.stop()
        with sconn.cursor() as cur:
            cur.execute(flavor.replica_channel("STOP", CHANNEL))
        server.close()
        for conn in (pconn, sconn, nconn):
            conn.close()
