"""`sandbox down` from another process than the one that started the servers: a
stopped server whose parent has not reaped it yet (a zombie) counts as stopped."""

import subprocess
import sys
import time

from bridge.lab.runners import alive as _alive

# A parent that starts a child which exits at once, prints the child's pid and
# does not reap it for a while: the child stays a zombie that is not ours.
PARENT = "import subprocess, sys, time; c = subprocess.Popen(['true']); print(c.pid, flush=True); time.sleep(30)"


def test_a_zombie_of_another_process_is_not_alive():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _state(child) != "Z":
            time.sleep(0.01)
        assert _state(child) == "Z"  # exited, not reaped: kill(pid, 0) still succeeds
        assert not _alive(child)
        assert _alive(parent.pid)  # a running process still is
    finally:
        parent.kill()
        parent.wait()
    assert not _alive(parent.pid)  # gone (reaped above)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]
