# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.source.ship`` (read its docstring): the ship lane, the same
names, the same results. Its loop (scan the buffered packets, frame into each ring's
mirror, copy into the replica's ring or queue it on the tcp link, publish, ring the
doorbell, settle a semi-sync ACK, wait for the dump socket) runs in C and waits with the
GIL released. What it is made of lives beside the twins it shares: the dump's reader
(bridge/source/_dumpreader.pyx), the scan and the framing (bridge/wire/_frames.pyx), the
tcp link (bridge/transport/_sender.pyx).
"""

import os

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_DecodeUTF8
from libc.errno cimport EINTR, errno
from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memset

from bridge.errors import TransportError
from bridge.source import ship as _twin
from bridge.source._dumpreader import DumpReader
from bridge.wire.frame import FrameKind

from bridge.source._dumpreader cimport DumpReader as Reader
from bridge.source.rings_c cimport ring_advance, ring_copy, rings_publish
from bridge.transport._sender cimport Link, link_error, publish, queue_span, take_answer
from bridge.transport.posix_io cimport POLLIN, poll, pollfd
from bridge.transport.verbs_c cimport bv_path, verbs_error
from bridge.wire._frames cimport (GTID_TEXT, SCAN_MORE, SCAN_NO, SCAN_WHOLE, Scanned, is_heartbeat, payload_len,
                                  place_scanned, scan_one)
from bridge.wire.layouts cimport DATA_OFFSET
from bridge.wire.native_c cimport CLOCK_MONOTONIC, now_ns

DUMP_BUFFER, PEEK_BYTES, PLACE_TIMEOUT_S = _twin.DUMP_BUFFER, _twin.PEEK_BYTES, _twin.PLACE_TIMEOUT_S
RUN_TXNS, BATCHES, IDLE, NOT_MINE, MAX_RINGS = _twin.RUN_TXNS, _twin.BATCHES, _twin.IDLE, _twin.NOT_MINE, \
    _twin.MAX_RINGS
__all__ = ["BATCHES", "DUMP_BUFFER", "IDLE", "MAX_RINGS", "NOT_MINE", "PEEK_BYTES", "RUN_TXNS", "DumpReader",
           "ShipLane"]  # the twin's names

if (C_RUN_TXNS, C_BATCHES, C_IDLE, C_NOT_MINE, C_MAX_RINGS) != (RUN_TXNS, BATCHES, IDLE, NOT_MINE, MAX_RINGS):
    raise ImportError("bridge.source._ship was built from constants its twin no longer has; rebuild it")


cdef inline void _keep(uint32_t *us_of, uint32_t *n_of, int *kept, uint64_t elapsed_ns, Py_ssize_t n) noexcept nogil:
    """One more (µs, count) of a run's stage samples (ShipLane._keep): over C_BATCHES the last takes the rest."""
    cdef uint64_t micros = elapsed_ns // 1000
    cdef uint32_t us = 0xFFFFFFFFu
    if micros < us:
        us = <uint32_t>micros
    if kept[0] == C_BATCHES:
        if us > us_of[C_BATCHES - 1]:
            us_of[C_BATCHES - 1] = us
        n_of[C_BATCHES - 1] += n
        return
    us_of[kept[0]], n_of[kept[0]] = us, n
    kept[0] += 1


cdef class ShipLane:
    def __init__(self, Reader reader, producer, remote, int doorbell, heartbeat, Py_ssize_t max_bytes,
                 sock=None, counts=None, rings=(), verbs=None):
        cdef int k
        self.reader, self.producer, self.remote, self.doorbell, self.verbs = reader, producer, remote, doorbell, verbs
        self.rings = tuple(rings)
        if len(self.rings) > C_MAX_RINGS or any(len(ring) != 5 or (ring[3] is None) != (sock is None) or
                                                (ring[4] is None) != (verbs is None) for ring in self.rings):
            raise ValueError(f"ship lane: further rings of the first one's kind (shm, tcp or rdma), {C_MAX_RINGS} "
                             "at most")
        if verbs is not None and any(qp.lane_path is None for qp in (verbs, *(ring[4] for ring in self.rings))):
            raise ValueError("ship lane: an rdma ring's queue pair is pyverbs' (the compiled lane posts on the "
                             "compiled queue pair only)")
        self.owed, self.gone = [], []
        self.counts = counts
        self.sock = sock
        self.n_links = 0
        if sock is not None:
            for k, s in enumerate((sock, *(ring[3] for ring in self.rings))):
                self.links[k].fd = s.fileno()
            self.n_links = 1 + len(self.rings)
        timeout = sock.gettimeout() if sock is not None else None
        self.send_timeout_ms = -1 if timeout is None else int(timeout * 1000)
        self.heartbeat, self.max_bytes = heartbeat, max_bytes
        self.hb_schema, self.hb_table = PyUnicode_AsUTF8String(heartbeat[0]), PyUnicode_AsUTF8String(heartbeat[1])
        self.seq_id = 0
        self.frames = self.heartbeats = self.commit_position = 0
        self.gtid = ""
        self.batches = self.ack_kept = 0
        self.acks = self.ack_error = 0
        self.asked, self.quorum = None, 1
        self.gil_waits, self.gil_wait_max_ns = 0, 0
        self.why = C_IDLE

    def __dealloc__(self):
        cdef int k
        for k in range(C_MAX_RINGS + 1):
            free(self.links[k].out)

    @property
    def reply(self):
        return PyBytes_FromStringAndSize(<char *>self.links[0].reply, self.links[0].reply_len)

    @property
    def placed(self):
        return self.links[0].placed

    @property
    def applied(self):
        return self.links[0].applied

    def answers_in(self, int k, int asked, partial, unsigned long long asked_seq):
        cdef Link *link = self._link(k)
        data = bytes(partial) + PyBytes_FromStringAndSize(<char *>link.reply, link.reply_len)
        if len(data) >= sizeof(link.reply):
            raise ValueError(f"ship lane: {len(data)} bytes of an answer not taken whole")
        memcpy(link.reply, PyBytes_AS_STRING(data), len(data))
        link.reply_len, link.asked = len(data), link.asked + asked
        if asked_seq > link.asked_seq:
            link.asked_seq = asked_seq

    def answers_out(self, int k):
        cdef Link *link = self._link(k)
        out = (link.asked, PyBytes_FromStringAndSize(<char *>link.reply, link.reply_len), link.asked_seq, link.placed,
               link.applied)
        link.asked = link.reply_len = 0
        return out

    cdef Link *_link(self, int k) except NULL:
        if not 0 <= k < self.n_links:
            raise IndexError(f"ship lane: no tcp ring {k}")
        return &self.links[k]

    def record_stages(self, stages):
        """The last run's "place" stage (per publish, its transactions at its first one's
        time) and "ack" stage (per ACK sent, from its transaction placed in the mirror)."""
        cdef int i
        for i in range(self.batches):
            stages.record("place", self.batch_us[i], self.batch_n[i])
        for i in range(self.ack_kept):
            stages.record("ack", self.ack_us[i], self.ack_n[i])

    # --- one run ----------------------------------------------------------------------

    def run(self, int seq_id, int wait_ms, ack_file=None, long long ack_wait_us=0, file=None):
        cdef Reader rd = self.reader
        cdef Scanned s
        cdef Ring rings[C_MAX_RINGS + 1]
        cdef Py_buffer mirrors[C_MAX_RINGS + 1]
        cdef Py_buffer shared[C_MAX_RINGS + 1]
        cdef int n_rings = 1 + len(self.rings), opened = 0, scan, k, bell_err = 0, send_err = 0
        cdef uint64_t whole_ns = 0, ack_ns = 0, deadline = now_ns(CLOCK_MONOTONIC) + <uint64_t>wait_ms * 1000000
        cdef uint8_t sid = seq_id
        cdef bint tcp = self.n_links > 0, semi_sync = ack_file is not None, pending = False
        cdef long long ack_pos = -1
        cdef Py_ssize_t batch_n = 0, batch_hb = 0, last_len = 0
        cdef char last[GTID_TEXT]
        if file is not None and (type(file) is not bytes or len(file) > 255):
            raise ValueError(f"ship lane: a binlog file name of 255 bytes at most, not {file!r}")
        memset(rings, 0, sizeof(rings))
        entries = [[] for _ in range(n_rings)]  # per ring: what the run placed, for its producer's bookkeeping
        self.owed, self.gone, self.asked = [], [], None
        self.frames = self.heartbeats = self.batches = self.ack_kept = self.acks = self.ack_error = 0
        try:
            while opened < n_rings:
                self._open(&rings[opened], opened, &mirrors[opened], &shared[opened])
                opened += 1
            while True:
                scan = scan_one(rd.buf + rd.start, rd.end - rd.start, sid, semi_sync, self.max_bytes, file is not None,
                                &s) if rd.end > rd.start else SCAN_MORE
                if scan == SCAN_WHOLE:
                    if file is not None:
                        s.file, s.file_len = PyBytes_AS_STRING(file), len(<bytes>file)
                    if not self._place(rings, n_rings, rd.buf + rd.start, &s, sid, entries):
                        scan = SCAN_NO  # a full ring or over half of it: the general path waits for space
                    else:
                        if not whole_ns:
                            whole_ns = now_ns(CLOCK_MONOTONIC)
                        if is_heartbeat(rd.buf + rd.start, &s, self.hb_schema, self.hb_table):
                            self.heartbeats += 1
                            batch_hb += 1
                        rd.start += s.taken
                        sid = s.seq_id
                        self.commit_position = s.position
                        memcpy(last, s.gtid, s.gtid_len)
                        last_len = s.gtid_len
                        self.frames += 1
                        batch_n += 1
                        pending = True
                        if s.ack >= 0:
                            ack_pos = s.ack  # published at once, then acknowledged
                            ack_ns = now_ns(CLOCK_MONOTONIC)  # the "ack" stage starts: placed in the mirror
                        elif self.frames % C_RUN_TXNS and not self.owed:
                            continue
                if pending:
                    if tcp:  # each ring's WRITE messages and a PUBLISH in one send
                        send_err = self._send_publish(rings, n_rings, ack_pos >= 0)
                        if send_err:
                            break
                    else:
                        bell_err = self._store_publishes(rings, n_rings, self.quorum if ack_pos >= 0 else 1)
                    _keep(self.batch_us, self.batch_n, &self.batches, now_ns(CLOCK_MONOTONIC) - whole_ns, batch_n)
                    if self.counts is not None:  # live: status and metrics see them as they happen
                        self._count(batch_n, batch_hb)
                    pending, whole_ns, batch_n, batch_hb = False, 0, 0, 0
                    if bell_err:
                        break
                    if ack_pos >= 0:
                        if not self._settle_ack(rings, n_rings, ack_pos, ack_ns, deadline, ack_wait_us, ack_file):
                            break
                        ack_pos = -1
                if self.owed:
                    self.why = C_NOT_MINE  # the node queues what a further ring had no space for
                    break
                if scan == SCAN_WHOLE:
                    if now_ns(CLOCK_MONOTONIC) >= deadline:  # a steady stream: back to the node every wait_ms
                        self.why = C_IDLE
                        break
                    continue
                if scan == SCAN_NO or rd.end - rd.start == rd.cap:
                    self.why = C_NOT_MINE
                    break
                if not self._wait_dump(rd, deadline):
                    break
        finally:
            for k in range(opened):
                PyBuffer_Release(&shared[k])
                PyBuffer_Release(&mirrors[k])
            if entries[0]:
                self.producer.placed(entries[0], rings[0].head)
                self.gtid = PyUnicode_DecodeUTF8(last, last_len, NULL)
            for k in range(1, opened):
                if entries[k]:
                    self.rings[k - 1][0].placed(entries[k], rings[k].head)
            self.seq_id = sid
            for k in range(self.n_links):
                self.links[k].out_len = 0  # what a failure left unsent: the ring's resend covers it
        if bell_err and rings[0].verbs != NULL:
            raise verbs_error(rings[0].verbs, bell_err, PLACE_TIMEOUT_S)
        if bell_err:
            raise TransportError(f"ring the replica's doorbell: {os.strerror(bell_err)}")
        if send_err:
            raise TransportError(f"tcp transport: send: {os.strerror(send_err)}")
        return self.frames

    cdef int _open(self, Ring *ring, int k, Py_buffer *mirror, Py_buffer *shared) except -1:
        """Ring ``k`` (0: the first) as its producer stands: both its buffers taken (over tcp
        the mirror stands in for the shared ring, which the link carries the frames to)."""
        producer, remote, bell = (self.producer, self.remote, self.doorbell) if k == 0 else self.rings[k - 1][:3]
        qp = self.verbs if k == 0 else self.rings[k - 1][4]
        PyObject_GetBuffer(producer.region, mirror, PyBUF_WRITABLE)
        try:
            PyObject_GetBuffer(remote if self.n_links == 0 else producer.region, shared, PyBUF_WRITABLE)
        except BaseException:
            PyBuffer_Release(mirror)
            raise
        try:
            ring.size, ring.head = producer.size, producer.head
            ring.room, ring.seq, ring.epoch, ring.bell = producer.size - producer.used, producer.next_seq, \
                producer.epoch & 0xFFFFFFFF, bell
            if mirror.len != shared.len or mirror.len != DATA_OFFSET + ring.size:
                raise ValueError(f"ship lane: a {'further ' if k else ''}mirror of {mirror.len} bytes and a ring of "
                                 f"{shared.len} for a {ring.size}-byte data area")
        except BaseException:
            PyBuffer_Release(shared)
            PyBuffer_Release(mirror)
            raise
        ring.mirror, ring.shared = <uint8_t *>mirror.buf + DATA_OFFSET, <uint8_t *>shared.buf
        ring.verbs = <bv_path *><uintptr_t>qp.lane_path if qp is not None else NULL
        return 0

    cdef bint _place(self, Ring *rings, int n_rings, const uint8_t *b, Scanned *s, uint8_t sid, list entries) except -1:
        """The transaction ``s`` framed into the first ring and copied to the replica's (shm)
        or queued on its link (tcp); False, nothing written anywhere, when it has no space.
        Then (fan-out) into each further ring the same way: one that has no space for it
        owes it (handed back in ``owed``), one found dead is left out."""
        cdef int k
        if not self._place_in(&rings[0], 0, b, s, entries[0]):
            return False
        for k in range(1, n_rings):
            if rings[k].dead:
                continue
            if not self._place_in(&rings[k], k, b, s, entries[k]):
                rings[k].owes = 1
                self.owed.append((k - 1, PyBytes_FromStringAndSize(<char *>b, s.taken), sid))
        return True

    cdef bint _place_in(self, Ring *ring, int k, const uint8_t *b, Scanned *s, list placed) except -1:
        cdef Py_ssize_t frame_at = ring.head
        cdef Py_ssize_t used = place_scanned(ring.mirror, ring.size, &frame_at, ring.room, ring.seq, ring.epoch, b, s)
        cdef int err
        if not used:
            return False
        if self.n_links:
            queue_span(&self.links[k], ring.mirror, ring.size, ring.head, used, frame_at < ring.head)
        else:
            err = ring_copy(ring, used, frame_at < ring.head)
            if err and k == 0:
                raise verbs_error(ring.verbs, err, PLACE_TIMEOUT_S)
            if err:
                ring.dead, ring.fail = 1, err
        placed.append((ring.seq, used, DATA_OFFSET + frame_at, payload_len(s), FrameKind.TXN, 0))
        ring_advance(ring, used)
        return True

    cdef int _send_publish(self, Ring *rings, int n_rings, bint answer) except? -3:
        """tcp: every live ring's queued WRITE messages and its PUBLISH (asking for the answer
        a semi-sync ACK waits on) in one send each: 0, or the errno of the first ring's send
        (a further ring whose send fails is dead)."""
        cdef int k, err, first = 0
        for k in range(n_rings):
            if rings[k].dead:
                continue
            err = publish(&self.links[k], rings[k].seq - 1, rings[k].head, answer, self.send_timeout_ms)
            if err and k == 0:
                first = err
            elif err:
                rings[k].dead, rings[k].fail = 1, err
        self._note_gone(rings, n_rings)
        return first

    cdef int _store_publishes(self, Ring *rings, int n_rings, int need):
        """shm and rdma: ``rings_publish`` (bridge/source/rings_c.pxd), the GIL released; the
        further rings it found dead named in ``gone``."""
        cdef int first
        cdef uint64_t timeout_ns = <uint64_t>(PLACE_TIMEOUT_S * 1e9)
        with nogil:
            first = rings_publish(rings, n_rings, need, timeout_ns)
        self._note_gone(rings, n_rings)
        return first

    cdef void _count(self, Py_ssize_t n, Py_ssize_t heartbeats):
        counts = self.counts
        counts.transactions_shipped += n - heartbeats
        counts.heartbeats_shipped += heartbeats
        counts.taken_whole += n

    cdef void _note_gone(self, Ring *rings, int n_rings):
        """The further rings found dead, named in ``gone`` once each (by their place among the further ones)."""
        cdef int k
        for k in range(1, n_rings):
            if rings[k].dead and k - 1 not in self.gone:
                self.gone.append(k - 1)

    # --- semi-sync `received`: the ACK once the quorum's replica sides hold the transaction

    cdef bint _settle_ack(self, Ring *rings, int n_rings, long long ack_pos, uint64_t ack_ns, uint64_t deadline,
                          long long ack_wait_us, bytes ack_file) except -1:
        """The ACK the transaction just published asked for, sent once ``quorum`` rings hold
        it (shm: its stores; tcp: their answers, waited for until the primary stops waiting
        or the run's end): True; False (``why`` set) when it is handed back to the general
        path (``asked``) or its send failed (``ack_error``). The first ring's link failing
        meanwhile raises."""
        cdef int holding[C_MAX_RINGS + 1]  # the rings that hold the transaction an ACK is asked for
        cdef uint64_t want[C_MAX_RINGS + 1]  # ... and their seq of it
        cdef int k, n_holding = 0, answer
        cdef uint64_t asked_ns, until_ns, woke_ns
        for k in range(n_rings):
            want[k] = rings[k].seq - 1
            if k == 0 or not rings[k].dead and not rings[k].owes and not rings[k].pending:
                holding[n_holding] = k
                n_holding += 1
        asked_ns = now_ns(CLOCK_MONOTONIC)
        answer = n_holding >= self.quorum
        if answer and self.n_links:
            until_ns = min(asked_ns + <uint64_t>ack_wait_us * 1000, deadline)
            with nogil:
                answer = self._await_quorum(until_ns, want, holding, n_holding, rings)
                woke_ns = now_ns(CLOCK_MONOTONIC)
            self._gil_waited(woke_ns)
            self._note_gone(rings, n_rings)
            if answer < 0:
                raise link_error(&self.links[0], rings[0].fail)
        if not answer:
            self.asked = (rings[0].seq - 1, ack_pos, asked_ns)  # the general path waits for it
            self.why = C_NOT_MINE
            return False
        # the quorum's replica sides hold it: what semi-sync `received` promises
        self.ack_error = self._acknowledge(<uint64_t>ack_pos, ack_file)
        if self.ack_error:
            self.why = C_NOT_MINE  # the general path meets the broken dump connection
            return False
        self.acks += 1
        _keep(self.ack_us, self.ack_n, &self.ack_kept, now_ns(CLOCK_MONOTONIC) - ack_ns, 1)
        return True

    cdef int _await_quorum(self, uint64_t until_ns, const uint64_t *want, const int *holding, int n_holding,
                           Ring *rings) noexcept nogil:
        """tcp: wait until ``until_ns`` at most for ``quorum`` of the ``holding`` rings to
        answer that they hold ``want`` (their seq of what was just published): 1 once they
        have, 0 when the time ran out first (the answers not read stay asked for, the bytes
        read so far kept), -1 when the first ring failed (its ``fail``). A further ring that
        fails meanwhile is dead."""
        cdef pollfd waiters[C_MAX_RINGS + 1]
        cdef int which[C_MAX_RINGS + 1]
        cdef int j, k, confirmed, n_wait, ready, fail
        cdef uint64_t now
        while True:
            confirmed = n_wait = 0
            for j in range(n_holding):
                k = holding[j]
                if rings[k].dead:
                    continue
                if self.links[k].placed >= want[k]:
                    confirmed += 1
                elif self.links[k].asked > 0:
                    waiters[n_wait].fd, waiters[n_wait].events, waiters[n_wait].revents = self.links[k].fd, POLLIN, 0
                    which[n_wait] = k
                    n_wait += 1
            if confirmed >= self.quorum:
                return 1
            now = now_ns(CLOCK_MONOTONIC)
            if now >= until_ns or n_wait == 0:
                return 0
            ready = poll(waiters, n_wait, <int>((until_ns - now + 999999) // 1000000))
            if ready == 0:
                continue  # the clock decides (poll counts whole ms)
            if ready < 0:
                if errno == EINTR:
                    continue
                rings[0].fail = errno
                return -1
            for j in range(n_wait):
                if waiters[j].revents == 0:
                    continue
                k = which[j]
                fail = take_answer(&self.links[k])
                if fail:
                    rings[k].fail = fail
                    if k == 0:
                        return -1
                    rings[k].dead = 1

    cdef int _acknowledge(self, uint64_t position, bytes log_file):
        """The ACK sent (``_send_ack``), counted before it goes (once it is out, the
        primary's commit may return): 0 or an errno."""
        cdef int err
        if self.counts is not None:
            self.counts.acks_sent += 1
        err = self.reader.send_ack(position, PyBytes_AS_STRING(log_file), len(log_file))
        if err and self.counts is not None:
            self.counts.acks_sent -= 1  # it did not go
        return err

    # --- the dump socket ----------------------------------------------------------------

    cdef bint _wait_dump(self, Reader rd, uint64_t deadline) except -1:
        """Bytes for the buffer, waited for (the GIL released) until ``deadline``: True once
        some came; False (``why`` set) when none came in time, or at the end of the stream or
        an error, which the general path then meets."""
        cdef pollfd waiter
        cdef int got_poll, left_ms
        cdef uint64_t woke_ns, now
        rd.make_room()
        while True:
            now = now_ns(CLOCK_MONOTONIC)
            left_ms = <int>((deadline - now) // 1000000) if now < deadline else 0
            if left_ms <= 0:
                self.why = C_IDLE
                return False
            waiter.fd, waiter.events, waiter.revents = rd.fd, POLLIN, 0
            with nogil:
                got_poll = poll(&waiter, 1, left_ms)
                woke_ns = now_ns(CLOCK_MONOTONIC)
            self._gil_waited(woke_ns)
            if got_poll == 0:
                self.why = C_IDLE
                return False
            if got_poll > 0:
                break
            if errno != EINTR:
                self.why = C_NOT_MINE
                return False
            PyErr_CheckSignals()
        if rd.receive() < 0:
            self.why = C_NOT_MINE  # the end of the stream or an error: the general path meets it
            return False
        return True

    cdef void _gil_waited(self, uint64_t woke_ns) noexcept:
        cdef uint64_t waited = now_ns(CLOCK_MONOTONIC) - woke_ns
        if waited > 1000000:
            self.gil_waits += 1
        if waited > self.gil_wait_max_ns:
            self.gil_wait_max_ns = waited
