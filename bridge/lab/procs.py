"""Running the two bridge ends as real `python -m bridge` processes (demo, tests,
benchmarks). URLs with passwords go through the environment, never argv."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from bridge.errors import BridgeError
from bridge.lab.ports import free_port as _free_port

STOP_TIMEOUT_S = 15.0


class BridgeProcess:
    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: str,
                 launcher: tuple[str, ...] = ()) -> None:
        """``launcher``: a command it runs under (``ip netns exec NAME``, say)."""
        self.name, self.args, self.env, self.launcher = name, args, {**os.environ, **env}, launcher
        self.metrics_address = f"127.0.0.1:{_free_port()}"  # its /metrics and /status
        self.args += ["--metrics", self.metrics_address]
        self.log_path = os.path.join(log_dir, f"bridge-{name}.log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> BridgeProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*self.launcher, sys.executable, "-m", "bridge", *self.args], env=self.env,
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and not self.alive():
            raise BridgeError(f"the {self.name} bridge exited with code {self.proc.returncode}; "
                              f"its log ends:\n{self.log_tail()}")

    def log_tail(self, chars: int = 800) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-chars:]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal and wait; returns the exit code (SIGKILL: -9)."""
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise BridgeError(f"the {self.name} bridge did not stop within {STOP_TIMEOUT_S:.0f}s "
                              f"after signal {sig}") from None


def replica_process(target_url: str, port: int, transport: str, channel: str, log_dir: str,
                    ring_bytes: int | None = None, extra: tuple[str, ...] = ()) -> BridgeProcess:
    args = ["start-replica", "--listen", f"127.0.0.1:{port}", "--transport", transport, "--channel", channel,
            *extra]
    if ring_bytes:
        args += ["--ring-bytes", str(ring_bytes)]
    return BridgeProcess("replica", args, {"RDMA_BRIDGE_TARGET": target_url}, log_dir)


def primary_process(source_url: str, port: int, transport: str, start_gtid: str, log_dir: str,
                    extra: tuple[str, ...] = ()) -> BridgeProcess:
    args = ["start-primary", "--replica", f"127.0.0.1:{port}", "--transport", transport,
            "--start-gtid", start_gtid, *extra]
    return BridgeProcess("primary", args, {"RDMA_BRIDGE_SOURCE": source_url}, log_dir)


# A replica side's start: under a second here, but tens of seconds for one over rdma in
# the test guest (software emulation, a busy host); a dead process fails at once (``alive``).
START_TIMEOUT_S = 90.0


def wait_port(port: int, timeout_s: float = START_TIMEOUT_S, alive=lambda: None, host: str = "127.0.0.1") -> None:
    """Until the replica side listens on ``host:port``; ``alive`` fails as soon as its process died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive()
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BridgeError(f"replica bridge did not listen on {host}:{port} within {timeout_s:.0f}s")


def start_pair(replica: BridgeProcess, primary: BridgeProcess, port: int):
    """The replica side, then (once it listens on ``port``) the primary side, as users
    start them. Returns a check that fails at once, with the log of the one that exited,
    while either has."""
    def alive() -> None:
        replica.check_alive()
        primary.check_alive()

    replica.start()
    wait_port(port, alive=alive)
    primary.start()
    return alive
