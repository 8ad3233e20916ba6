"""Running it unattended: the scheduled check's service, run as its unit file says (called
directly, not waiting for the timer), against the sandbox with a bridge running: a clean
run exports zero differences; a row changed behind the bridge's back is found, recorded
in the replica's diff table and exported. The alert rules pass their promtool tests, name
only metrics the bridge exports, and Prometheus' configuration (with them) checks."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.check import textfile
from bridge.ops.metrics import METRICS, STAGE_METRICS
from bridge.server import sqlnames
from tests.conftest import BridgePair
from tests.helpers import numbers

ROOT = Path(__file__).resolve().parents[2]
CONTRIB = ROOT / "contrib"


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: `make test` installs it (Debian package prometheus)"
    return found


def test_every_alert_fires_on_its_signal_and_stays_silent_on_a_healthy_one():
    done = subprocess.run([promtool(), "test", "rules", "alerts_test.yml"], cwd=CONTRIB / "prometheus",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", (CONTRIB / "prometheus" / "alerts_test.yml").read_text()))
    defined = set(re.findall(r"- alert: (\w+)", (CONTRIB / "prometheus" / "alerts.yml").read_text()))
    assert tested == defined, defined ^ tested  # no rule without its test


def test_the_compose_prometheus_configuration_checks_with_the_rules():
    done = subprocess.run([promtool(), "check", "config", "prometheus.yml"], cwd=ROOT / "docker",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "1 rule files found" in done.stdout, done.stdout + done.stderr


def test_the_rules_ask_for_metrics_the_bridge_exports():
    """Every metric name in a rule is one /metrics writes (bridge/ops/metrics.py names each
    family in a string) or the check's textfile does."""
    source = (ROOT / "bridge" / "ops" / "metrics.py").read_text()
    exported = set(re.findall(r'"(rdma_bridge_[a-z_]+)"', source)) | {name for name, _, _ in METRICS.values()} | \
        {name for name, _, _ in textfile.FAMILIES} | {STAGE_METRICS["quantiles"]}
    asked = set(re.findall(r"rdma_bridge_[a-z_]+", (CONTRIB / "prometheus" / "alerts.yml").read_text()))
    assert asked and asked <= exported, asked - exported


def service_command(env: dict[str, str]) -> list[str]:
    """The check service's ExecStart as systemd expands it (``${VAR}`` one word, ``$VAR``
    split into words) from ``env``, the installed command replaced by this checkout's."""
    unit = (CONTRIB / "rdma-bridge-checksum.service").read_text()
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    line = re.sub(r"\$\{(\w+)\}", lambda m: shlex.quote(env[m.group(1)]), line.removeprefix("ExecStart="))
    words = shlex.split(re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), ""), line))
    assert words[0] == "/opt/rdma-bridge/venv/bin/rdma-bridge"
    return [sys.executable, "-m", "bridge", *words[1:]]


def exported(path: Path) -> dict[str, float]:
    return {s.name: s.value for family in text_string_to_metric_families(path.read_text())
            for s in family.samples}


@pytest.fixture
def pair(urls):
    p = BridgePair(urls, "shm").start()
    yield p
    p.stop()


def test_the_scheduled_check_finds_records_and_exports_a_difference(pair, urls, fresh_schema, tmp_path):
    s = fresh_schema("unattended")
    pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)",
             f"INSERT INTO {s}.t SELECT seq, seq FROM {numbers(pair.primary, s, 2000)}")
    pair.sync()
    prom = tmp_path / "rdma_bridge_checksum.prom"
    env = {"CHANNEL": pair.channel, "MAX_ROWS_PER_SECOND": "100000", "TEXTFILE": str(prom),
           "CHECK_OPTIONS": f"--schema {s}"}  # this test's schema: others' tests leave differences on purpose
    run_env = {**os.environ, **{f"RDMA_BRIDGE_CHECK_{side}": f"mysql://{u.user}:{u.password}@{u.host}:{u.port}"
                                for side, u in (("SOURCE", urls["primary_admin"]), ("TARGET", urls["replica_admin"]))}}
    clean = subprocess.run(service_command(env), env=run_env, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    first = exported(prom)
    assert first["rdma_bridge_checksum_differences"] == 0 and first["rdma_bridge_checksum_tables"] >= 1
    assert first["rdma_bridge_checksum_rows"] >= 2000 and first["rdma_bridge_checksum_last_complete_timestamp_seconds"]
    with pair.replica.cursor() as cur:  # behind the bridge's back
        cur.execute("SET SESSION sql_log_bin=0")
        cur.execute(f"UPDATE {s}.t SET v = -1 WHERE id = 1234")
    found = subprocess.run(service_command(env), env=run_env, capture_output=True, text=True, timeout=300)
    assert found.returncode == 1 and f"MISMATCH {s}.t" in found.stdout, found.stdout + found.stderr
    assert exported(prom)["rdma_bridge_checksum_differences"] >= 1
    assert exported(prom)["rdma_bridge_checksum_last_complete_timestamp_seconds"] >= \
        first["rdma_bridge_checksum_last_complete_timestamp_seconds"]
    diffs = f"rdma_bridge.{sqlnames.owned(sqlnames.CHECKSUM_DIFFS, pair.channel)}"
    with pair.replica.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {diffs} WHERE db=%s AND tbl='t'", (s,))
        assert cur.fetchone()[0] >= 1
    for secret in (urls["primary_admin"].password, urls["replica_admin"].password):  # never in its output
        assert secret not in found.stdout + found.stderr and secret not in prom.read_text()
