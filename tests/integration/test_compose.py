"""The compose demo: its files are generated from the sandbox's settings (so both run
MariaDB the same way) and `docker-compose config` accepts them, MariaDB, the MySQL 8.4
variant and the images built here (`make test-compose` runs that one for real, with
podman)."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_compose_files_are_generated_from_the_sandbox_settings():
    out = subprocess.run([sys.executable, str(DOCKER / "generate.py"), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_compose_server_flags_are_the_sandbox_settings():
    from bridge.lab.mycnf import PRIMARY_CNF

    text = (DOCKER / "docker-compose.yml").read_text()
    for line in PRIMARY_CNF.strip().splitlines():
        key, _, value = line.partition("=")
        assert f'"--{key.replace("_", "-")}={value}"' in text, line


@pytest.mark.parametrize("files", [["docker-compose.yml"], ["docker-compose.yml", "docker-compose.mysql.yml"],
                                   ["docker-compose.yml", "docker-compose.local.yml"]])
def test_docker_compose_config_accepts_the_files(files, tmp_path):
    compose = shutil.which("docker-compose")
    assert compose, "docker-compose is missing: `make deps` installs it (Debian package docker-compose)"
    args = [compose, "--project-directory", str(DOCKER)]
    for f in files:
        args += ["-f", str(DOCKER / f)]
    out = subprocess.run([*args, "config"], capture_output=True, text=True, cwd=DOCKER,
                         env={"PATH": "/usr/bin:/bin", "REPL_PASSWORD": "s3cret-repl"})
    assert out.returncode == 0, out.stderr
    assert "bridge-primary" in out.stdout and "prometheus" in out.stdout and "grafana" in out.stdout
    assert "s3cret-repl" in out.stdout  # passwords come from the environment, not from the files
    assert "s3cret-repl" not in "".join((DOCKER / f).read_text() for f in files)


def test_the_dashboard_asks_for_metrics_the_bridge_exports():
    from bridge.check import textfile
    from bridge.ops.metrics import METRICS, STAGE_METRICS

    known = {name for name, _, _ in METRICS.values()} | {STAGE_METRICS["quantiles"], "rdma_bridge_up",
                                                          "rdma_bridge_semi_sync_on",
                                                          "rdma_bridge_semi_sync_degradations_total",
                                                          "rdma_bridge_semi_sync_async_streak_seconds",
                                                          "rdma_bridge_replica_state",  # fan-out (bridge.ops.metrics)
                                                          "rdma_bridge_replica_ring_backlog_frames",
                                                          "rdma_bridge_replica_behind_seconds",
                                                          "rdma_bridge_replica_queued_bytes",
                                                          "rdma_bridge_primary_transactions_total",
                                                          *(f"{STAGE_METRICS['histogram']}_{part}"
                                                            for part in ("bucket", "sum", "count")),
                                                          *(name for name, _, _ in textfile.FAMILIES)}
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "rdma-bridge.json").read_text())
    import re

    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"rdma_bridge_[a-z_]+", target["expr"]):
                assert name in known, (panel["title"], name)


def test_the_compose_demo_names_a_taken_port_and_how_to_choose_another():
    """`make compose-demo` with its Prometheus port taken: one line naming the port and the
    variable that moves it, before anything is built or started."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, str(DOCKER / "compose_demo.py"), "up"], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PROMETHEUS_PORT": str(port)})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"compose-demo: error: 127.0.0.1:{port} is taken (another program, or a demo " \
                                  "still up: `make compose-down`); choose another with PROMETHEUS_PORT=PORT make " \
                                  "compose-demo"
