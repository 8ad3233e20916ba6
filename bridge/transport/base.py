"""The one-sided transport contract (docs/architecture.md, "Transports").

Primary side, ``RemoteRing``: place bytes at a region offset, publish progress,
wait until placed, read the replica's ack_seq, and say what the replica holds
(``held``: the semi-sync ``received`` truth). No transport's write is answered one
by one: shm and rdma writes are placed when they return (rdma: the completion of the
signaled header write); the tcp receiver answers only when asked (``confirm``,
``held``), and ``answers_fd`` is the socket its answers arrive on (None: nothing to
wait for).
Replica side, ``RingHost``: owns the registered/shared/placed region and tells the
primary (handshake ``params``) how to reach it, and offers a ``doorbell_fd`` the
idle consumer may sleep on (None: poll; see doorbell.py).
"""

from __future__ import annotations

from typing import Protocol


class RemoteRing(Protocol):
    answers_fd: int | None

    def write(self, offset: int, data) -> None: ...
    # ``confirm``: the caller will want to know once the replica holds this (tcp asks at once)
    def publish(self, write_seq: int, head: int, confirm: bool = False) -> None: ...
    def held(self, wanted: int) -> int: ...  # the highest seq the replica's ring holds, never waits
    def flush(self) -> None: ...  # wait until everything written so far is placed
    def read_ack(self) -> int: ...  # the replica's ack_seq (applied), fresh
    def last_ack(self) -> int: ...  # the replica's ack_seq as last known, never waits on a socket
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
