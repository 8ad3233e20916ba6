"""A failover: the primary is gone, a native replica that kept its GTIDs (the sandbox's
standby, with a binlog of its own) is promoted, and the primary side started against it
goes on from where the channel stopped: what the old primary committed while the bridge
was down comes from the new primary's binlog, then the new primary's own transactions;
nothing lost, nothing applied twice; the new primary and the replica compared row by row.
MariaDB and MySQL (the matrix runs it on each pair)."""

import pytest

from bridge.check.compare import compare_databases
from bridge.check.positions import primary_position
from bridge.config import MysqlUrl
from bridge.lab.sandbox import Sandbox
from bridge.model import GtidSet
from bridge.server.flavor import Flavor
from tests.conftest import BridgePair, sandbox_up
from tests.helpers import channel_row, connect, wait_for

S = "failover"


@pytest.fixture(scope="module")
def standby_urls(tmp_path_factory):
    box = Sandbox(tmp_path_factory.mktemp("standby"))
    try:
        yield {k: MysqlUrl.parse(v) for k, v in sandbox_up(box, standby=True).items() if v.startswith("mysql://")}
    finally:
        box.down()


def _caught_up(conn, position: GtidSet) -> bool:
    return GtidSet.parse(str(primary_position(conn))).contains_all(position)


def test_a_promoted_standby_takes_over_as_primary_and_the_channel_goes_on(standby_urls):
    urls, transport = standby_urls, "tcp"
    old, standby = connect(urls["primary_admin"]), connect(urls["standby_admin"])
    flavor = Flavor.of(standby)
    pair = BridgePair(urls, transport)
    schema = S
    try:
        pair.sql(f"CREATE DATABASE {schema}",
                 f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT NOT NULL DEFAULT 0)",
                 *(f"INSERT INTO {schema}.t (id, v) VALUES ({i}, 'old-{i}')" for i in range(1, 51)))
        pair.start()
        pair.sync()
        pair.stop_primary()  # the bridge's primary side is down when the primary fails
        pair.sql(*(f"INSERT INTO {schema}.t (id, v) VALUES ({i}, 'unshipped-{i}')" for i in range(51, 81)),
                 f"UPDATE {schema}.t SET n = n + 1 WHERE id <= 10", f"DELETE FROM {schema}.t WHERE id = 20")
        last_of_old = GtidSet.parse(str(primary_position(old)))
        wait_for(lambda: _caught_up(standby, last_of_old), "the standby to hold the old primary's transactions")
        with standby.cursor() as cur:  # the old primary is gone: promote the standby
            cur.execute(flavor.stop_replica)
            cur.execute("RESET REPLICA ALL" if flavor.is_mysql else "RESET SLAVE ALL")
            cur.execute(f"INSERT INTO {schema}.t (id, v) VALUES (100, 'new-primary')")
            cur.execute(f"UPDATE {schema}.t SET v = 'changed-after' WHERE id = 51")
            cur.execute(f"ALTER TABLE {schema}.t ADD COLUMN w INT NULL")
            cur.execute(f"INSERT INTO {schema}.t (id, v, w) VALUES (101, 'with-w', 7)")
        old.close()
        pair.primary.close()
        pair.primary = connect(urls["standby_admin"])  # sync() waits for the new primary's position
        pair.start_primary(source=urls["standby"])
        pair.sync()
        result = compare_databases(urls["standby_admin"], urls["replica_admin"], [schema])
        assert result.digests and result.ok, [(d.table, d.missing, d.extra, d.sample) for d in result.diffs]
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT COUNT(*), SUM(n), MAX(id) FROM {schema}.t")
            assert cur.fetchone() == (81, 10, 101)  # 50 + 30 - 1 + 2 rows; each UPDATE once
        _, recorded = channel_row(pair.replica, pair.channel)
        assert GtidSet.parse(recorded).contains_all(GtidSet.parse(str(primary_position(standby))))
    finally:
        standby.close()
        pair.stop()
    assert not pair.errors, pair.errors
