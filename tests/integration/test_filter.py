"""What a channel replicates (--include/--exclude/--rename-schema): one definition for
clone, the stream, checksum and verify. A filtered, renamed clone under writes, then
streaming with DDL on kept and left-out tables, ends equal table by table (the
left-out ones absent); the in-band checksum runs through the rename; a statement that
mixes kept and left-out tables stops applying and can be skipped; a filter given to
start-replica is recorded with the channel, and a later start may narrow it but not
widen it."""

import dataclasses
import time

import pytest

from bridge.check.checksum import Checksummer, channel_filter
from bridge.check.compare import compare_databases
from bridge.clone.run import Cloner
from bridge.errors import ChannelLocked, StartRefused
from bridge.filter import Filter
from bridge.lab.workload import MixedWorkload, create_schema
from bridge.node.replica import ReplicaNode
from tests.conftest import BridgePair
from tests.helpers import BackgroundWorkload, wait_shipped, wait_written
from tests.integration.test_types import TYPES_TABLE, type_rows


def _tables(conn, schema):
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s ORDER BY 1", (schema,))
        return [r[0] for r in cur.fetchall()]


def _drop(conn, *schemas):
    with conn.cursor() as cur:
        for s in schemas:
            cur.execute(f"DROP DATABASE IF EXISTS {s}")
    conn.commit()


@pytest.mark.parametrize("mode", ["binlog", "sql"])
def test_filtered_renamed_clone_then_stream_ends_equal(urls, fresh_schema, mode):
    s, out = fresh_schema("filt"), fresh_schema("filt_out")
    into = f"{s}_r"
    pair = BridgePair(urls, "tcp", apply_mode=mode)
    create_schema(pair.primary, s)  # accounts, ledger, items, probe
    rows = type_rows(pair.primary, pair.replica)
    pair.sql(TYPES_TABLE.format(s=s), *[f"INSERT INTO {s}.types VALUES {row}" for row in rows],
             f"CREATE VIEW {s}.rich AS SELECT id, balance FROM {s}.accounts WHERE balance > 100",
             f"CREATE FUNCTION {s}.twice(x INT) RETURNS INT DETERMINISTIC RETURN x * 2",
             f"CREATE DATABASE {out}", f"CREATE TABLE {out}.t (id INT PRIMARY KEY)", f"INSERT INTO {out}.t VALUES (1)")
    rules = Filter.parse([s], [f"{s}.ledger"], [f"{s}={into}"])
    try:
        with BackgroundWorkload(urls["primary_admin"], s):  # transfers write accounts (kept) and ledger (not)
            result = Cloner(urls["primary_admin"], urls["replica_admin"], channel=pair.channel, parallel=2,
                            rules=rules).run()
        assert set(result.per_table) == {f"{s}.{t}" for t in ("accounts", "items", "probe", "types")}
        assert _tables(pair.replica, into) == ["accounts", "items", "probe", "rich", "types"]
        assert _tables(pair.replica, s) == [] and _tables(pair.replica, out) == []
        assert channel_filter(pair.replica, pair.channel) == rules  # recorded with the channel's start
        pair.start_gtid = None
        pair.start_replica()
        pair.start_primary()
        with BackgroundWorkload(urls["primary_admin"], s, seed=11):  # its ALTERs of ledger are skipped
            pair.sql(f"CREATE TABLE {s}.added (id INT PRIMARY KEY, v INT)", f"INSERT INTO {s}.added VALUES (1, 1)",
                     f"ALTER TABLE {s}.ledger ADD COLUMN gone INT", f"ALTER TABLE {s}.types ADD COLUMN extra INT "
                     "DEFAULT 5", f"UPDATE {s}.types SET extra = 6 ORDER BY id LIMIT 2",
                     f"INSERT INTO {out}.t VALUES (2)", f"CREATE TABLE {out}.u (id INT)")
            wait_shipped(pair.primary_node, 50)
        pair.sync()
        compared = compare_databases(urls["primary_admin"], urls["replica_admin"], [s], rules)
        assert compared.ok, [(d.table, d.missing, d.extra, d.sample) for d in compared.diffs]
        assert f"{s}.added -> {into}.added" in compared.digests and f"{s}.ledger" not in \
            " ".join(compared.digests)
        assert "ledger" not in _tables(pair.replica, into) and _tables(pair.replica, out) == []
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT {into}.twice(21), COUNT(*) > 0 FROM {into}.rich")
            assert cur.fetchone() == (42, 1)
        checker = Checksummer(urls["primary_admin"], urls["replica_admin"], pair.channel)
        try:
            run = checker.run([s])  # in band: its statements reach the replica renamed
        finally:
            checker.close()
        assert run.tables == 5 and not run.mismatches
        # a statement over a kept and a left-out table cannot be followed: applying stops, skip goes on
        pair.sql(f"RENAME TABLE {s}.added TO {out}.added")
        deadline = time.monotonic() + 30
        while pair.replica_node.halt is None and time.monotonic() < deadline:
            time.sleep(0.05)
        halt = pair.replica_node.halt
        assert halt is not None and "tables this channel replicates and tables it filters out" in halt.error
        pair.replica_node.skip(halt.gtid, "test")
        pair.sql(f"INSERT INTO {s}.accounts (id, owner, balance, updated) VALUES (999999, 'after', 1, NOW())")
        pair.sync()
        with pair.replica.cursor() as cur:
            cur.execute(f"SELECT owner FROM {into}.accounts WHERE id = 999999")
            assert cur.fetchone() == ("after",)
    finally:
        _drop(pair.replica, into)
        pair.stop()


def test_filter_given_to_start_replica_is_recorded_and_may_only_narrow(urls, fresh_schema):
    s = fresh_schema("filt_start")
    rules = Filter.parse(exclude=[f"{s}.ledger", f"{s}.probe"])
    pair = BridgePair(urls, "shm", channel_filter=rules.to_json()).start()
    try:
        create_schema(pair.primary, s)  # CREATE TABLE ledger and probe are not replayed
        MixedWorkload(pair.primary, s).run(300)
        pair.sync()
        assert _tables(pair.replica, s) == ["accounts", "items"]
        compared = compare_databases(urls["primary_admin"], urls["replica_admin"], [s], rules)
        assert compared.ok and sorted(compared.digests) == [f"{s}.accounts", f"{s}.items"]
        assert pair.replica_node.status()["replicates"] == rules.describe()
        cfg, node = pair.replica_node.cfg, pair.replica_node
        pair.replica_node = None
        node.close()
        base = dataclasses.replace(cfg, listen=("127.0.0.1", 0))
        for wider in (Filter.parse(exclude=[f"{s}.ledger"]), Filter.parse(renames=[f"{s}=x"])):
            with pytest.raises(StartRefused, match="would add tables or change a rename"):
                ReplicaNode(dataclasses.replace(base, channel_filter=wider.to_json()))
        assert channel_filter(pair.replica, pair.channel) == rules  # refused starts change nothing
        narrower = Filter.parse(exclude=[f"{s}.ledger", f"{s}.probe", f"{s}.items"])
        ReplicaNode(dataclasses.replace(base, channel_filter=narrower.to_json())).close()
        assert channel_filter(pair.replica, pair.channel) == narrower
        node = ReplicaNode(dataclasses.replace(base, channel_filter=""))  # not given: the recorded one holds
        assert node.scope.rules == narrower
        node.close()
    finally:
        pair.stop()


def test_a_wider_filter_is_taken_once_clone_copied_the_tables_it_adds(urls, fresh_schema):
    s = fresh_schema("filt_add")
    narrow, wide = Filter.parse([s], [f"{s}.ledger*"]), Filter.parse([s])  # the view over ledger goes with it
    pair = BridgePair(urls, "tcp", channel_filter=narrow.to_json()).start()
    try:
        create_schema(pair.primary, s)
        pair.sql(f"CREATE VIEW {s}.ledger_sum AS SELECT account, SUM(amount) AS total FROM {s}.ledger GROUP BY 1")
        MixedWorkload(pair.primary, s).run(200)
        pair.sync()
        assert not {"ledger", "ledger_sum"} & set(_tables(pair.replica, s))
        with pytest.raises(ChannelLocked, match="applied by another replica side"):  # not while it applies
            Cloner(urls["primary_admin"], urls["replica_admin"], channel=pair.channel, rules=wide).run()
        cfg, node = pair.replica_node.cfg, pair.replica_node
        pair.replica_node = None
        node.close()
        with BackgroundWorkload(urls["primary_admin"], s, seed=5):  # the channel falls behind the copy's snapshot
            wait_written(pair.primary)
            result = Cloner(urls["primary_admin"], urls["replica_admin"], channel=pair.channel, rules=wide).run()
            wait_written(pair.primary)
        assert set(result.per_table) == {f"{s}.ledger"}
        assert channel_filter(pair.replica, pair.channel) == wide
        pair.replica_options = {}  # the recorded (wider) filter holds
        pair.start_replica(port=cfg.listen[1] or node.address[1])  # the primary side reconnects to it
        MixedWorkload(pair.primary, s, seed=9).run(100)
        pair.assert_same(s)
        assert "ledger_sum" in _tables(pair.replica, s)
    finally:
        pair.stop()
