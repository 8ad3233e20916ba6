"""Stage histograms report the percentiles of the raw samples (HDR, 3 significant digits)."""

import random

from bridge.ops.metrics import Stages, buckets


def exact_percentile(samples, p):
    import math

    ordered = sorted(samples)
    return ordered[max(0, math.ceil(len(ordered) * p / 100) - 1)]  # nearest rank


def test_reported_percentiles_match_the_raw_samples():
    rng = random.Random(5)
    samples = [int(rng.lognormvariate(6, 1.2)) + 1 for _ in range(20000)] + [250_000, 1_900_000]
    stages = Stages(["apply"])
    for v in samples:
        stages.record("apply", v)
    s = stages.summary()["apply"]
    assert s["count"] == len(samples)
    for key, p in (("p50", 50), ("p99", 99), ("p999", 99.9)):
        exact = exact_percentile(samples, p)
        assert abs(s[key] - exact) <= exact * 0.001 + 1, (key, s[key], exact)
    assert abs(s["max"] - max(samples)) <= max(samples) * 0.001


def test_buckets_are_log_spaced_and_hold_every_sample():
    stages = Stages(["lag"])
    for v in (5, 50, 500, 5000, 5000):
        stages.record("lag", v)
    bins = buckets(stages.summary()["lag"]["hdr"])
    assert sum(n for _, _, n in bins) == 5
    assert all(lo < hi for lo, hi, _ in bins)
    assert [n for _, _, n in bins] == [1, 1, 1, 2]


def test_out_of_range_values_are_clamped_not_dropped():
    stages = Stages(["place"])
    stages.record("place", -3)
    stages.record("place", 10**13)
    assert stages.summary(with_histograms=False)["place"]["count"] == 2


def test_each_stage_is_a_prometheus_histogram_whose_buckets_hold_every_sample():
    from prometheus_client.parser import text_string_to_metric_families

    from bridge.ops.metrics import prometheus_text

    stages = Stages(["apply"])
    samples = [3, 3, 40, 700, 9_000, 120_000, 30_000_000]  # µs; the last is past the 10 s bound
    for v in samples:
        stages.record("apply", v)
    families = {f.name: f for f in text_string_to_metric_families(
        prometheus_text("replica", {"stages": stages.summary()}))}
    histogram = families["rdma_bridge_stage_seconds"]
    assert histogram.type == "histogram"
    buckets = {s.labels["le"]: s.value for s in histogram.samples if s.name.endswith("_bucket")}
    assert buckets["2.5e-06"] == 0 and buckets["5e-06"] == 2  # cumulative: le is an upper bound
    assert buckets["5e-05"] == 3 and buckets["0.001"] == 4 and buckets["0.01"] == 5 and buckets["0.25"] == 6
    assert buckets["10"] == 6 and buckets["+Inf"] == len(samples)
    assert list(buckets.values()) == sorted(buckets.values())
    count = next(s.value for s in histogram.samples if s.name.endswith("_count"))
    total = next(s.value for s in histogram.samples if s.name.endswith("_sum"))
    assert count == len(samples) and abs(total - sum(samples) / 1e6) <= sum(samples) / 1e6 * 0.001


def test_the_last_minute_forgets_older_samples_the_lifetime_keeps(monkeypatch):
    import bridge.ops.metrics as metrics

    clock = [1000.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: clock[0])
    stages = Stages(["lag"])
    for _ in range(10):
        stages.record("lag", 50_000)  # a slow minute...
    stages.tick()  # the node's loop, as it goes
    clock[0] += 90  # ... then a quiet one and a half, then fast again
    for _ in range(4):
        stages.record("lag", 200)
    s = stages.summary(with_histograms=False)["lag"]
    assert s["count"] == 14 and s["p50"] >= 49_000  # since the start
    recent = s["last_minute"]
    assert recent["count"] == 4 and recent["p50"] == recent["p99"] == recent["max"] == 200
    clock[0] += 61
    assert stages.summary(with_histograms=False)["lag"]["last_minute"] == {"count": 0, "max": 0, "p50": 0,
                                                                          "p99": 0, "p999": 0}


def test_the_endpoint_names_the_build_and_the_process():
    from prometheus_client.parser import text_string_to_metric_families

    from bridge import __version__
    from bridge.ops.metrics import prometheus_text
    from bridge.wire.control import PROTOCOL_VERSION

    families = {f.name: f for f in text_string_to_metric_families(prometheus_text("primary", {}))}
    info = families["rdma_bridge_build_info"].samples[0]
    assert info.labels["version"] == __version__ and info.labels["protocol"] == str(PROTOCOL_VERSION)
    assert info.labels["compiled"]  # the compiled parts this process picked, or "none"
    assert families["process_cpu_seconds"].samples[0].value > 0
    assert families["process_resident_memory_bytes"].samples[0].value > 10_000_000
