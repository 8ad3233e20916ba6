"""Semi-sync ACKs the primary asked for and the replica side does not cover yet (pure).

The primary asks for an ACK on the last event of a transaction; the primary side may
send it only once the replica side covers that transaction's last frame: holds it in
its ring (``received``) or committed it (``applied``). An ACK names a binlog position,
and the primary keeps the highest position acknowledged and releases every commit
waiting at or before it (MariaDB's ``Repl_semi_sync_master::report_reply_binlog``), so
one ACK for the newest covered request answers all the older ones.

A request waits at most the primary's own semi-sync timeout: past it the primary has
stopped waiting (it went async), so the request is dropped and counted as skipped,
never acknowledged later, even once covered.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AckRequest:
    seq: int  # the frame seq the replica must cover (the transaction's last frame, or later)
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

    @property
    def newest_seq(self) -> int:
        return self._queue[-1].seq if self._queue else 0

    @property
    def next_deadline(self) -> float:
        return self._queue[0].deadline

    def settle(self, covered_seq: int, now: float) -> tuple[AckRequest | None, int]:
        """(the newest request ``covered_seq`` covers, to acknowledge; how many requests
        passed their deadline first, skipped). Both leave the queue."""
        queue, newest, skipped = self._queue, None, 0
        while queue and (queue[0].seq <= covered_seq or queue[0].deadline < now):
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
