"""One registry decides, for each compiled module, whether it or its pure-Python twin runs
(bridge.wire.native), and a node says so in one line for the parts it uses."""

import os
import subprocess
import sys

import pytest

from bridge.apply import lane as apply_lanes
from bridge.source import lanes as ship_lanes
from bridge.transport import receiver
from bridge.wire import native

PARTS = ("hot path", ship_lanes.PART, apply_lanes.PART, receiver.PART)


def _announce(script: str, pure: bool = False) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    if pure:
        env[native.PURE_ENV] = "1"
    script = ("import logging, sys\n" + script + "\nlogging.basicConfig(format='%(levelname)s %(message)s', level=logging.INFO)\n"
              "from bridge.wire import native\nfrom bridge.apply import lane as lanes\nfrom bridge.source import lanes as s\n"
              "from bridge.transport import receiver\n"
              "native.announce(logging.getLogger('t'), ['hot path', s.PART, lanes.PART, receiver.PART])\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    return out.stderr.strip().splitlines()


def test_every_picker_asks_the_registry_once_and_each_part_has_its_module():
    assert {native.choice(part).module for part in PARTS} == {"bridge.wire._hotpath", "bridge.source._ship",
                                                              "bridge.apply.lane._lane", "bridge.transport._receiver"}
    assert [native.choice(part).compiled is not None for part in PARTS] == \
        [native.COMPILED, ship_lanes.COMPILED, apply_lanes.COMPILED, receiver.COMPILED]


@pytest.mark.skipif(not native.COMPILED, reason="the compiled core is not built (or the twin was asked for)")
def test_a_node_with_every_part_compiled_says_so_in_one_info_line():
    assert _announce("") == ["INFO compiled core: hot path, ship lane, apply lane, tcp receiver"]


@pytest.mark.skipif(not native.COMPILED, reason="the compiled core is not built (or the twin was asked for)")
def test_one_part_missing_is_named_with_why_the_rest_still_compiled():
    lines = _announce("sys.modules['bridge.source._ship'] = None")
    assert len(lines) == 1 and lines[0].startswith("WARNING compiled core: ship lane in pure Python, slower (the "
                                                   "compiled module is not built")
    assert lines[0].endswith("; compiled: hot path, apply lane, tcp receiver")


@pytest.mark.skipif(not native.COMPILED, reason="the compiled core is not built (or the twin was asked for)")
def test_a_compiled_module_that_cimports_a_missing_one_runs_its_twin_too():
    lines = _announce("sys.modules['bridge.transport._receiver'] = None")  # the apply lane holds its connection
    assert len(lines) == 1 and lines[0].startswith("WARNING compiled core: apply lane, tcp receiver in pure Python, "
                                                   "slower, its answers wait for the interpreter lock (")
    assert lines[0].endswith("; compiled: hot path, ship lane")


def test_the_environment_asks_for_every_twin_at_once():
    assert _announce("", pure=True) == [
        "WARNING compiled core: hot path, ship lane, apply lane, tcp receiver in pure Python, slower, its answers "
        f"wait for the interpreter lock ({native.PURE_ENV} is set)"]
