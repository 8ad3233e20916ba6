"""What a stopped applier reports and which skip it accepts (bridge.node.halt)."""

import time

import pytest

from bridge.errors import ConfigError
from bridge.node.halt import Halt
from bridge.ops.metrics import prometheus_text


def test_a_halt_reports_where_and_why_and_only_its_own_transaction_can_be_skipped():
    halt = Halt(42, "0-1-4711", "apply seq 42 (0-1-4711): (1062, \"Duplicate entry '3' for key 'PRIMARY'\")", 1062,
                time.time() - 5)
    status = halt.status()
    assert status["seq"] == 42 and status["code"] == 1062 and status["stopped_for_s"] >= 5
    assert status["since"].endswith("+00:00")
    assert halt.message() == {"type": "apply_stopped", "seq": 42, "gtid": "0-1-4711", "code": 1062,
                              "error": halt.error, "until": False}
    assert "rdma-bridge resume" in halt.hint() and "skip --gtid 0-1-4711" in halt.hint()
    halt.check_skip("0-1-4711")
    with pytest.raises(ConfigError, match="applying stopped at 0-1-4711 \\(seq 42\\); only that transaction"):
        halt.check_skip("0-1-4712")
    chunked = Halt(7, "0-1-9", "x", 0, time.time(), skippable=False)
    assert "skip" not in chunked.hint()
    with pytest.raises(ConfigError, match="cut in chunks cannot be skipped"):
        chunked.check_skip("0-1-9")


def test_the_stopped_gauge_carries_the_error_code_and_falls_to_zero():
    stopped = prometheus_text("replica", {"apply_stopped": Halt(1, "0-1-1", "x", 1146, time.time()).status()})
    assert 'rdma_bridge_apply_stopped{role="replica",code="1146"} 1' in stopped
    running = prometheus_text("replica", {"apply_stopped": None})
    assert 'rdma_bridge_apply_stopped{role="replica",code=""} 0' in running
    assert "rdma_bridge_apply_stopped" not in prometheus_text("primary", {})
