"""The control channel authenticates both peers with a shared secret (HMAC
challenge-response, the secret never on the wire), and a replica will not listen
beyond loopback without one."""

import dataclasses

import pytest

from bridge.config import ReplicaConfig
from bridge.errors import AuthenticationError, ConfigError, RemoteProtocolError
from bridge.node.primary import PrimaryNode
from bridge.node.replica import ReplicaNode
from tests.conftest import BridgePair

SECRET = "correct horse battery staple"


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_shared_secret_on_both_sides_replicates(urls, fresh_schema, transport):
    s = fresh_schema("auth")
    pair = BridgePair(urls, transport, secret=SECRET).start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1)")
        pair.assert_same(s)
    finally:
        pair.stop()


@pytest.mark.parametrize("primary_secret", ["wrong secret", ""])
def test_replica_refuses_a_primary_without_the_secret(urls, primary_secret):
    pair = BridgePair(urls, "tcp", secret=SECRET)
    pair.start_replica()
    try:
        node = PrimaryNode(dataclasses.replace(_primary_cfg(pair), secret=primary_secret))
        with pytest.raises(RemoteProtocolError, match="refused by peer: authenticate .*wrong or missing shared secret") \
                as err:
            node.connect()
        assert SECRET not in str(err.value) and (not primary_secret or primary_secret not in str(err.value))
        node.close()
    finally:
        pair.stop()


def test_primary_refuses_a_replica_that_cannot_prove_the_secret(urls):
    pair = BridgePair(urls, "tcp")  # the replica has no secret
    pair.start_replica()
    try:
        node = PrimaryNode(dataclasses.replace(_primary_cfg(pair), secret=SECRET))
        with pytest.raises(AuthenticationError, match="role replica"):
            node.connect()
        node.close()
    finally:
        pair.stop()


def test_no_listening_beyond_loopback_without_a_secret(urls):
    cfg = ReplicaConfig(target=urls["replica"], listen=("0.0.0.0", 0))
    with pytest.raises(ConfigError, match="beyond loopback the control channel needs a shared secret"):
        ReplicaNode(cfg)


def test_secret_is_not_in_config_reprs(urls):
    cfg = ReplicaConfig(target=urls["replica"], listen=("127.0.0.1", 0), secret=SECRET)
    assert SECRET not in repr(cfg) and urls["replica"].password not in repr(cfg)


def _primary_cfg(pair):
    from bridge.config import PrimaryConfig

    return PrimaryConfig(source=pair.urls["primary"], replica=tuple(pair.replica_node.address), transport="tcp",
                         server_id=pair.server_id, start_gtid=pair.start_gtid)


def test_passwords_from_an_option_file_replicate(urls, fresh_schema, tmp_path):
    """Both servers' passwords in a MySQL option file ([client] password=...), named by
    the URL's defaults-file option: neither argv nor the environment holds them."""
    from bridge.config import MysqlUrl

    def via_file(url, name):
        cnf = tmp_path / f"{name}.cnf"
        cnf.write_text(f"[client]\npassword={url.password}\n")
        cnf.chmod(0o600)
        parsed = MysqlUrl.parse(f"mysql://{url.user}@{url.host}:{url.port}?defaults-file={cnf}")
        assert parsed.password == "" and url.password not in str(parsed)
        return parsed

    s = fresh_schema("optfile")
    pair = BridgePair(urls, "shm")
    pair.start_replica(target=via_file(urls["replica"], "replica"))
    pair.start_primary(source=via_file(urls["primary"], "primary"))
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1)")
        pair.assert_same(s)
        # and the row-by-row comparison (verify, the demo) reads the same option files
        from bridge.check.compare import compare_databases
        result = compare_databases(via_file(urls["primary_admin"], "primary_admin"),
                                   via_file(urls["replica_admin"], "replica_admin"), [s])
        assert result.ok and [(p.rows, r.rows) for p, r in result.digests.values()] == [(1, 1)]
    finally:
        pair.stop()


def test_servers_through_their_unix_sockets_replicate(urls, sandbox, fresh_schema):
    """Both URLs naming the server's unix socket (``?socket=``, the account then
    user@localhost): no TCP option is set on such a socket (it used to fail at start)."""
    import re

    from bridge.config import MysqlUrl
    from bridge.lab.workload import connect

    box, _ = sandbox

    def via_socket(url, role):
        admin = connect(urls[f"{role}_admin"])
        with admin.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin=0")
            cur.execute(f"SHOW GRANTS FOR '{url.user}'@'127.0.0.1'")
            grants = [re.sub(r" IDENTIFIED BY PASSWORD '[^']*'", "", g[0]) for g in cur.fetchall()]
            cur.execute(f"CREATE USER IF NOT EXISTS '{url.user}'@'localhost' IDENTIFIED BY %s", (url.password,))
            for grant in grants:
                cur.execute(grant.replace("`127.0.0.1`", "`localhost`"))
        admin.close()
        return MysqlUrl.parse(f"mysql://{url.user}:{url.password}@localhost?socket={box.dir / role / 'mysqld.sock'}")

    s = fresh_schema("sockets")
    pair = BridgePair(urls, "shm")
    pair.start_replica(target=via_socket(urls["replica"], "replica"))
    pair.start_primary(source=via_socket(urls["primary"], "primary"))
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY)", f"INSERT INTO {s}.t VALUES (1)")
        pair.assert_same(s)
        assert pair.replica_node.applier.conn._sock.family.name == "AF_UNIX"
    finally:
        pair.stop()
