"""One-sided-write transports: the replica's ring presented to the primary as
remote memory (``RemoteRing``), and the replica side that owns that memory
(``RingHost``). ``rdma`` (pyverbs) is imported lazily, only by rdma.py (and its verbs.py)."""

from __future__ import annotations

import ssl

from bridge.config import RdmaOptions
from bridge.errors import ConfigError
from bridge.transport.base import RemoteRing, RingHost

TRANSPORTS = ("shm", "tcp", "rdma")


def make_host(transport: str, ring_bytes: int, rdma: RdmaOptions = RdmaOptions(), listen_address: str = "") -> RingHost:
    """The replica side's ring; ``rdma`` and ``listen_address`` (which device, port and GID) for rdma."""
    if transport == "shm":
        from bridge.transport.shm import ShmRingHost
        return ShmRingHost(ring_bytes)
    if transport == "tcp":
        from bridge.transport.tcp import TcpRingHost
        return TcpRingHost(ring_bytes)
    if transport == "rdma":
        return _rdma().RdmaRingHost(ring_bytes, rdma, listen_address)
    raise ConfigError(f"transport {transport!r}: unknown (choose shm, tcp or rdma)")


def open_remote(transport: str, params: dict, replica_addr: tuple[str, int], ring_bytes: int,
                secret: str = "", tls: ssl.SSLContext | None = None, rdma: RdmaOptions = RdmaOptions()) -> RemoteRing:
    """The primary side's view of the replica's ring; ``tls``: the data or setup
    connection (tcp, rdma) goes through TLS, as the control channel does; ``rdma``: which
    device, port and GID, and how its packets are marked."""
    if transport == "shm":
        from bridge.transport.shm import ShmRemoteRing
        return ShmRemoteRing(params, ring_bytes)
    if transport == "tcp":
        from bridge.transport.tcp import TcpRemoteRing
        return TcpRemoteRing(params, replica_addr, ring_bytes, secret, tls=tls)
    if transport == "rdma":
        return _rdma().RdmaRemoteRing(params, replica_addr, ring_bytes, secret, options=rdma, tls=tls)
    raise ConfigError(f"transport {transport!r}: unknown (choose shm, tcp or rdma)")


def _rdma():
    """pyverbs only when rdma is chosen; a clear error where it is missing."""
    try:
        from bridge.transport import rdma
    except ImportError as exc:
        raise ConfigError(f"transport 'rdma': pyverbs is not importable ({exc}); `make rdma-deps` installs "
                          "Debian's python3-pyverbs into the venv, or use --transport tcp/shm") from exc
    return rdma


def native_parts(transport: str) -> tuple[str, ...]:
    """The compiled parts (bridge.wire.native) a transport brings to a node's "compiled core" line."""
    return (_rdma().PART,) if transport == "rdma" else ()


def check_available(transport: str) -> None:
    """Refuse up front a transport this host cannot use (both start commands)."""
    if transport == "rdma" and not rdma_available():
        raise ConfigError("transport 'rdma': no RDMA device here (or pyverbs missing: `make rdma-deps`); use "
                          "--transport tcp between hosts or shm on one host (`rdma-bridge doctor` explains)")


def rdma_available() -> bool:
    """pyverbs imports and lists at least one device."""
    try:
        from bridge.transport import rdma
    except ImportError:
        return False
    return rdma.devices_present()
