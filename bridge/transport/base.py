"""The one-sided transport contract (docs/architecture.md, "Transports").

Primary side, ``RemoteRing``: place bytes at a region offset, publish progress,
wait until placed, read the replica's ack_seq. The replica never answers a write.
Replica side, ``RingHost``: owns the registered/shared/placed region and tells the
primary (handshake ``params``) how to reach it, and offers a ``doorbell_fd`` the
idle consumer may sleep on (None: poll; see doorbell.py).
"""

from __future__ import annotations

from typing import Protocol


class RemoteRing(Protocol):
    def write(self, offset: int, data) -> None: ...
    def publish(self, write_seq: int, head: int) -> None: ...
    def flush(self) -> None: ...
    def read_ack(self) -> int: ...
    def close(self) -> None: ...


class RingHost(Protocol):
    region: memoryview
    doorbell_fd: int | None

    def params(self) -> dict: ...
    def fence(self) -> None: ...  # fresh memory for a new session: no earlier writer reaches it
    # an authenticated data connection of the current session (tcp: placements, rdma: the
    # queue pair exchange); returns when it ends. shm has none and refuses one.
    def accept(self, conn, auth: str = "", msg: dict | None = None) -> None: ...
    def close(self) -> None: ...
