"""Every command with bad input ends with one line naming the thing at fault (and the
fix), never a traceback; --debug shows the traceback. Waiting for a server that is not
there costs no CPU."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from bridge.lab.ports import free_port


def run(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "bridge", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "RDMA_BRIDGE_SECRET": "", **(env or {})})


def bad_urls(urls):
    good = urls["replica_admin"]
    return {"wrong password": f"mysql://{good.user}:not-the-password@{good.host}:{good.port}",
            "closed port": f"mysql://u:pw@127.0.0.1:{free_port()}",
            "malformed url": "not-a-url"}


def one_line_error(result, *needles):
    lines = [line for line in result.stderr.splitlines() if "rdma-bridge: error:" in line or line.startswith("Error")]
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr
    assert lines, result.stderr
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


@pytest.fixture
def garbage(tmp_path):
    path = tmp_path / "snapshot.json"
    path.write_text("this is not json {")
    return path


def test_every_command_with_bad_input_says_one_line(urls, garbage, tmp_path):
    for why, url in bad_urls(urls).items():
        needle = "not-a-url" if why == "malformed url" else "127.0.0.1"
        one_line_error(run("verify", "--source", url, "--target", url), needle)
        one_line_error(run("checksum", "--source", url, "--target", url, "--offline"), needle)
        one_line_error(run("start-replica", "--target", url, "--listen", "127.0.0.1:0"), needle)
        one_line_error(run("start-primary", "--source", url, "--replica", "127.0.0.1:1", "--reconnect-attempts",
                           "0"), needle)
        one_line_error(run("workload", "--source", url, "--transactions", "1"), needle)
    assert "not-the-password" not in run("verify", "--source", "mysql://u:not-the-password@127.0.0.1:1",
                                         "--target", "x").stderr
    admin = f"mysql://{urls['primary_admin'].user}:{urls['primary_admin'].password}@127.0.0.1:" \
            f"{urls['primary_admin'].port}"
    one_line_error(run("verify", "--source", admin, "--target", admin, "--schema", "no_such_schema"),
                   "schema no_such_schema is unknown")
    one_line_error(run("report", "--from", str(garbage), "--out", str(tmp_path / "r.html")), "not a status snapshot")
    busy = socket.create_server(("127.0.0.1", 0))
    try:
        port = busy.getsockname()[1]
        replica_url = f"mysql://{urls['replica'].user}:{urls['replica'].password}@127.0.0.1:{urls['replica'].port}"
        one_line_error(run("start-replica", "--target", replica_url, "--listen", f"127.0.0.1:{port}"),
                       f"listen on 127.0.0.1:{port}: the address is in use")
    finally:
        busy.close()
    one_line_error(run("start-primary", "--source", admin, "--replica", "127.0.0.1:1", "--transport", "rdma"),
                   "transport 'rdma'")
    shown = run("--debug", "report", "--from", str(garbage), "--out", str(tmp_path / "r.html"))
    assert "Traceback" in shown.stderr and "not a status snapshot" in shown.stderr.splitlines()[-1]


def test_a_user_without_select_is_an_error_not_a_difference(urls, fresh_schema):
    from bridge.lab.workload import connect

    s = fresh_schema("noselect")
    admin = connect(urls["primary_admin"])
    with admin.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute(f"CREATE DATABASE {s}")
        cur.execute(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
        cur.execute("CREATE USER IF NOT EXISTS 'cli_blind'@'127.0.0.1' IDENTIFIED BY 'pw-blind'")
        cur.execute(f"GRANT SELECT ON {s}.* TO 'cli_blind'@'127.0.0.1'")
        cur.execute(f"CREATE TABLE {s}.hidden (id INT PRIMARY KEY)")
        cur.execute(f"REVOKE SELECT ON {s}.* FROM 'cli_blind'@'127.0.0.1'")
        cur.execute(f"GRANT SELECT ON {s}.t TO 'cli_blind'@'127.0.0.1'")
    try:
        p = urls["primary_admin"]
        full = f"mysql://{p.user}:{p.password}@127.0.0.1:{p.port}"
        blind = f"mysql://cli_blind:pw-blind@127.0.0.1:{p.port}"
        line = one_line_error(run("verify", "--source", full, "--target", blind, "--schema", s))
        assert f"{s}.hidden" in line and "SELECT command denied" in line and "GRANT SELECT" in line
    finally:
        with admin.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin=0")
            cur.execute(f"DROP DATABASE {s}")
            cur.execute("DROP USER 'cli_blind'@'127.0.0.1'")
        admin.close()


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_waiting_for_an_absent_primary_costs_no_cpu_and_says_so_honestly():
    proc = subprocess.Popen([sys.executable, "-m", "bridge", "start-primary", "--source",
                             f"mysql://u:pw@127.0.0.1:{free_port()}", "--replica", "127.0.0.1:1", "--metrics", "off"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "RDMA_BRIDGE_SECRET": ""})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not any("cannot start" in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.1)  # measured from its first "cannot start", not from a guess at its start-up
    waiting_from = cpu_seconds(proc.pid)
    time.sleep(3)
    waited_cpu_s = cpu_seconds(proc.pid) - waiting_from
    proc.terminate()
    proc.wait(timeout=10)
    reader.join(timeout=10)
    err = "".join(lines)
    assert "cannot start" in err and "session lost" not in err, err
    assert waited_cpu_s < 0.6, waited_cpu_s  # the waiting sleeps (a busy wait would cost ~3 s)


@pytest.mark.parametrize("args,needles", [
    (("--replica", "127.0.0.1:7400", "--replica", "127.0.0.1:7400"), ("127.0.0.1:7400 is given twice",)),
    (("--replica", "rdma://127.0.0.1:7400", "--replica", "tcp://127.0.0.1:7400"),
     ("tcp://127.0.0.1:7400 is given twice",)),
    (("--replica", "127.0.0.1:7400", "--replica", "ib://127.0.0.1:7401"),
     ("--replica", "names the transport 'ib', not one of shm, tcp, rdma")),
    (("--replica", "127.0.0.1:7400", "--replica", "127.0.0.1:7401", "--semi-sync", "received",
      "--semi-sync-quorum", "3"), ("--semi-sync-quorum", "3 is more than the 2 --replica")),
    (("--replica", "127.0.0.1:7400", "--replica", "127.0.0.1:7401", "--semi-sync-quorum", "2"),
     ("--semi-sync-quorum", "needs --semi-sync")),
])
def test_fan_out_options_refused_before_anything_starts(args, needles):
    """Fan-out's bad input: the same replica side twice (over any transports), a transport
    that does not exist, a quorum no ACK could reach, a quorum without semi-sync; refused
    at start, nothing connected."""
    one_line_error(run("start-primary", "--source", "mysql://u:pw@127.0.0.1:1", *args), *needles)
