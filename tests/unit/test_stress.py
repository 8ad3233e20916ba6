"""The acceptance run's load mix and report (the run itself is `make stress`)."""

import re

from bench.stress import lag_chart, render_html, statement


def test_the_mix_is_half_inserts_and_touches_only_rows_it_inserted_earlier():
    kinds = {"INSERT INTO stress.orders": 0, "UPDATE stress.orders": 0, "DELETE FROM": 0, "BEGIN;": 0}
    for n in range(6000, 8000):
        s = statement(n)
        kind = next(k for k in kinds if s.startswith(k))
        kinds[kind] += 1
        if kind in ("UPDATE stress.orders", "DELETE FROM"):
            ids = re.search(r"id IN \(([\d, ]+)\)|id = (\d+)", s)
            assert all(int(i) < n and int(i) % 10 < 5 for i in (ids.group(1) or ids.group(2)).split(",")), s
    assert kinds == {"INSERT INTO stress.orders": 1000, "UPDATE stress.orders": 400, "DELETE FROM": 200,
                     "BEGIN;": 400}


def _minute(i, bridge, native):
    lag = {"native": {"p50": native, "p99": native * 3, "p999": native * 5, "max": native * 9}}
    if bridge:
        lag["bridge"] = {"p50": bridge, "p99": bridge * 2, "p999": bridge * 4, "max": bridge * 8}
    return {"minute": i, "phase": "bridge" if bridge else "native", "lag_us": lag}


def test_the_report_draws_each_side_per_minute_and_says_which_criteria_are_met():
    minutes = [_minute(1, 500, 900), _minute(2, 600, 1200), _minute(3, None, 800)]
    chart = lag_chart(minutes)
    lines = re.findall(r"<polyline [^>]*points='([^']+)'", chart)
    assert [len(p.split()) for p in lines] == [2, 2, 2, 3, 3, 3]  # bridge p50/p99/max, native p50/p99/max
    result = {"started_at": "2026-12-01T10:00:00+00:00", "bridge_minutes": 2, "native_minutes": 1,
              "semi_sync": "received", "ack_timeout_ms": 10, "rate_offered": 2000, "rate_achieved": 1990,
              "criteria": {"zero reconnects on the bridge": {"met": True, "value": 0},
                           "P999 lag at least 10x below native's": {"met": False, "value": {"ratio": 2.1}}},
              "minutes": minutes}
    page = render_html(result)
    assert "<td class='ok'>met</td>" in page and "<td class='no'>NOT met</td>" in page
