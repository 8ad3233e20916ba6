"""The primary side's semi-sync ACKs: noted when the primary asks, sent once the
replica side covers the transaction, skipped once the primary stopped waiting.

``received``: covered when the replica side holds it in its ring (tcp: the receiver's
answer; rdma: the completion of the signaled write of its frames; shm: the store itself);
``applied``: when the replica committed it (the ring's ack_seq). What is pending and
what an ACK may claim is decided in ``bridge.source.acks`` (pure); this module asks the
transport and the dump connection, and waits for whichever speaks first, so that the
binlog is never left unread while ACKs wait (``wait``, called before a read that may
block). The primary node owns one and calls it from its loop (bridge.node.primary).
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Sequence

from bridge.node.counters import PrimaryCounts
from bridge.node.member import Member
from bridge.source.acks import AckRequest, PendingAcks
from bridge.source.reader import BinlogReader

APPLIED_POLL_S = 0.0001  # applied mode: how often the replica's commit is looked for while an ACK waits
LONGEST_WAIT_S = 0.25  # one sleep at most while ACKs wait (the control heartbeat goes on between)


class SemiSyncAcks:
    """``members``: every replica side this primary side feeds, in their order, None
    where one does not count now (down, detached, catching up, frames not placed yet);
    an ACK goes once ``quorum`` of them cover the transaction."""

    def __init__(self, mode: str, counts: PrimaryCounts, stop: threading.Event, quorum: int = 1) -> None:
        self.confirm = mode == "received"  # an ACK waits for the replica to hold it (else: to commit it)
        self.counts, self._stop, self.quorum = counts, stop, quorum
        self.pending = PendingAcks()
        self.timeout_s = 10.0  # the primary's rpl_semi_sync_master_timeout, read at the preflight

    def __bool__(self) -> bool:
        return bool(self.pending)

    def note(self, reader: BinlogReader, members: Sequence[Member | None]) -> None:
        """The primary asked for an ACK with an event read so far, and every frame up to
        each member's last is placed: the ACK goes once the quorum covers those seqs (at
        once where it does already)."""
        request = reader.take_ack_request()
        if request is not None:
            seqs = tuple(m.producer.write_seq if m is not None else -1 for m in members)
            self.pending.add(AckRequest(seqs, *request, time.monotonic() + self.timeout_s))
        if self.pending:
            self.settle(reader, members)

    def handed_over(self, seqs: tuple[int, ...], position: int, log_file: str, asked_ns: int) -> None:
        """The ship lane published a transaction asked about at ``asked_ns`` (monotonic)
        and returned before it could acknowledge it (tcp: the answer is late; fan-out: fewer
        rings than the quorum hold it): the ACK at ``position`` waits here for ``seqs`` (per
        replica side, -1 where it does not count), until the primary's timeout from then."""
        self.pending.add(AckRequest(seqs, position, log_file, asked_ns / 1e9 + self.timeout_s))

    def settle(self, reader: BinlogReader, members: Sequence[Member | None]) -> None:
        """Send the ACK of the newest request the quorum covers, if any; requests past
        the primary's timeout are counted as skipped: an ACK never claims what is not true."""
        covered = tuple(m.covered(self.confirm, self.pending.newest_seq(i)) if m is not None else -1
                        for i, m in enumerate(members))
        ack, skipped = self.pending.settle(covered, time.monotonic(), self.quorum)
        self.counts.acks_skipped += skipped
        if ack is not None:
            reader.send_ack(ack.position, ack.log_file)
            self.counts.acks_sent += 1

    def wait(self, reader: BinlogReader, members: Sequence[Member | None]) -> None:
        """Before a read that may block, while ACKs wait: wait for whichever comes first,
        the binlog's next bytes, a replica side's answer (tcp, ``received``), the poll
        interval (``applied``) or the oldest request's deadline, settling at each wake.
        Ends as soon as the binlog has bytes, or a link went down (the caller sees it)."""
        binlog_fd = reader.fileno()
        if binlog_fd is None:
            return
        if reader.readable_now():
            # no wait, but what is covered goes now: under a steady load the binlog always has
            # bytes, and the ship lane (which sends its own ACKs) runs only once no ACK waits here
            self.settle(reader, members)
            return  # from here only the kernel can have binlog bytes: select sees them
        links = [m.link for m in members if m is not None and m.link is not None]
        fds = [binlog_fd]
        if self.confirm:
            fds += [fd for fd in (link.remote.answers_fd if link.remote is not None else None for link in links)
                    if fd is not None]
        relayed = [m.link for m in members if m is not None and m.link is not None and m.apply_mode == "relay"]
        fds += [link.progress_fd for link in relayed]  # the replica side says what its server received, executed
        poll = LONGEST_WAIT_S if self.confirm or relayed else APPLIED_POLL_S
        while self.pending and not self._stop.is_set() and not any(link.down for link in links):
            wait = min(self.pending.next_deadline - time.monotonic(), poll)
            ready = select.select(fds, [], [], max(wait, 0.0))[0]
            for link in relayed:
                if link.progress_fd in ready:
                    link.drain_progress()
            self.settle(reader, members)
            for link in links:
                link.say_alive()  # a long wait must not look like a dead writer (bridge.node.fencing)
            if binlog_fd in ready:
                return

    def drop(self) -> None:
        """The dump connection the requests came on closes: none can be answered."""
        self.counts.acks_skipped += self.pending.drop()
