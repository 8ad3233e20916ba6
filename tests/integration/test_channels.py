"""Channels that share one replica server never step on each other: two primaries (the
second in its own GTID domain) consolidated into one replica under renamed schemas, a
primary started outside the sandbox (its own domain and server id, latin1 defaults,
log_slave_updates, its root account) as a second whole channel, and one primary split by
filters into two channels. A checksum finds damage in its own channel only, the other
channel's checksum stays clean run after run, and a repair of one channel fixes it
while the other keeps applying. Every case ends with both channels' tables compared row
by row."""

import dataclasses
import os
import signal
import threading
import time

import pymysql
import pytest

from bridge.check.checksum import Checksummer
from bridge.check.compare import compare_databases
from bridge.check.repair import MARKER_COLLATION, REPAIRS_DDL, Repairer
from bridge.config import MysqlUrl
from bridge.filter import Filter
from bridge.lab.images import server_kind
from bridge.lab.mycnf import server_cnf
from bridge.lab.ports import free_port
from bridge.lab.runners import servers_for
from bridge.lab.workload import connect, create_schema
from bridge.server import sqlnames
from tests.conftest import BridgePair, sandbox_up, server_flavors
from tests.helpers import BackgroundWorkload, numbers, wait_shipped


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


# A primary as a user starts one by hand: defaults the sandbox does not set (latin1 is
# MariaDB's compiled default), its own GTID domain and server id, log_slave_updates.
OUTSIDE_CNF = {"mariadb": "server_id=4301\ngtid_domain_id=2\nlog_slave_updates=ON\ncharacter_set_server=latin1\n"
                          "collation_server=latin1_swedish_ci\n",
               "mysql": "server_id=4301\nlog_replica_updates=ON\ncharacter_set_server=latin1\n"
                        "collation_server=latin1_swedish_ci\n"}


@pytest.fixture
def outside_primary(tmp_path_factory):
    """A primary of the suite's primary flavor, started apart from the sandbox, reached as
    root over TCP with a password."""
    flavor = server_flavors()[0] or "local"
    kind, home = server_kind(flavor), tmp_path_factory.mktemp("outside")
    servers, port = servers_for(flavor, home), free_port()
    (home / "tmp").mkdir()
    cnf = home / "my.cnf"
    cnf.write_text(server_cnf(kind, "primary2", str(home), port, local=flavor == "local", tls_dir=None)
                   + OUTSIDE_CNF[kind])
    subprocess_run(servers.install_command(cnf))
    servers.start("outside", cnf)
    root = _wait_root(home / "mysqld.sock")
    with root.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY 'outside-root'")
        cur.execute("ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY 'outside-root'")
        cur.execute("GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
    root.close()
    tls = "?ssl-mode=DISABLED" if flavor != "local" else ""  # a server in a container offers TLS
    url = MysqlUrl.parse(f"mysql://root:outside-root@127.0.0.1:{port}{tls}")
    yield {"primary": url, "primary_admin": url}
    os.kill(int((home / "mysqld.pid").read_text()), signal.SIGTERM)


def subprocess_run(command: list[str]) -> None:
    import subprocess

    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-800:]


def _wait_root(socket_path) -> pymysql.Connection:
    deadline = time.monotonic() + 60
    while True:
        try:
            return pymysql.connect(unix_socket=str(socket_path), user="root", autocommit=True)
        except pymysql.MySQLError:
            assert time.monotonic() < deadline, f"the outside primary did not start ({socket_path})"
            time.sleep(0.1)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_a_repair_on_the_channel_of_a_primary_started_outside_the_sandbox(urls, fresh_schema, outside_primary,
                                                                          transport):
    """Two whole channels (no filter, binlog apply where the flavors allow): the sandbox's
    primary with a writer running throughout, and a primary of other defaults; a row of
    the second's damaged on the replica is found and repaired by that channel alone (its
    rdma_bridge tables are made in latin1 there, utf8mb4 on the replica: the repair's marker
    once did not fit), and both channels end equal, row by row."""
    a_schema, b_schema = fresh_schema("whole_a"), fresh_schema("whole_b")
    a = BridgePair(urls, transport)
    b = BridgePair({**urls, **outside_primary}, transport)
    pairs = [a, b]
    try:
        for pair in pairs:
            pair.start()
        create_schema(a.primary, a_schema)
        shop(b.primary, b_schema)
        if transport == "tcp":  # the marker table as an older version made it: the database's default (latin1)
            markers = f"rdma_bridge.{sqlnames.owned(sqlnames.REPAIR_MARKERS, b.channel)}"
            b.sql("CREATE DATABASE IF NOT EXISTS rdma_bridge",
                  REPAIRS_DDL.format(table=markers).replace(f"DEFAULT CHARSET=utf8mb4 COLLATE={MARKER_COLLATION}", ""))
        same(b, urls, b_schema, rules())
        with BackgroundWorkload(urls["primary_admin"], a_schema):  # channel a applies all along
            damage(b.replica, b_schema)
            assert mismatched(checksum(urls, b, [b_schema])) == {(b_schema, "customers"), (b_schema, "orders")}
            assert mismatched(checksum(urls, a, [a_schema])) == set()
            repaired, recheck = repair(urls, b)
            assert repaired == 2 and recheck.mismatches == []
            wait_shipped(a.primary_node, 20)
        same(a, urls, a_schema, rules())
        same(b, urls, b_schema, rules())
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
    from bridge.server import sqlnames

    assert sqlnames.owned("checksums", "t12_1796") == "checksums__t12_1796"
    odd = sqlnames.owned("checksums", "Shop-Copy")
    assert odd.startswith("checksums__h") and len(odd) <= 64 and sqlnames.owner_token(odd) == odd.split("__")[1]
    assert sqlnames.owner_token("heartbeat") is None and sqlnames.owner_token("repair_copy_3__x") == "x"
    assert dataclasses.replace(Filter(), channel_token="x").keeps("rdma_bridge", "checksums__x")
    assert not dataclasses.replace(Filter(), channel_token="x").keeps("rdma_bridge", "checksums__y")
    assert dataclasses.replace(Filter(), channel_token="x").keeps("rdma_bridge", "heartbeat")
