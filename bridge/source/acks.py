"""Semi-sync ACKs the primary asked for and the replica side does not cover yet (pure).

The primary asks for an ACK on the last event of a transaction; the primary side may
send it only once the replica side covers that transaction's last frame: holds it in
its ring (``received``) or committed it (``applied``). An ACK names a binlog position,
and the primary keeps the highest position acknowledged and releases every commit
waiting at or before it (MariaDB's ``Repl_semi_sync_master::report_reply_binlog``), so
one ACK for the newest covered request answers all the older ones.

With several replica sides (fan-out) a request names the seq each of them must cover
(its own ring's numbering; -1 where one does not count: down, detached, catching up,
or behind with frames not yet placed) and is covered once ``quorum`` of them do.

A request waits at most the primary's own semi-sync timeout: past it the primary has
stopped waiting (it went async), so the request is dropped and counted as skipped,
never acknowledged later, even once covered.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AckRequest:
    seqs: tuple[int, ...]  # per replica side, the frame seq it must cover (its last frame, or later); -1: none
    position: int  # the ACK's binlog position (the asking event's end) ...
    log_file: str  # ... in this binlog file
    deadline: float  # monotonic seconds: the primary stops waiting then


class PendingAcks:
    """Requests in the order the primary asked (seqs and deadlines never go down)."""

    def __init__(self) -> None:
        self._queue: deque[AckRequest] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, request: AckRequest) -> None:
        self._queue.append(request)

    def newest_seq(self, member: int = 0) -> int:
        """The highest seq a request asks of replica side ``member`` (0: none)."""
        for request in reversed(self._queue):
            if request.seqs[member] >= 0:
                return request.seqs[member]
        return 0

    @property
    def next_deadline(self) -> float:
        return self._queue[0].deadline

    def settle(self, covered: tuple[int, ...], now: float, quorum: int = 1) -> tuple[AckRequest | None, int]:
        """(the newest request that ``quorum`` replica sides cover, ``covered`` being the
        highest seq each holds or committed, to acknowledge; how many requests passed
        their deadline first, skipped). Both leave the queue."""
        queue, newest, skipped = self._queue, None, 0
        while queue and (_count(queue[0].seqs, covered) >= quorum or queue[0].deadline < now):
            request = queue.popleft()
            if request.deadline < now:
                skipped += 1
            else:
                newest = request
        return newest, skipped

    def drop(self) -> int:
        """Forget every request (the dump connection they came on is gone); how many."""
        dropped = len(self._queue)
        self._queue.clear()
        return dropped


def _count(seqs: tuple[int, ...], covered: tuple[int, ...]) -> int:
    """How many replica sides cover the seq asked of them."""
    return sum(1 for seq, have in zip(seqs, covered) if 0 <= seq <= have)
