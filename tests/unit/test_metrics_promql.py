"""Prometheus itself computes the last minute's P99 from the stage histograms the
endpoint exports: two real scrapes a minute apart (a slow minute, then a fast one) go
into promtool (Debian's, the same PromQL engine as the server) as series, and
`histogram_quantile(0.99, rate(..._bucket[1m]))` gives the fast minute's P99 as
Prometheus interpolates it within its bucket, where the bridge's own P99 of that minute
lies, and nothing of the slow minute before it."""

import json
import random
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.ops.metrics import Stages, prometheus_text

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="promtool is missing: `make test` installs it (Debian package prometheus)")
EXPR = 'histogram_quantile(0.99, sum by (le) (rate(rdma_bridge_stage_seconds_bucket{stage="lag"}[1m])))'


def scrape(stages: Stages) -> dict[str, float]:
    """The lag stage's cumulative buckets as the endpoint exports them: le -> count."""
    families = text_string_to_metric_families(prometheus_text("replica", {"stages": stages.summary()}))
    histogram = next(f for f in families if f.name == "rdma_bridge_stage_seconds")
    return {s.labels["le"]: s.value for s in histogram.samples
            if s.name.endswith("_bucket") and s.labels["stage"] == "lag"}


def prometheus_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """PromQL's histogram_quantile over (upper bound, cumulative count), ascending:
    linear within the bucket that holds the rank."""
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, seen in buckets:
        if seen >= rank:  # the engine's own order of operations, so the floats agree to the bit
            return lower + (upper - lower) * ((rank - below) / (seen - below))
        lower, below = upper, seen
    raise AssertionError("rank past the last bucket")


def test_prometheus_computes_the_last_minutes_p99_from_the_exported_histograms(tmp_path):
    rng = random.Random(7)
    stages = Stages(["lag"])
    empty = scrape(stages)
    for _ in range(500):  # the first minute: slow, 20-80 ms
        stages.record("lag", rng.randint(20_000, 80_000))
    slow = scrape(stages)
    fast_samples = [rng.randint(100, 900) for _ in range(2000)] + [rng.randint(2_000, 4_000) for _ in range(30)]
    for v in fast_samples:  # the second minute: fast, a small tail
        stages.record("lag", v)
    fast = scrape(stages)
    series = [{"series": f'rdma_bridge_stage_seconds_bucket{{role="replica",stage="lag",le="{le}"}}',
               "values": f"{empty[le]:g} {slow[le]:g} {fast[le]:g}"} for le in empty]
    delta = sorted((float(le), (fast[le] - slow[le]) / 60.0) for le in fast)  # rate(): per second
    want = prometheus_quantile(0.99, delta)
    ours = sorted(fast_samples)[int(len(fast_samples) * 0.99) - 1] / 1e6  # the fast minute's own P99
    bucket = next((lo, hi) for lo, hi in zip([0.0] + [b for b, _ in delta], [b for b, _ in delta]) if lo < want <= hi)
    assert bucket[0] < ours <= bucket[1] and want < 0.01  # the slow minute (>= 20 ms) is out of the window
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": EXPR, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": want}]}]}]}
    (tmp_path / "p99_test.yml").write_text(json.dumps(tests))  # JSON is YAML
    done = subprocess.run(["promtool", "test", "rules", "p99_test.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    tests["tests"][0]["promql_expr_test"][0]["exp_samples"][0]["value"] = want * 1.5  # the check can fail
    (tmp_path / "p99_test.yml").write_text(json.dumps(tests))
    assert subprocess.run(["promtool", "test", "rules", "p99_test.yml"], cwd=tmp_path, capture_output=True,
                          timeout=60).returncode == 1
