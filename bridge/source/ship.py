"""The ship lane: the primary side's common case in one call (pure-Python twin of ``_ship.pyx``).

Once the binlog dump runs, its packets are read through a ``DumpReader``
(bridge.source.dumpreader: PyMySQL's buffered file replaced, the same ``read``/``peek``,
and a buffer the lane reads too).
``ShipLane.run`` then loops without returning to the node: the common transactions
whole in that buffer (``hotpath.place_run``'s kind: a MariaDB GTID that is not
standalone or MySQL's GTID and BEGIN, TABLE_MAP and row events, the XID) are framed into the producer's mirror,
copied into the replica's ring and published: over shm stored into the shared ring (the
doorbell rung when the replica side sleeps on it), over tcp sent as the transport's WRITE
and PUBLISH messages (bridge.wire.placement) in one send; while the buffer ends inside such a transaction, or is
empty, it waits for the dump socket (poll, the GIL released in the compiled lane). It
returns after ``wait_ms`` with nothing to read, or at the first bytes that are not its
kind (the general path reads them: DDL, a statement, a transaction to chunk, the
server's heartbeat or rotate events, a full ring, the end of the stream or an error,
which the general path meets and names), having published what it placed.

Over rdma (``verbs``: the transport's queue pair, bridge.transport.verbs) the frames go into
the transport's registered mirror (``remote``), as over shm into the shared ring, their
RDMA WRITEs queued; a publish posts them with the header's and waits for its completion
(the replica's memory holds them then: its own confirmation, as shm's stores are), and
wakes the replica side where it sleeps.

Fan-out (bridge.node.fanout): ``rings`` names further rings of the first one's kind
(shm rings, tcp data connections, or rdma queue pairs), each with its own producer, fed the same
transactions in the same call (each framed into its own mirror with its own seqs,
published with the first). A transaction one of them has no space for is placed in the
others, handed back in ``owed`` (which ring, its packets, their first packet number) and
ends the call: the node queues it for that ring. A further ring whose doorbell or
connection fails (its replica side is gone) is named in ``gone`` and fed no more in the
call; the first ring's failure raises, as without fan-out.

Semi-sync ``received`` (``ack_file``): a transaction whose event asks for an ACK is
published at once; over shm the stores are the confirmation and the ACK goes on the dump
connection then; over tcp the PUBLISH asks the replica side for its answer (ANSWER,
bridge.wire.placement), and the lane waits for it, as a native replica's I/O thread
waits for its relay log, at most until the primary stops waiting (``ack_wait_us``) or the
run's end: the answer covering the transaction sends the ACK; one not here by then is
handed back (``asked``: the request; ``reply``: the answer's bytes already read), and the
node's general path waits for it and acknowledges or skips it (bridge.node.acking).
With further rings the ACK goes once ``quorum`` rings hold the transaction (over tcp:
once that many answered that they do); when fewer do by then (one had no space, one is
gone, one is slow) it is handed back the same way. Over tcp each connection's answers
asked for and not read yet are the caller's between runs: ``answers_in`` gives the lane
those its transport asked for, ``answers_out`` takes back those the lane asked for.

It runs over shm, tcp (not TLS) and rdma, in binlog apply mode (and in relay apply mode
without semi-sync: ``run``'s ``file``, each transaction framed whole in the verbatim
payload), over a dump connection without TLS (``bridge.node.primary`` decides). Both twins keep the
producer's bookkeeping (head, used, next seq, the entries ``unacked`` resends) as
``RingProducer.place_run`` does, so a lost link resends from the ring as always.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import time

from bridge.errors import RdmaError, TransportError
from bridge.ring.layout import consumer_waiting, write_publish
from bridge.source.dumpreader import BLOCKED, DUMP_BUFFER, PEEK_BYTES, DumpReader
from bridge.wire import binlog, hotpath, placement

BATCHES = 256  # publishes (ACKs) a run keeps apart for the "place" ("ack") stage (the last one takes the rest)
RUN_TXNS = 64  # transactions placed between two publishes at most
PLACE_TIMEOUT_S = 10.0  # rdma: how long a publish waits for the completion of its frames' write
MAX_RINGS = 7  # further rings one lane feeds at most (fan-out)
# why run() returned: nothing to read for wait_ms; bytes that are not the lane's (the general path reads them)
IDLE, NOT_MINE = 0, 1
# the names both twins have (the dump's reader and its constants from bridge.source.dumpreader)
__all__ = ["BATCHES", "DUMP_BUFFER", "IDLE", "MAX_RINGS", "NOT_MINE", "PEEK_BYTES", "RUN_TXNS", "DumpReader",
           "ShipLane"]


class _Link:
    """A tcp ring's data connection as the lane sees it: the messages not sent yet, the
    answers asked for and not read (``asked``, the last asked with ``asked_seq`` published;
    ``reply``: the next one's bytes read so far) and the replica side's last answer."""

    __slots__ = ("sock", "out", "asked", "asked_seq", "reply", "placed", "applied")

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.out, self.reply = sock, bytearray(), bytearray()
        self.asked = self.asked_seq = self.placed = self.applied = 0


class ShipLane:
    """The common case of one session: the dump's reader, the ring producer, and where
    the frames go: the replica's shared-memory ring (``remote``, a writable view) and its
    doorbell (-1: none), or the tcp transport's data socket (``sock``, each send bounded by
    its timeout as ``sendall``'s), or the rdma transport's mirror and queue pair (``verbs``).
    ``rings``: further rings of the same kind, each (producer, shared ring or mirror or None,
    doorbell fd or -1, data socket or None, queue pair or None). ``counts``
    (the node's PrimaryCounts) learns each publish as it happens: transactions and
    heartbeats shipped, taken whole, ACKs sent."""

    def __init__(self, reader: DumpReader, producer, remote, doorbell: int, heartbeat: tuple[str, str],
                 max_bytes: int, sock: socket.socket | None = None, counts=None, rings=(), verbs=None) -> None:
        self.reader, self.producer, self.remote, self.doorbell, self.verbs = reader, producer, remote, doorbell, verbs
        self.rings = tuple(rings)
        if len(self.rings) > MAX_RINGS or any(len(ring) != 5 or (ring[3] is None) != (sock is None) or
                                              (ring[4] is None) != (verbs is None) for ring in self.rings):
            raise ValueError(f"ship lane: further rings of the first one's kind (shm, tcp or rdma), {MAX_RINGS} "
                             "at most")
        self.owed: list[tuple[int, bytes, int]] = []  # (ring, packets, first packet number) it had no space for
        self.gone: list[int] = []  # further rings whose doorbell or connection failed (the replica side is gone)
        self.sock, self.counts = sock, counts
        self.links = [_Link(s) for s in (sock, *(ring[3] for ring in self.rings))] if sock is not None else []
        self.heartbeat, self.max_bytes = heartbeat, max_bytes
        self.seq_id = 0  # the next packet's number, after a run
        self.frames = self.heartbeats = self.commit_position = 0  # of the last run
        self.gtid = ""  # the last transaction placed
        self.acks = 0  # semi-sync ACKs the last run sent
        self.ack_error = 0  # the errno that stopped an ACK's send, or 0
        self.asked: tuple[int, int, int] | None = None  # (seq, ACK position, monotonic ns) handed back unacknowledged
        self.quorum = 1  # fan-out semi-sync: rings that must hold a transaction for its ACK (--semi-sync-quorum)
        self.gil_waits = self.gil_wait_max_ns = 0  # the compiled lane's waits for the interpreter lock (none here)
        self._batches: list[list[int]] = []  # per publish: [µs from its first transaction placed, transactions]
        self._acks_us: list[list[int]] = []  # per ACK sent: [µs from its transaction placed, ACKs]
        self._pending: dict[int, int] = {}  # rdma: rings (0: the first) whose last publish (seq) has not completed
        self.why = IDLE

    @property
    def reply(self) -> bytes:
        """tcp: the bytes of the first ring's next answer read so far."""
        return bytes(self.links[0].reply)

    @property
    def placed(self) -> int:
        """tcp: the first ring's last answer (TcpRemoteRing.placed)."""
        return self.links[0].placed

    @property
    def applied(self) -> int:
        return self.links[0].applied

    def answers_in(self, k: int, asked: int, partial: bytes, asked_seq: int) -> None:
        """tcp ring ``k`` (0: the first): answers its transport asked for and has not read
        (``partial``: the next one's bytes read so far), read by the lane from now on."""
        link = self.links[k]
        link.asked, link.asked_seq = link.asked + asked, max(link.asked_seq, asked_seq)
        link.reply[:0] = partial

    def answers_out(self, k: int) -> tuple[int, bytes, int, int, int]:
        """tcp ring ``k``: (answers asked for and not read, the next one's bytes read so far,
        the seq the last was asked with, the replica side's last answer: placed, applied);
        the ones not read are the caller's to read from now on."""
        link = self.links[k]
        out = (link.asked, bytes(link.reply), link.asked_seq, link.placed, link.applied)
        link.asked = 0
        link.reply.clear()
        return out

    def run(self, seq_id: int, wait_ms: int, ack_file: bytes | None = None, ack_wait_us: int = 0,
            file: bytes | None = None) -> int:
        """Transactions placed and published (see the module's docstring); ``why``
        says why it returned. ``ack_file``: the binlog file being read, where the
        dump's packets carry semi-sync headers and the placement is what an ACK may
        claim (``received``); ``ack_wait_us``: how long the primary waits for one.
        ``file`` (relay apply mode): the binlog file being read, each transaction framed
        whole as the primary wrote it, in the verbatim payload naming it."""
        if file is not None and (type(file) is not bytes or len(file) > 255):
            raise ValueError(f"ship lane: a binlog file name of 255 bytes at most, not {file!r}")
        reader, producer, semi_sync, links = self.reader, self.producer, ack_file is not None, self.links
        self.frames = self.heartbeats = self.acks = self.ack_error = 0
        self._batches, self._acks_us, self.owed, self.gone, self.asked = [], [], [], [], None
        deadline = time.monotonic_ns() + wait_ms * 1_000_000
        pending, whole_ns, batch_n, batch_hb, ack, ack_ns = False, 0, 0, 0, -1, 0
        try:
            while True:
                with memoryview(reader.buf) as view:
                    buffered = view[reader.start:reader.end]
                    run = producer.place_run(buffered, seq_id, semi_sync, self.max_bytes, self.heartbeat, 1, file) \
                        if buffered else None
                    if run is None:
                        more = hotpath.scan_wants_more(buffered, seq_id, semi_sync, self.max_bytes)
                    else:
                        for i, (other, ring, _, _, qp) in enumerate(self.rings):
                            if i in self.gone:
                                continue
                            placed = other.place_run(buffered[:run.taken], seq_id, semi_sync, self.max_bytes,
                                                     self.heartbeat, 1, file)
                            if placed is None:
                                self.owed.append((i, bytes(buffered[:run.taken]), seq_id))
                                continue
                            try:
                                self._copy(placed.placements, other, ring, links[i + 1] if links else None, qp)
                            except TransportError:  # rdma: posting a full chain failed
                                self._lose(i)
                    del buffered
                if run is not None:
                    whole_ns = whole_ns or time.monotonic_ns()
                    self._copy(run.placements, producer, self.remote, links[0] if links else None, self.verbs)
                    reader.start += run.taken
                    seq_id = run.seq_id
                    self.frames += 1
                    batch_n += 1
                    batch_hb += run.heartbeats
                    self.heartbeats += run.heartbeats
                    self.gtid, self.commit_position, ack = run.gtid, run.commit_position, run.ack
                    pending = True
                    if ack >= 0:
                        ack_ns = time.monotonic_ns()  # the "ack" stage starts: placed in the mirror
                    if ack < 0 and self.frames % RUN_TXNS and not self.owed:
                        continue
                if pending:
                    self._publish(producer.write_seq, producer.head, ack >= 0)
                    self._keep(self._batches, time.monotonic_ns() - whole_ns, batch_n)
                    if self.counts is not None:  # live: status and metrics see them as they happen
                        self._count(batch_n, batch_hb)
                    pending, whole_ns, batch_n, batch_hb = False, 0, 0, 0
                    if ack >= 0:
                        asked_ns = time.monotonic_ns()
                        holding = self._holding()
                        if len(holding) < self.quorum or links and \
                                not self._answered(min(asked_ns + ack_wait_us * 1000, deadline), holding):
                            self.asked = (producer.write_seq, ack, asked_ns)  # the general path waits for it
                            self.why = NOT_MINE
                            break
                        # the quorum's replica sides hold it: what semi-sync `received` promises
                        self.ack_error = self._send_ack(ack, ack_file)
                        ack = -1
                        if self.ack_error:
                            self.why = NOT_MINE  # the general path meets the broken dump connection
                            break
                        self.acks += 1
                        self._keep(self._acks_us, time.monotonic_ns() - ack_ns, 1)
                if self.owed:
                    self.why = NOT_MINE  # the node queues what a further ring had no space for
                    break
                if run is not None:
                    if time.monotonic_ns() >= deadline:  # a steady stream: back to the node every wait_ms all the same
                        self.why = IDLE
                        break
                    continue
                if not more or reader.buffered == len(reader.buf):
                    self.why = NOT_MINE  # not the lane's kind, a full ring, or longer than the buffer
                    break
                left_ms = (deadline - time.monotonic_ns()) // 1_000_000
                if left_ms <= 0 or not select.select([reader.fd], [], [], left_ms / 1000)[0]:
                    self.why = IDLE
                    break
                if not self._receive():
                    self.why = NOT_MINE  # the end of the stream or an error: the general path meets it
                    break
        finally:
            self.seq_id = seq_id  # the packets read are read, whatever ends the run
            for link in links:
                link.out.clear()  # what a failure left unsent: the ring's resend covers it
        return self.frames

    @staticmethod
    def _copy(placements, producer, ring, link: _Link | None, qp=None) -> None:
        """Framed spans from ``producer``'s mirror: into the shared ring, as WRITE messages
        queued on the link, or into the registered mirror with their RDMA WRITEs queued
        (a TransportError where posting a full chain failed)."""
        for p in placements:
            span = producer.region[p.offset:p.offset + p.length]
            if link is not None:
                link.out += placement.encode_write(p.offset, span)
                continue
            ring[p.offset:p.offset + p.length] = span
            if qp is not None:
                qp.place(p.offset, p.length)

    def _count(self, n: int, heartbeats: int) -> None:
        counts = self.counts
        counts.transactions_shipped += n - heartbeats
        counts.heartbeats_shipped += heartbeats
        counts.taken_whole += n

    def record_stages(self, stages) -> None:
        """The last run's "place" stage (per publish, its transactions at its first one's
        time) and "ack" stage (per ACK sent, from its transaction placed in the mirror: over
        tcp the replica sides' answers, over shm the publish)."""
        for micros, n in self._batches:
            stages.record("place", micros, n)
        for micros, n in self._acks_us:
            stages.record("ack", micros, n)

    @staticmethod
    def _keep(kept: list[list[int]], elapsed_ns: int, n: int) -> None:
        micros = min(elapsed_ns // 1000, 0xFFFFFFFF)
        if len(kept) == BATCHES:  # more than a run keeps apart: the last one takes the rest
            last = kept[-1]
            last[0], last[1] = max(last[0], micros), last[1] + n
        else:
            kept.append([micros, n])

    def _send_ack(self, position: int, log_file: bytes) -> int:
        """The semi-sync ACK on the dump connection (BinlogReader.send_ack): 0 or an errno.
        Counted before it goes (once it is out, the primary's commit may return)."""
        if len(log_file) > 512:
            return errno.EINVAL
        if self.counts is not None:
            self.counts.acks_sent += 1
        try:
            self.reader.sock.sendall(binlog.semi_sync_ack(position, log_file))
        except OSError as exc:
            if self.counts is not None:
                self.counts.acks_sent -= 1  # it did not go
            return exc.errno or errno.EIO
        return 0

    def _holding(self) -> list[int]:
        """The rings (0: the first) that hold the transaction just published: not a further
        ring that had no space for it, or whose replica side is gone."""
        missing = {i for i, _, _ in self.owed} | set(self.gone) | {k - 1 for k in self._pending}
        return [0] + [i + 1 for i in range(len(self.rings)) if i not in missing]

    def _answered(self, until_ns: int, holding: list[int]) -> bool:
        """tcp: wait until ``until_ns`` at most for ``quorum`` of the ``holding`` rings to
        answer that they hold what was just published; True once they have, False when the
        time ran out first (the answers not read stay asked for, the bytes read so far in
        each link's ``reply``). A further ring that fails meanwhile is gone."""
        want = {k: (self.producer if k == 0 else self.rings[k - 1][0]).write_seq for k in holding}
        while True:
            live = [k for k in holding if k == 0 or k - 1 not in self.gone]
            if sum(self.links[k].placed >= want[k] for k in live) >= self.quorum:
                return True
            waiting = {self.links[k].sock: k for k in live if self.links[k].placed < want[k] and self.links[k].asked}
            left_s = (until_ns - time.monotonic_ns()) / 1e9
            if left_s <= 0 or not waiting:
                return False
            for sock in select.select(list(waiting), [], [], left_s)[0]:
                self._take_answer(waiting[sock])

    def _take_answer(self, k: int) -> None:
        """The bytes of ring ``k``'s next answer the socket holds (one whole answer at most):
        the first ring's failure raises, a further one's makes it gone."""
        link, size = self.links[k], placement.REPLY.size
        try:
            try:
                data = link.sock.recv(size - len(link.reply), socket.MSG_DONTWAIT)
            except BLOCKED:
                return
            except OSError as exc:
                raise TransportError(f"tcp transport: recv: {exc.strerror or exc}") from exc
            if not data:
                raise TransportError("tcp transport: the replica side closed the data connection with an answer "
                                     "outstanding")
            link.reply += data
            if len(link.reply) < size:
                return
            placed, applied = placement.REPLY.unpack(link.reply)
            link.reply.clear()
            link.asked -= 1
            link.placed, link.applied = max(link.placed, placed), max(link.applied, applied)
            if not link.asked and link.placed < link.asked_seq:
                raise TransportError(f"tcp transport: the replica side answered that its ring holds seq "
                                     f"{link.placed}, after seq {link.asked_seq} was published")
        except TransportError:
            if k == 0:
                raise
            self._lose(k - 1)

    def _lose(self, i: int) -> None:
        if i not in self.gone:
            self.gone.append(i)

    def _receive(self) -> bool:
        """Bytes the dump socket holds into the buffer, without waiting; False at the end of the
        stream or on an error."""
        try:
            return self.reader.fill(wait=False) != 0
        except OSError:
            return False

    def _publish(self, write_seq: int, head: int, confirm: bool = False) -> None:
        """Every ring published: the first ring's failure raises once the others are (a
        further one's makes it gone)."""
        first = None
        targets = ((self.remote, write_seq, head, self.doorbell, self.verbs),
                   *((r, p.write_seq, p.head, b, qp) for p, r, b, _, qp in self.rings))
        for i, (ring, seq, at, bell, qp) in enumerate(targets):
            if i and i - 1 in self.gone:
                continue
            if self.links:
                failure = self._send_publish(self.links[i], seq, at, confirm)
            elif qp is not None:
                failure = self._post_publish(qp, seq, at)
                self._pending[i] = seq
            else:
                failure = self._store_publish(ring, seq, at, bell)
            if failure is not None and i:
                self._lose(i - 1)
            elif failure is not None:
                first = failure
        if first is None and self.verbs is not None:
            first = self._settle_writes(self.quorum if confirm else 1)
        if first is not None:
            raise first

    def _settle_writes(self, need: int) -> TransportError | None:
        """rdma: the rings' completions polled in turn until the first ring and ``need`` rings
        in all hold what they published (a semi-sync ACK's quorum; else the first alone),
        each woken as its completion arrives where its replica side sleeps: the first ring's
        failure, or None; a further ring that fails is gone, one that is slow stays pending."""
        qps = (self.verbs, *(qp for *_, qp in self.rings))
        deadline = time.monotonic() + PLACE_TIMEOUT_S
        while True:
            for i, seq in list(self._pending.items()):
                try:
                    if qps[i].reap():
                        del self._pending[i]
                        qps[i].wake(seq)
                except TransportError as failure:
                    if i == 0:
                        return failure
                    self._pending.pop(i, None)
                    self._lose(i - 1)
            live = 1 + len(self.rings) - len(self.gone)
            if 0 not in self._pending and (live - len(self._pending) >= need or live < need):
                return None  # held, or a quorum no longer possible (the ACK is handed back)
            if time.monotonic() >= deadline:
                return RdmaError.timed_out(PLACE_TIMEOUT_S) if 0 in self._pending else None
            time.sleep(0)

    @staticmethod
    def _post_publish(qp, write_seq: int, head: int) -> TransportError | None:
        """rdma: the header's write posted after the frames' (RdmaRemoteRing.publish's first half)."""
        try:
            qp.post_publish(write_seq, head)
        except TransportError as exc:
            return exc
        return None

    @staticmethod
    def _send_publish(link: _Link, write_seq: int, head: int, confirm: bool) -> TransportError | None:
        """tcp: the WRITE messages and a PUBLISH in one send (TcpRemoteRing.publish),
        ``confirm``: one that asks for the answer."""
        link.out += placement.encode_publish(write_seq, head, answer=confirm)
        try:
            link.sock.sendall(link.out)
        except OSError as exc:
            return TransportError(f"tcp transport: send: {exc.strerror or exc}")
        finally:
            link.out.clear()
        if confirm:
            link.asked, link.asked_seq = link.asked + 1, write_seq
        return None

    @staticmethod
    def _store_publish(ring, write_seq: int, head: int, bell: int) -> TransportError | None:
        """shm: the new head and write_seq in the ring's header (after the frames), then the
        doorbell when the replica side sleeps on it (ShmRemoteRing.publish)."""
        write_publish(ring, write_seq, head)
        if bell >= 0 and consumer_waiting(ring):
            try:
                os.write(bell, b"\x01")
            except BlockingIOError:
                pass  # a full FIFO already holds wakeups the replica side has not read
            except OSError as exc:  # EPIPE: the replica process is gone
                return TransportError(f"ring the replica's doorbell: {exc.strerror or exc}")
        return None
