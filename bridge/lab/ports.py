"""Loopback ports for the servers and bridge processes the sandbox, the demo, the
benchmarks and the tests start."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now and outside the kernel's ephemeral range: a port the
    kernel picked (bind to 0) may become some client connection's source port before
    the server meant for it binds it ("Address already in use")."""
    high = max(_ephemeral_low(), 11000)
    for _ in range(200):
        port = random.randrange(10000, high)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as s:  # every try taken: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
