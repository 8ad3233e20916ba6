"""Apply mode relay: how far the replica server has got, in the ring's seqs, for the
primary side's semi-sync ACKs (bridge.node.member ``covered``): ``received`` once the
server's semi-sync ACK says its relay log holds a transaction, ``applied`` once its
executed GTIDs hold it. Every whole transaction the replica side hands to the relay is
noted with the seq of its last frame until the server has executed it. Three threads use
it (the loop notes, a relay session receives, the watcher executes): one lock."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from bridge.model import Gtid, GtidSet


class RelayProgress:
    def __init__(self, tell: Callable[[dict], None]) -> None:
        """``tell``: the message to the primary side, sent under this object's lock (in order)."""
        self._tell = tell
        self._seqs: deque[tuple[str, int]] = deque()
        self._lock = threading.Lock()
        self.received = self.applied = 0

    def noted(self, gtid: str, seq: int) -> None:
        with self._lock:
            self._seqs.append((gtid, seq))

    def restart(self, seq: int) -> None:
        """A new session numbers on from ``seq``: what is behind it is covered."""
        with self._lock:
            self._seqs.clear()
            self.received = self.applied = seq

    def received_up_to(self, gtid: str) -> None:
        """The server's semi-sync ACK: its relay log holds every transaction up to ``gtid``."""
        with self._lock:
            seq = next((s for g, s in self._seqs if g == gtid), 0)
            if seq > self.received:
                self.received = seq
                self._told()

    def executed(self, executed: GtidSet) -> None:
        """The server executed more: the seqs it covers are applied (and so received)."""
        with self._lock:
            seq = 0
            while self._seqs and executed.contains(Gtid.parse(self._seqs[0][0])):
                seq = self._seqs.popleft()[1]
            if seq > self.applied:
                self.applied = seq
                self.received = max(self.received, seq)
                self._told()

    def _told(self) -> None:
        self._tell({"type": "relay_progress", "received": self.received, "applied": self.applied})
