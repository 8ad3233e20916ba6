"""How far behind, from the primary's binlog position and the primary side's own
(bridge.source.behind, the pure part)."""

from bridge.model import GtidSet
from bridge.source.behind import Primary, Rate, Reading, figures, total_seq, unread_bytes, unread_transactions

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_unread_transactions_count_the_domain_of_the_last_one_read():
    assert unread_transactions(GtidSet.parse("0-1-120,1-1-7"), "0-1-100") == 20
    assert unread_transactions(GtidSet.parse("0-1-100"), "0-1-100") == 0
    assert unread_transactions(GtidSet.parse(f"{UUID}:1-50"), f"{UUID}:45") == 5
    assert unread_transactions(GtidSet.parse("0-1-5"), "") == 0


def test_unread_bytes_span_binlog_files():
    reading = Reading("0-1-1", "binlog.000002", 1000, 0, 0, 0)
    same = Primary(GtidSet(), "binlog.000002", 5000, {})
    assert unread_bytes(same, reading) == 4000
    later = Primary(GtidSet(), "binlog.000004", 300, {"binlog.000001": 9, "binlog.000002": 8000,
                                                      "binlog.000003": 2000, "binlog.000004": 300})
    assert unread_bytes(later, reading) == (8000 - 1000) + 2000 + 300


def test_figures_add_the_ring_backlog_and_give_an_eta_only_while_catching_up():
    primary = Primary(GtidSet.parse("0-1-1100"), "b.1", 90_000, {})
    reading = Reading("0-1-1000", "b.1", 70_000, 50, 6_000, 950)
    f = figures(primary, reading, apply_rate=600.0, write_rate=500.0)
    assert f["transactions"] == 150 and f["bytes"] == 26_000 and f["catch_up_eta_s"] == 1.5
    assert figures(primary, reading, 400.0, 500.0)["catch_up_eta_s"] is None  # falling behind
    assert figures(primary, reading, None, None)["catch_up_eta_s"] is None
    done = figures(Primary(GtidSet.parse("0-1-1000"), "b.1", 70_000, {}), Reading("0-1-1000", "b.1", 70_000, 0, 0,
                                                                                   1000), 0.0, 0.0)
    assert done["transactions"] == 0 and done["catch_up_eta_s"] == 0.0
    idle = figures(Primary(GtidSet.parse("0-1-1000"), "b.1", 70_000, {}), Reading("0-1-999", "b.1", 69_900, 0, 0, 0),
                   apply_rate=10.0, write_rate=10.0)
    assert idle["transactions"] == 1 and idle["catch_up_eta_s"] == 0.0  # a heartbeat in flight: caught up


def test_rates_over_a_sliding_window():
    rate = Rate()
    assert rate.add(0.0, 0) is None
    assert rate.add(1.0, 100) == 100.0
    for t in range(2, 30):
        r = rate.add(float(t), 100 * t if t < 20 else 1900)
    assert r == 0.0  # the last 10 s saw nothing
    assert total_seq(GtidSet.parse("0-1-10,1-2-5")) == 15 and total_seq(GtidSet.parse(f"{UUID}:1-7")) == 7
