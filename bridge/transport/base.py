"""The one-sided transport contract (docs/architecture.md, "Transports").

Primary side, ``RemoteRing``: place bytes at a region offset, publish progress,
wait until placed, read the replica's ack_seq, and say what the replica holds
(``held``: the semi-sync ``received`` truth). No transport's write is answered one
by one: shm and rdma writes are placed when they return (rdma: the completion of the
signaled write of the frames); the tcp receiver answers only when asked (``confirm``,
``held``), and ``answers_fd`` is the socket its answers arrive on (None: nothing to
wait for).
Replica side, ``RingHost``: owns the registered/shared/placed region and tells the
primary (handshake ``params``) how to reach it, and offers a ``doorbell_fd`` the
idle consumer may sleep on (None: poll; see doorbell.py).

The compiled lanes' hooks are part of the contract, on every transport: a ship lane
(bridge.source.ship) writes a ring itself where ``lane_target`` names how (shm: the shared
ring and its doorbell; tcp: the data socket; rdma: the mirror and its queue pair), and an
apply lane (bridge.apply.lane) reads the tcp data connection itself through ``lane_receiver``. A transport without them
answers None, and the general path does the work.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Protocol

from bridge.transport.doorbell import DOORBELL_WAIT_S, wait_for_doorbell


@dataclass(frozen=True, slots=True)
class LaneTarget:
    """Where a ship lane puts a ring's frames itself: into the replica's shared ring
    (``remote``, a writable view of it) ringing its ``doorbell`` (-1: none), as WRITE and
    PUBLISH messages on the data socket (``sock``, plain TCP), or into the registered mirror
    (``remote``) whose ranges its queue pair (``verbs``, bridge.transport.verbs) writes into
    the replica's ring. ``confirms``: its placement can be confirmed within the lane (shm:
    the stores themselves; tcp: the replica side's answer; rdma: the completion of its
    frames' write), so the lane may send semi-sync `received` ACKs itself."""

    remote: memoryview | None = None
    doorbell: int = -1
    sock: socket.socket | None = None
    verbs: object | None = None
    confirms: bool = False


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

    # --- a ship lane writing this ring itself (bridge.node.shipping, fanship) ---------
    def lane_target(self) -> LaneTarget | None: ...  # None: the general path places (TLS, messages queued)
    # memory a ring producer frames into directly (rdma: the registered mirror), or None: its own
    def producer_region(self) -> object | None: ...
    def lane_published(self, write_seq: int) -> None: ...  # a lane published up to ``write_seq``
    # the answers asked for and not read yet, handed to the lane for its run: (how many,
    # the next one's bytes read so far, the seq published when the last was asked for)
    def answers_to_lane(self) -> tuple[int, bytes, int]: ...
    # ... and handed back after it (ShipLane.answers_out), with the last answer it read
    def answers_from_lane(self, asked: int, partial: bytes, asked_seq: int, placed: int, applied: int) -> None: ...


class RingHost(Protocol):
    region: memoryview
    doorbell_fd: int | None

    def params(self) -> dict: ...
    def fence(self) -> None: ...  # fresh memory for a new session: no earlier writer reaches it
    # an authenticated data connection of the current session (tcp: placements, rdma: the
    # queue pair exchange); returns when it ends. shm has none and refuses one.
    def accept(self, conn, auth: str = "", msg: dict | None = None) -> None: ...
    def close(self) -> None: ...
    # the compiled receiver of the data connection writing into ``region`` (the session's
    # ring), which an apply lane may read the connection through while it runs; None: none
    def lane_receiver(self, region: memoryview) -> object | None: ...
    # an idle consumer's wait until the primary side wakes it (a safety bound: DOORBELL_WAIT_S), where
    # the host wakes it otherwise than by ``doorbell_fd``; False: it cannot (the consumer polls)
    def sleep(self, has_work, timeout_s: float = ...) -> bool: ...
    def interrupt(self) -> None: ...  # a ``sleep`` (an apply lane's too) cut short: the node stops, a session opens
    # the fd an idle apply lane also waits on, which ``interrupt`` makes readable (rdma); None: the doorbell is it
    lane_interrupt_fd: int | None
    # rdma: the queue pair an idle apply lane sleeps through (its ``lane_sleeper``); None: the
    # doorbell (shm, tcp), or nothing to sleep on
    def lane_sleeper(self) -> object | None: ...


class NoLaneReceiver:
    """A ring host whose data arrives without a receiver (shm, rdma: the writes land by
    themselves): no apply lane reads a connection of it."""

    def lane_receiver(self, region: memoryview) -> None:
        return None


class DoorbellSleep:
    """A ring host whose idle consumer sleeps on ``doorbell_fd`` (shm, tcp)."""

    def sleep(self, has_work, timeout_s: float = DOORBELL_WAIT_S) -> bool:
        wait_for_doorbell(self.region, self.doorbell_fd, has_work, timeout_s)
        return True

    def interrupt(self) -> None:
        """A sleep on the doorbell (the general path's or the apply lane's) cut short: the
        doorbell rung with no frame, so the sleeper goes back to its caller."""
        self.doorbell.wake()

    def lane_sleeper(self) -> None:
        return None  # the lane sleeps on ``doorbell_fd``

    lane_interrupt_fd = None  # ... which ``interrupt`` rings too


class NoLaneAnswers:
    """A remote ring whose placements confirm themselves or not at all (shm, rdma): a ship
    lane is handed no answers, and hands none back."""

    def lane_published(self, write_seq: int) -> None:
        """Nothing to note: the shared ring's header already says it (shm), or no lane ran (rdma)."""

    def answers_to_lane(self) -> tuple[int, bytes, int]:
        return 0, b"", 0

    def answers_from_lane(self, asked: int, partial: bytes, asked_seq: int, placed: int, applied: int) -> None:
        """None were asked for here."""
