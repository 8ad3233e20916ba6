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
