"""Metrics with real traffic through the sandbox: counters and stage histograms move,
the Prometheus text agrees with /status, the heartbeat lag is measured, `status`
and `report` read a running pair, and no password shows anywhere."""

import json
import urllib.request

from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from bridge.cli import main
from bridge.ops.metrics import STAGE_METRICS
from bridge.ops.statusdoc import PrimaryStatus, ReplicaStatus, deviations
from tests.conftest import BridgePair
from tests.helpers import wait_for


def get(address, path):
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=5) as resp:
        return resp.read().decode()


def metric(text, name, **labels):
    """A sample, read with Prometheus' own parser (which also validates the format)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    raise AssertionError(f"{name}{labels} not in /metrics")


def test_counters_stages_and_heartbeat_lag_move_with_real_traffic(urls, fresh_schema, tmp_path):
    s = fresh_schema("metrics")
    pair = BridgePair(urls, "shm", metrics=True, heartbeat_s=0.05).start()
    try:
        pair.sql(f"CREATE DATABASE {s}", f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)",
                 *[f"INSERT INTO {s}.t VALUES ({i}, {i})" for i in range(300)],
                 f"UPDATE {s}.t SET v = v + 1 WHERE id < 100")
        pair.sync()
        wait_for(lambda: pair.replica_node.stages.summary(False)["lag"]["count"] >= 3, "heartbeat lag samples")
        # an apply lane run counts what it applied when it returns, up to 50 ms after its last commit
        wait_for(lambda: pair.replica_node.counts.transactions_applied >= 303, "the applied transactions counted")
        rep_addr, pri_addr = pair.replica_node.metrics.address, pair.primary_node.metrics.address
        rep, pri = json.loads(get(rep_addr, "/status")), json.loads(get(pri_addr, "/status"))
        # both documents keep to their typed definition (bridge.ops.statusdoc), nested parts too
        assert deviations(rep, ReplicaStatus) == set() and deviations(pri, PrimaryStatus) == set()
        assert pri["behind"] is not None and pri["heartbeat"] is not None and "last_lag_seconds" in rep["counters"]
        text = get(rep_addr, "/metrics")
        counters = rep["counters"]
        # binlog apply mode: row events are counted (the server applies their rows), at least one per statement
        assert counters["transactions_applied"] >= 303 and counters["row_events_applied"] >= 301
        assert pri["counters"]["transactions_shipped"] >= 303 and pri["heartbeat"]["written"] >= 3
        for stage in ("apply", "deliver", "bridge"):
            assert rep["stages"][stage]["count"] >= 303, stage
        assert pri["stages"]["place"]["count"] >= 303
        lag = rep["stages"]["lag"]
        assert 0 < lag["p50"] <= lag["p99"] <= lag["max"] < 10_000_000  # µs: a real, bounded lag
        assert 0 < counters["last_lag_seconds"] < 10
        # the Prometheus text says what /status says (counters only grow in between)
        applied = metric(text, "rdma_bridge_transactions_applied_total", role="replica")
        assert counters["transactions_applied"] <= applied <= counters["transactions_applied"] + 50
        assert metric(text, STAGE_METRICS["quantiles"], role="replica", stage="apply", quantile="0.99") > 0
        assert metric(text, "rdma_bridge_up", role="replica") == 1
        assert metric(text, STAGE_METRICS["count"] + "_total", role="replica", stage="apply") >= 303
        primary_text = get(pri_addr, "/metrics")
        assert metric(primary_text, "rdma_bridge_transactions_shipped_total", role="primary") >= 303
        for body in (text, primary_text, json.dumps(rep), json.dumps(pri)):
            for url in urls.values():
                assert url.password not in body  # secrets never in metrics or status

        runner = CliRunner()
        where = ["--primary-metrics", "%s:%d" % pri_addr, "--replica-metrics", "%s:%d" % rep_addr]
        out = runner.invoke(main, ["status", *where])
        assert out.exit_code == 0, out.output
        assert "replica side" in out.output and "primary side" in out.output and "lag" in out.output
        snap = runner.invoke(main, ["status", "--json", *where])
        (tmp_path / "snap.json").write_text(snap.output)
        for args in (where, ["--from", str(tmp_path / "snap.json")]):
            report = tmp_path / "report.html"
            out = runner.invoke(main, ["report", *args, "--out", str(report)])
            assert out.exit_code == 0, out.output
            page = report.read_text()
            assert page.count("<svg") >= 5 and "P99.9" in page  # place, deliver, apply, bridge, lag
    finally:
        pair.stop()


def test_status_with_no_node_running_says_so_and_fails():
    out = CliRunner().invoke(main, ["status", "--primary-metrics", "127.0.0.1:9", "--replica-metrics", "127.0.0.1:9"])
    assert out.exit_code == 1
    assert "not answering" in out.output
