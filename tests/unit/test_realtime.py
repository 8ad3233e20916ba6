"""bridge.node.realtime on this kernel: every thread of the process under SCHED_FIFO, those
it starts later too; refused (no CAP_SYS_NICE) it says so in one line and the process
runs on at normal priority. Each case in a child process (the test runner's own
threads keep their scheduling)."""

import os
import shutil
import subprocess
import sys

import pytest

CHILD = r"""
import logging, os, sys, threading
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
from bridge.node import realtime
hold = threading.Event()
before = threading.Thread(target=hold.wait); before.start()
print(realtime.scheduling(), file=sys.stderr)
done = realtime.enter(7)
after = threading.Thread(target=hold.wait); after.start()
tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
print(done, len(tids), *sorted({(os.sched_getscheduler(t), os.sched_getparam(t).sched_priority) for t in tids}))
print("status says:", realtime.scheduling(), file=sys.stderr)
hold.set()
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root or CAP_SYS_NICE")


def _child(*prefix: str) -> tuple[str, str]:
    out = subprocess.run([*prefix, sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60,
                         check=True)
    return out.stdout.strip(), out.stderr


@needs_root
def test_every_thread_and_every_later_one_runs_under_sched_fifo():
    stdout, stderr = _child()
    assert stdout == f"True 3 ({os.SCHED_FIFO}, 7)"  # main, the thread before, the thread after: all of them
    assert "realtime: every thread under SCHED_FIFO priority 7" in stderr
    assert stderr.startswith("normal\n") and "status says: SCHED_FIFO 7" in stderr  # `status` tells


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) drops the capability")
def test_refused_it_says_why_and_runs_at_normal_priority():
    stdout, stderr = _child("setpriv", "--bounding-set", "-sys_nice", "--inh-caps", "-sys_nice")
    assert stdout == f"False 3 ({os.SCHED_OTHER}, 0)"
    assert "WARNING realtime: SCHED_FIFO priority 7 refused (needs root or CAP_SYS_NICE" in stderr
    assert stderr.count("realtime:") == 1
    assert "status says: normal" in stderr


@pytest.mark.parametrize("transport", ["rdma", "tcp"])
def test_a_replica_side_that_would_poll_under_sched_fifo_is_refused_before_it_starts(transport):
    from click.testing import CliRunner

    from bridge.cli import main

    out = CliRunner().invoke(main, ["start-replica", "--target", "mysql://apply@127.0.0.1:1", "--listen",
                                    "127.0.0.1:1", "--transport", transport, "--realtime-priority", "5",
                                    "--spin-us", "100"])
    assert out.exit_code == 2, out.output
    assert "--realtime-priority" in out.output and "give --spin-us 0" in out.output
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # refused before anything changed
