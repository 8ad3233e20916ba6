"""Channels that share one replica server never step on each other: two primaries (the
second in its own GTID domain) consolidated into one replica under renamed schemas, and
one primary split by filters into two channels. A checksum finds damage in its own
channel only, the other channel's checksum stays clean run after run, and a repair of
one channel fixes it while the other keeps applying. Every case ends with both
channels' tables compared row by row."""

import dataclasses
import threading

import pytest

from bridge.check.checksum import Checksummer
from bridge.check.compare import compare_databases
from bridge.check.repair import Repairer
from bridge.config import MysqlUrl
from bridge.filter import Filter
from bridge.workload import connect
from tests.conftest import BridgePair, sandbox_up
from tests.helpers import numbers


def rules(include=(), renames=()) -> str:
    return Filter.parse(include, (), renames).to_json()


def shop(conn, schema: str, customers: int = 300) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute(f"CREATE TABLE {schema}.customers (id INT PRIMARY KEY, name VARCHAR(40), credit INT)")
        cur.execute(f"CREATE TABLE {schema}.orders (id INT AUTO_INCREMENT PRIMARY KEY, customer INT, total INT)")
        cur.execute(f"INSERT INTO {schema}.customers SELECT seq, CONCAT('c', seq), seq % 97 "
                    f"FROM {numbers(conn, schema, customers)}")
        cur.execute(f"INSERT INTO {schema}.orders (customer, total) SELECT seq % {customers} + 1, seq "
                    f"FROM {numbers(conn, schema, 500)}")


class Orders:
    """New orders on a primary, one per transaction, until the ``with`` block ends (the
    channel that streams them keeps applying while the other is checked and repaired)."""

    def __init__(self, url, schema: str) -> None:
        self.conn, self.schema, self.count = connect(url), schema, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute(f"INSERT INTO {self.schema}.orders (customer, total) VALUES (1, {self.count})")
                self.count += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self.conn.close()


def damage(replica, schema: str) -> None:
    """Behind the bridge's back: a changed row, a missing row, an extra row."""
    with replica.cursor() as cur:
        cur.execute(f"UPDATE {schema}.customers SET credit = credit + 1 WHERE id = 7")
        cur.execute(f"DELETE FROM {schema}.orders WHERE id = 42")
        cur.execute(f"INSERT INTO {schema}.customers VALUES (100000, 'intruder', 0)")
    replica.commit()


def checksum(urls, pair, schemas):
    checker = Checksummer(pair.urls["primary_admin"], urls["replica_admin"], pair.channel, progress=lambda _m: None)
    try:
        return checker.run(schemas=schemas)
    finally:
        checker.close()


def repair(urls, pair):
    repairer = Repairer(pair.urls["primary_admin"], urls["replica_admin"], pair.channel, progress=lambda _m: None)
    try:
        return repairer.run()
    finally:
        repairer.close()


def mismatched(run) -> set[tuple[str, str]]:
    return {(m.db, m.tbl) for m in run.mismatches}


def same(pair, urls, primary_schema: str, channel_rules: str) -> None:
    pair.sync()
    result = compare_databases(pair.urls["primary_admin"], urls["replica_admin"], [primary_schema],
                               Filter.from_json(channel_rules))
    assert result.digests and result.ok, [(d.table, d.missing, d.extra) for d in result.diffs]


@pytest.fixture
def second_primary(sandbox):
    box, _ = sandbox
    info = sandbox_up(box, second_primary=True)
    return {"primary": MysqlUrl.parse(info["primary2"]), "primary_admin": MysqlUrl.parse(info["primary2_admin"])}


def test_two_primaries_into_one_replica_check_and_repair_their_own_rows(urls, fresh_schema, second_primary):
    s = fresh_schema("consolidated")  # the same schema name on both primaries
    a_rules, b_rules = rules([s], [f"{s}={s}_a"]), rules([s], [f"{s}={s}_b"])
    a = BridgePair(urls, "shm", channel_filter=a_rules)
    b = BridgePair({**urls, **second_primary}, "tcp", channel_filter=b_rules)
    pairs = [a, b]
    try:
        for pair in pairs:
            pair.start()
        shop(a.primary, s)
        shop(b.primary, s, customers=200)
        same(a, urls, s, a_rules)
        same(b, urls, s, b_rules)
        damage(a.replica, f"{s}_a")
        assert mismatched(checksum(urls, a, [s])) == {(s, "customers"), (s, "orders")}
        for _ in range(2):  # the other channel's checksum stays clean, run after run
            assert mismatched(checksum(urls, b, [s])) == set()
        with Orders(second_primary["primary_admin"], s) as load:  # b keeps applying meanwhile
            repaired, recheck = repair(urls, a)
        assert repaired == 2 and recheck.mismatches == [] and load.count > 0
        assert mismatched(checksum(urls, b, [s])) == set()
        same(a, urls, s, a_rules)
        same(b, urls, s, b_rules)
        assert not any(p.errors or p.replica_node.halt for p in pairs)
    finally:
        for pair in pairs:
            pair.stop()


def test_one_primary_split_into_two_channels_checks_and_repairs_each_alone(urls, fresh_schema):
    x, y = fresh_schema("split_x"), fresh_schema("split_y")
    x_rules, y_rules = rules([x]), rules([y])
    px = BridgePair(urls, "shm", channel_filter=x_rules)
    py = BridgePair(urls, "shm", channel_filter=y_rules)
    pairs = [px, py]
    try:
        for pair in pairs:
            pair.start()
        shop(px.primary, x)
        shop(px.primary, y)
        same(px, urls, x, x_rules)
        same(py, urls, y, y_rules)
        damage(px.replica, x)
        for _ in range(2):
            assert mismatched(checksum(urls, px, [x])) == {(x, "customers"), (x, "orders")}
            assert mismatched(checksum(urls, py, [y])) == set()
        with Orders(urls["primary_admin"], y) as load:  # y keeps applying while x is repaired
            repaired, recheck = repair(urls, px)
        assert repaired == 2 and recheck.mismatches == [] and load.count > 0
        same(px, urls, x, x_rules)
        same(py, urls, y, y_rules)
        assert not any(p.errors or p.replica_node.halt for p in pairs)
    finally:
        for pair in pairs:
            pair.stop()


def test_each_channel_owns_its_checksum_tables():
    from bridge import sqlnames

    assert sqlnames.owned("checksums", "t12_1796") == "checksums__t12_1796"
    odd = sqlnames.owned("checksums", "Shop-Copy")
    assert odd.startswith("checksums__h") and len(odd) <= 64 and sqlnames.owner_token(odd) == odd.split("__")[1]
    assert sqlnames.owner_token("heartbeat") is None and sqlnames.owner_token("repair_copy_3__x") == "x"
    assert dataclasses.replace(Filter(), channel_token="x").keeps("rdma_bridge", "checksums__x")
    assert not dataclasses.replace(Filter(), channel_token="x").keeps("rdma_bridge", "checksums__y")
    assert dataclasses.replace(Filter(), channel_token="x").keeps("rdma_bridge", "heartbeat")
