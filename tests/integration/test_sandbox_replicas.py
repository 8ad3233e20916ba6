"""`sandbox up --replicas N`: N replica servers beside the primary, each its own server
(port, server id, datadir) with the same accounts as the first, kept across `up`s, all
stopped by `down`; a count out of range is refused with the option named."""

import json
import subprocess
import sys

from bridge.config import MysqlUrl
from bridge.lab.sandbox import replicas_in
from bridge.lab.workload import connect


def cli(*args, check=True):
    done = subprocess.run([sys.executable, "-m", "bridge", "sandbox", *args], capture_output=True, text=True,
                          timeout=300)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def facts(url: str) -> tuple:
    conn = connect(MysqlUrl.parse(url))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id, @@port")
            server_id, port = cur.fetchone()
            cur.execute("SHOW GRANTS")
            grants = sorted(row[0].split(" IDENTIFIED")[0] for row in cur.fetchall())
    finally:
        conn.close()
    return server_id, port, grants


def test_three_replica_servers_with_the_same_accounts_kept_across_ups_and_all_stopped(tmp_path):
    state = str(tmp_path / "box")
    try:
        info = json.loads(cli("up", "--replicas", "3", "--json", "--state-dir", state).stdout)
        assert all(isinstance(value, str) for value in info.values())  # scripts read every value as a URL
        assert replicas_in(info) == 3 and "replica4" not in info
        urls = [info["replica"], info["replica2"], info["replica3"]]
        seen = [facts(url) for url in urls]
        assert len({server_id for server_id, _, _ in seen}) == 3
        assert [port for _, port, _ in seen] == [MysqlUrl.parse(url).port for url in urls]
        assert all(grants == seen[0][2] for _, _, grants in seen)  # the bridge's apply account, on each
        assert len({facts(info[f"{role}_admin"])[0] for role in ("replica", "replica2", "replica3")}) == 3
        again = json.loads(cli("up", "--json", "--state-dir", state).stdout)  # no --replicas: what it has stays
        assert again == info
        printed = cli("up", "--replicas", "3", "--state-dir", state).stdout
        assert "replica3" in printed and info["replica3"] in printed
        stopped = cli("down", "--state-dir", state).stdout
        assert all(role in stopped for role in ("primary", "replica", "replica2", "replica3"))
    finally:
        cli("down", "--state-dir", state, check=False)


def test_a_replica_count_out_of_range_is_refused_with_the_option_named(tmp_path):
    done = cli("up", "--replicas", "0", "--state-dir", str(tmp_path / "box"), check=False)
    assert done.returncode != 0 and "--replicas" in done.stderr
    assert not (tmp_path / "box").exists()  # refused before anything was made
