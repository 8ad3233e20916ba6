"""Doorbell: lets an idle replica sleep in the kernel instead of spinning on its ring.

The consumer sets the ring header's ``waiting`` word, looks at the ring once more,
then blocks on the host's doorbell fd; a producer that finds ``waiting`` set right
after it published rings the doorbell (one byte). shm: a FIFO next to the ring
file, written by the primary process. tcp: an eventfd, written by the replica's
own receiver thread. rdma: none (a one-sided write wakes nobody): the host's own
``sleep`` (bridge.transport.rdma) has the primary side write with immediate data.

The flag and the published seq are stores on two sides, each followed by a load of
the other's (Dekker's pattern): x86 lets a load pass its own thread's earlier store,
so each side puts a full barrier between its store and its load (``full_fence`` here;
the compiled lanes and receiver their own), and one of them always sees the other's: a
consumer that found no frame is woken by the producer, which found the flag up. The wait
is still bounded (``DOORBELL_WAIT_S``), as a safety net only: an idle replica side wakes
about once a second, not a hundred times. ``interrupt`` (``Doorbell.wake``) cuts a wait
short: the node stops, or a new session opens.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable

from bridge.errors import TransportError
from bridge.ring.layout import consumer_waiting, set_waiting

DOORBELL_WAIT_S = 1.0
_FENCE = threading.Lock()


def full_fence() -> None:
    """A full memory barrier between this thread's stores and its later loads: CPython
    takes and releases a lock with a locked instruction, which x86 orders as a full barrier
    (the compiled paths issue ``__atomic_thread_fence(__ATOMIC_SEQ_CST)`` themselves)."""
    with _FENCE:
        pass


def wait_for_doorbell(region, fd: int, has_work: Callable[[], bool], timeout_s: float = DOORBELL_WAIT_S) -> None:
    """Block until the producer rings, at most ``timeout_s``; returns at once when
    ``has_work`` says a frame arrived while the flag was going up."""
    set_waiting(region, True)
    full_fence()  # the flag out before the ring is looked at again (the producer: the other way round)
    try:
        if not has_work():
            select.select([fd], [], [], timeout_s)
        drain(fd)
    finally:
        set_waiting(region, False)


def sleep_on_queue_pair(qp, has_work: Callable[[], bool], timeout_s: float, interrupt_fd: int | None = None) -> bool:
    """rdma: until the primary side wakes this side through the queue pair ``qp`` (a write
    with immediate data on its completion channel), ``interrupt_fd`` or ``timeout_s``.
    ``qp.sleep_prepare`` takes the wakeups that came and announces this side where it has
    not since the last one (its write completed); then ``has_work`` looks at the ring once
    more. False where the queue pair cannot sleep (pyverbs', closed, broken): the caller polls."""
    fd = qp.sleep_prepare()
    if fd is None:
        return False
    try:
        if not has_work():
            ready = select.select([fd] if interrupt_fd is None else [fd, interrupt_fd], [], [], timeout_s)[0]
            if interrupt_fd is not None and interrupt_fd in ready:
                drain(interrupt_fd)  # taken: the caller looks at what changed
    except (OSError, ValueError):
        pass  # the session ended meanwhile (its channel closed)
    qp.sleep_done()
    return True


def drain(fd: int) -> None:
    try:
        os.read(fd, 4096)  # FIFO: every byte rung; eventfd: the 8-byte counter
    except BlockingIOError:
        pass


class Doorbell:
    """One doorbell fd and what ringing writes to it."""

    def __init__(self, fd: int, token: bytes) -> None:
        self.fd, self._token = fd, token

    @classmethod
    def eventfd(cls) -> "Doorbell":
        return cls(os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC), (1).to_bytes(8, "little"))

    @classmethod
    def fifo(cls, path, create: bool = False) -> "Doorbell":
        """The replica creates the FIFO and holds it open for reading (and writing, so
        a primary can open it at any time); the primary opens it for writing."""
        if create:
            os.mkfifo(path, 0o600)
        return cls(os.open(path, (os.O_RDWR if create else os.O_WRONLY) | os.O_NONBLOCK | os.O_CLOEXEC), b"\x01")

    def ring(self, region) -> None:
        """Producer side, after publishing: wake the consumer if it sleeps (the published
        seq out before the flag is read)."""
        full_fence()
        if consumer_waiting(region):
            try:
                os.write(self.fd, self._token)
            except BlockingIOError:
                pass  # a full FIFO already holds wakeups the consumer has not read
            except OSError as exc:  # EPIPE: the replica process is gone
                raise TransportError(f"ring the replica's doorbell: {exc.strerror or exc}") from exc

    def wake(self) -> None:
        """Wake a consumer asleep on it whatever its flag says (an interrupt: it looks at
        the node's state, finds no frame, and goes back to its caller)."""
        try:
            os.write(self.fd, self._token)
        except OSError:
            pass  # full (wakeups already wait), or closed

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
