"""One writer per ring: which primary side may feed a channel now (pure).

A primary side names itself in its hello (a random id per process, its host, pid,
source and server id). While the channel's current writer is alive (its control
connection open and heard from within ``SILENT_S``; it sends a heartbeat every
``HEARTBEAT_S``), another writer is refused with a message naming the running one,
unless it asks to take over. The same writer coming back (a lost link) is let in.
Taking over fences the old writer: the replica side gives the new session fresh ring
memory (bridge.transport, ``RingHost.fence``) and a new epoch that every frame must
carry, and tells the old one it was fenced, so it stops instead of retrying. A fenced
writer that missed that message (its link went down first) and says hello again is
refused as fenced too, with or without --take-over: it never writes again, and two
writers started with --take-over cannot take the channel from each other in turns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bridge.errors import ChannelBusy, Fenced, RemoteProtocolError

HEARTBEAT_S = 1.0  # a primary side speaks on its control connection at least this often
SILENT_S = 5.0  # a writer not heard from for this long is gone, whatever its socket says
LEAVING_S = 2.0  # a newcomer waits this long for a writer that is just stopping (a restart)
FENCED_KEPT = 64  # fenced writers remembered (each process has its own id: a restart is a new writer)


@dataclass
class Writer:
    id: str
    host: str = "?"
    pid: int = 0
    source: str = "?"
    server_id: int = 0
    since: str = ""
    heard: float = field(default_factory=time.monotonic)

    @classmethod
    def from_hello(cls, hello: dict) -> Writer:
        """The writer a hello names (every primary side of this protocol version does)."""
        w = hello.get("writer")
        if not isinstance(w, dict) or not w.get("id"):
            raise RemoteProtocolError("hello: no writer named (a primary side of this protocol version always "
                                      "names itself for the one-writer check)")
        return cls(str(w["id"]), str(w.get("host", "?")), int(w.get("pid") or 0),
                   str(w.get("source", "?")), int(w.get("server_id") or 0), str(w.get("since", "")))

    def __str__(self) -> str:
        return (f"pid {self.pid} on {self.host} (source {self.source}, server id {self.server_id}, "
                f"started {self.since or '?'})")


class WriterSeat:
    """The channel's current writer, and who may replace it."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.current: Writer | None = None
        self.connected = False
        self.fenced_by: dict[str, Writer] = {}  # fenced writer's id -> the writer that took the channel

    def alive(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self.current is not None and self.connected and now - self.current.heard < SILENT_S

    def admit(self, hello: dict, now: float | None = None) -> Writer | None:
        """Seat the writer of ``hello``; returns the live writer it fences off (None
        when there was none, or it is the same one coming back). Raises ChannelBusy."""
        newcomer = Writer.from_hello(hello)
        by = self.fenced_by.get(newcomer.id)
        if by is not None:
            raise Fenced(f"fenced: the primary side {by} took channel {self.channel!r} over; this primary side "
                         f"({newcomer}) must not write to it again: stop it (a new start may take the channel "
                         "back with --take-over)")
        old = self.current if self.alive(now) else None
        if old is not None and old.id == newcomer.id:
            old = None
        if old is not None and not hello.get("take_over"):
            raise ChannelBusy(f"channel {self.channel!r} is fed by the primary side {old}; stop that one first, "
                              "or start this one with --take-over to fence it off")
        self.current, self.connected = newcomer, True
        if old is not None:
            self.fenced_by[old.id] = newcomer
            while len(self.fenced_by) > FENCED_KEPT:
                del self.fenced_by[next(iter(self.fenced_by))]
        return old

    def wait_for_leaving(self, hello: dict) -> None:
        """A restarted primary side may say hello before the replica side has seen its
        predecessor's connection close: give that a moment before ``admit`` decides."""
        newcomer = Writer.from_hello(hello).id
        deadline = time.monotonic() + LEAVING_S
        while self.alive() and self.current.id != newcomer and time.monotonic() < deadline:
            time.sleep(0.02)

    def heard(self, writer_id: str) -> None:
        if self.current is not None and self.current.id == writer_id:
            self.current.heard = time.monotonic()

    def gone(self, writer_id: str) -> None:
        """Its control connection ended."""
        if self.current is not None and self.current.id == writer_id:
            self.connected = False
