"""The commands a user runs first: the demo (the README's main job), verify, and
sandbox status, as real processes."""

import json
import subprocess
import sys

from bridge.lab.workload import connect


def bridge(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "bridge", *args], capture_output=True, text=True, timeout=timeout)


def test_demo_ends_with_a_verified_match(tmp_path):
    done = bridge("demo", "--state-dir", str(tmp_path / "demo"), "--transactions", "400", "--probes", "20")
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "verified: both databases hold the same rows" in done.stdout
        assert "lag commit→visible over 20 probes" in done.stdout
        assert "primary mysql://rdma_repl:***@127.0.0.1:" in done.stdout
        passwords = json.loads((tmp_path / "demo" / "sandbox.json").read_text())["passwords"].values()
        assert not any(pw in done.stdout + done.stderr for pw in passwords)
    finally:
        bridge("sandbox", "down", "--state-dir", str(tmp_path / "demo"))


def test_sandbox_status_and_json(sandbox):
    box, info = sandbox
    status = json.loads(bridge("sandbox", "status", "--state-dir", str(box.dir)).stdout)
    running = status["running"]  # other tests may have added a second primary or a native replica: all run
    assert running["primary"] and running["replica"] and all(running.values()), running
    up = json.loads(bridge("sandbox", "up", "--json", "--state-dir", str(box.dir)).stdout)
    assert up["primary"] == info["primary"] and up["replica"] == info["replica"]


def test_verify_reports_match_and_difference(sandbox, urls, fresh_schema):
    _, info = sandbox
    s = fresh_schema("verify")
    for key in ("primary_admin", "replica_admin"):  # the same rows on both, written directly
        with connect(urls[key]).cursor() as cur:
            cur.execute("SET SESSION sql_log_bin=0")
            cur.execute(f"CREATE DATABASE {s}")
            cur.execute(f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(5))")
            cur.execute(f"INSERT INTO {s}.t VALUES (1, 'a'), (2, 'b')")
    args = ("verify", "--source", info["primary_admin"], "--target", info["replica_admin"], "--schema", s)
    same = bridge(*args)
    assert same.returncode == 0 and "match: 1 tables identical" in same.stdout, same.stdout + same.stderr
    with connect(urls["replica_admin"]).cursor() as cur:
        cur.execute(f"UPDATE {s}.t SET v='x' WHERE id=2")
    diff = bridge(*args)
    assert diff.returncode == 1
    assert f"{s}.t: 1 rows missing on the replica, 1 extra" in diff.stderr
    assert urls["primary_admin"].password not in diff.stdout + diff.stderr
    for key, table in (("primary_admin", "mine"), ("replica_admin", "theirs")):  # a table on one side only
        with connect(urls[key]).cursor() as cur:
            cur.execute("SET SESSION sql_log_bin=0")
            cur.execute(f"CREATE TABLE {s}.{table} (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO {s}.{table} VALUES (1), (2), (3)")
    sides = bridge(*args)
    assert sides.returncode == 1
    assert f"DIFF {s}.mine" in sides.stdout and "only on the primary, 3 rows" in sides.stdout, sides.stdout
    assert f"{s}.theirs: only on the replica (3 rows)" in sides.stderr and "rows 1 /" not in sides.stdout


def test_workload_writes_paced_mixed_transactions(sandbox, urls, fresh_schema):
    import os
    import time

    _, info = sandbox
    s = fresh_schema("wl")
    env = {**os.environ, "RDMA_BRIDGE_WORKLOAD": info["primary_admin"]}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "bridge", "workload", "--schema", s, "--transactions", "60",
                           "--rate", "100"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started >= 0.5  # paced: 60 transactions at 100/s
    assert "workload: 60/60 transactions" in done.stderr
    assert urls["primary_admin"].password not in done.stdout + done.stderr
    with connect(urls["primary_admin"]).cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {s}.accounts")
        assert cur.fetchone()[0] > 0
