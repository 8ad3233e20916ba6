# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.source.ship`` (read its docstring): the dump's reader and
the ship lane, the same names, the same results. The lane's loop (scan the buffered
packets, frame into the mirror, copy into the replica's ring, publish, ring the
doorbell, wait for the dump socket) runs in C; it waits with the GIL released.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove, memset
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from bridge.errors import TransportError
import os

from bridge.ring.layout import DATA_OFFSET as _DATA_OFFSET, HEAD_AT as _HEAD_AT, WAITING_AT as _WAITING_AT, \
    WRITE_SEQ_AT as _WRITE_SEQ_AT
from bridge.source import ship as _twin
from bridge.wire import placement as _placement
from bridge.wire.frame import FrameKind

from bridge.wire.native_c cimport bridge_crc_feed, bridge_crc_init, rd32, rd64, wr32, wr64

cdef extern from "<unistd.h>" nogil:
    ssize_t write(int fd, const void *buf, size_t n)

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum: POLLIN, POLLOUT

cdef extern from "<sys/socket.h>" nogil:
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    enum: MSG_DONTWAIT, MSG_NOSIGNAL

cdef extern from * nogil:
    void __atomic_thread_fence(int order)

cdef extern from "<errno.h>" nogil:
    int errno
    enum: EINTR, EAGAIN, ETIMEDOUT, EINVAL

cdef extern from "<time.h>" nogil:
    enum: CLOCK_MONOTONIC

include "../wire/_frames.pxi"

bridge_crc_init()

DUMP_BUFFER, RUN_TXNS, IDLE, NOT_MINE, MAX_RINGS = _twin.DUMP_BUFFER, _twin.RUN_TXNS, _twin.IDLE, _twin.NOT_MINE, \
    _twin.MAX_RINGS

cdef enum:
    C_RUN_TXNS = 64  # bridge.source.ship.RUN_TXNS
    C_PEEK_BYTES = 65536  # bridge.source.ship.PEEK_BYTES
    C_BATCHES = 256  # bridge.source.ship.BATCHES
    C_IDLE = 0
    C_NOT_MINE = 1
    C_MAX_RINGS = 7  # bridge.source.ship.MAX_RINGS
    HEAD_AT = 24  # bridge.ring.layout
    WRITE_SEQ_AT = 8
    WAITING_AT = 36
    DATA_OFFSET = 64
    OP_WRITE = 1  # bridge.wire.placement.Op
    OP_PUBLISH = 2
    OP_PUBLISH_ANSWER = 6
    OP_HEAD = 9  # placement.HEAD: op u8, offset u32, length u32
    REPLY_BYTES = 16  # placement.REPLY: placed u64, applied u64
    FAIL_CLOSED = -1  # a link's failure (else an errno): the replica side closed the data connection
    FAIL_SHORT = -2  # ... it answered that its ring holds less than was published when the answer was asked

if (C_RUN_TXNS, C_PEEK_BYTES, C_BATCHES, C_IDLE, C_NOT_MINE, C_MAX_RINGS, HEAD_AT, WRITE_SEQ_AT, WAITING_AT,
        DATA_OFFSET, OP_WRITE, OP_PUBLISH, OP_PUBLISH_ANSWER, OP_HEAD, REPLY_BYTES) != (
        RUN_TXNS, _twin.PEEK_BYTES, _twin.BATCHES, IDLE, NOT_MINE, MAX_RINGS, _HEAD_AT, _WRITE_SEQ_AT, _WAITING_AT,
        _DATA_OFFSET, _placement.Op.WRITE, _placement.Op.PUBLISH, _placement.Op.PUBLISH_ANSWER, _placement.HEAD.size,
        _placement.REPLY.size):
    raise ImportError("bridge.source._ship was built from constants its sources no longer have; rebuild it")


cdef inline uint64_t _mono_ns() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return <uint64_t>t.tv_sec * 1000000000 + t.tv_nsec


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


cdef class DumpReader:
    cdef readonly object sock
    cdef readonly int fd
    cdef uint8_t *buf
    cdef Py_ssize_t cap
    cdef public Py_ssize_t start, end
    cdef public long long data_ns  # when the socket last gave bytes (to this reader or its lane)

    def __cinit__(self, sock, Py_ssize_t capacity=DUMP_BUFFER):
        self.sock, self.fd, self.cap = sock, sock.fileno(), capacity
        self.buf = <uint8_t *>malloc(capacity)
        if self.buf is NULL:
            raise MemoryError()
        self.start = self.end = 0
        self.data_ns = _mono_ns()

    def __dealloc__(self):
        free(self.buf)

    @property
    def buffered(self):
        return self.end - self.start

    cdef void _make_room(self) noexcept nogil:
        if self.start == self.end:
            self.start = self.end = 0
        elif self.start > self.cap // 2:
            memmove(self.buf, self.buf + self.start, self.end - self.start)
            self.end -= self.start
            self.start = 0

    cpdef object fill(self):
        cdef ssize_t got
        cdef int err
        self._make_room()
        if self.end == self.cap:
            return None if self.start == self.end else self.cap
        while True:
            with nogil:
                got = recv(self.fd, self.buf + self.end, self.cap - self.end, 0)
                err = errno
            if got >= 0:
                self.end += got
                if got:
                    self.data_ns = _mono_ns()
                return got
            if err == EINTR:
                PyErr_CheckSignals()
                continue
            if err == EAGAIN:  # EWOULDBLOCK too (the same on Linux)
                return None
            raise OSError(err, os.strerror(err))

    def read(self, Py_ssize_t n):
        cdef Py_ssize_t have = 0, take
        out = PyBytes_FromStringAndSize(NULL, n)
        cdef char *o = PyBytes_AS_STRING(out)
        while have < n:
            if self.start == self.end:
                got = self.fill()
                if got is None:
                    return out[:have] if have else None
                if got == 0:
                    return out[:have]
            take = min(n - have, self.end - self.start)
            memcpy(o + have, self.buf + self.start, take)
            self.start += take
            have += take
        return out

    def peek(self, Py_ssize_t n=1):
        if self.start == self.end and not self.fill():
            return b""
        return PyBytes_FromStringAndSize(<char *>self.buf + self.start, min(self.end - self.start, C_PEEK_BYTES))

    def close(self):
        pass


cdef struct Link:
    # a tcp ring's data connection as the lane sees it (ship._Link): its messages not sent yet,
    # the answers asked for and not read (the last asked with asked_seq published; the next
    # one's bytes read so far) and the replica side's last answer
    int fd
    uint8_t *out
    Py_ssize_t out_len, out_cap
    uint8_t reply[REPLY_BYTES]
    int reply_len, asked
    uint64_t asked_seq, placed, applied


cdef int _queue(Link *l, uint8_t op, uint32_t offset, const uint8_t *body, uint32_t n) except -1:
    """A placement message (op, offset, length, body) after those not sent yet on the link."""
    cdef Py_ssize_t want = l.out_len + OP_HEAD + n
    cdef uint8_t *grown
    if want > l.out_cap:
        grown = <uint8_t *>realloc(l.out, want * 2)
        if grown is NULL:
            raise MemoryError()
        l.out, l.out_cap = grown, want * 2
    l.out[l.out_len] = op
    wr32(l.out + l.out_len + 1, offset)
    wr32(l.out + l.out_len + 5, n)
    memcpy(l.out + l.out_len + OP_HEAD, body, n)
    l.out_len = want
    return 0


cdef int _send_queued(Link *l, int timeout_ms) noexcept nogil:
    """Everything queued on the link, sent (waiting for room as ``sendall`` does, up to the
    socket's timeout) and dropped: 0, or the errno that stopped it."""
    cdef Py_ssize_t at = 0
    cdef ssize_t sent
    cdef pollfd waiter
    cdef int ready
    while at < l.out_len:
        sent = send(l.fd, l.out + at, l.out_len - at, MSG_NOSIGNAL | MSG_DONTWAIT)
        if sent >= 0:
            at += sent
            continue
        if errno == EINTR:
            continue
        if errno != EAGAIN:
            l.out_len = 0
            return errno
        waiter.fd, waiter.events, waiter.revents = l.fd, POLLOUT, 0
        ready = poll(&waiter, 1, timeout_ms)
        if ready == 0 or ready < 0 and errno != EINTR:
            l.out_len = 0
            return ETIMEDOUT if ready == 0 else errno
    l.out_len = 0
    return 0


cdef int _take_answer(Link *l) noexcept nogil:
    """The bytes of the link's next answer the socket holds (one whole answer at most): 0,
    or its failure (FAIL_CLOSED, FAIL_SHORT, an errno)."""
    cdef ssize_t got = recv(l.fd, l.reply + l.reply_len, REPLY_BYTES - l.reply_len, MSG_DONTWAIT)
    if got == 0:
        return FAIL_CLOSED
    if got < 0:
        return 0 if errno == EINTR or errno == EAGAIN else errno
    l.reply_len += got
    if l.reply_len < REPLY_BYTES:
        return 0
    l.reply_len = 0
    l.asked -= 1
    if rd64(l.reply) > l.placed:
        l.placed = rd64(l.reply)
    if rd64(l.reply + 8) > l.applied:
        l.applied = rd64(l.reply + 8)
    return FAIL_SHORT if l.asked == 0 and l.placed < l.asked_seq else 0


cdef object _link_error(Link *l, int fail):
    if fail == FAIL_CLOSED:
        return TransportError("tcp transport: the replica side closed the data connection with an answer outstanding")
    if fail == FAIL_SHORT:
        return TransportError(f"tcp transport: the replica side answered that its ring holds seq {l.placed}, "
                              f"after seq {l.asked_seq} was published")
    return TransportError(f"tcp transport: recv: {os.strerror(fail)}")


cdef class ShipLane:
    cdef readonly DumpReader reader
    cdef readonly object producer, remote, heartbeat, counts, rings
    cdef public object owed, gone
    cdef readonly int doorbell
    cdef readonly Py_ssize_t max_bytes
    cdef bytes hb_schema, hb_table
    cdef readonly object sock
    cdef int n_links, send_timeout_ms
    cdef Link links[C_MAX_RINGS + 1]  # tcp: the first ring's connection, then each further ring's
    cdef public int seq_id, why, ack_error
    cdef public Py_ssize_t frames, heartbeats, commit_position, acks
    cdef public object gtid
    cdef public object asked  # (seq, ACK position, monotonic ns) handed back unacknowledged, or None
    cdef public int quorum  # fan-out semi-sync: rings that must hold a transaction for its ACK
    # over the lane's life: wakeups (the dump readable, an answer in) that waited over 1 ms for
    # the interpreter lock before the lane could go on, and the longest such wait
    cdef public Py_ssize_t gil_waits
    cdef public unsigned long long gil_wait_max_ns
    cdef uint32_t batch_us[C_BATCHES]  # per publish: its first transaction's time from placed to published
    cdef uint32_t batch_n[C_BATCHES]  # ... and how many it published
    cdef int batches
    cdef uint32_t ack_us[C_BATCHES]  # per ACK sent: its transaction's time from placed to the ACK out
    cdef uint32_t ack_n[C_BATCHES]  # ... and how many ACKs (1, the last one more where a run sent over C_BATCHES)
    cdef int ack_kept

    def __init__(self, DumpReader reader, producer, remote, int doorbell, heartbeat, Py_ssize_t max_bytes,
                 sock=None, counts=None, rings=()):
        cdef int k
        self.reader, self.producer, self.remote, self.doorbell = reader, producer, remote, doorbell
        self.rings = tuple(rings)
        if len(self.rings) > C_MAX_RINGS or \
                any(len(ring) != 4 or (ring[3] is None) != (sock is None) for ring in self.rings):
            raise ValueError(f"ship lane: further rings of the first one's kind (shm or tcp), {C_MAX_RINGS} at most")
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
        if len(data) >= REPLY_BYTES:
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

    cdef void _count(self, Py_ssize_t n, Py_ssize_t heartbeats):
        counts = self.counts
        counts.transactions_shipped += n - heartbeats
        counts.heartbeats_shipped += heartbeats
        counts.taken_whole += n

    cdef int _acknowledge(self, uint64_t position, const char *log_file, Py_ssize_t n):
        """The ACK sent (``_send_ack``), counted before it goes (once it is out, the
        primary's commit may return): 0 or an errno."""
        cdef int err
        if self.counts is not None:
            self.counts.acks_sent += 1
        err = self._send_ack(position, log_file, n)
        if err and self.counts is not None:
            self.counts.acks_sent -= 1  # it did not go
        return err

    cdef int _await_quorum(self, uint64_t until_ns, const uint64_t *want, const int *holding, int n_holding,
                           int *dead, int *fails) noexcept nogil:
        """tcp: wait until ``until_ns`` at most for ``quorum`` of the ``holding`` rings to
        answer that they hold ``want`` (their seq of what was just published): 1 once they
        have, 0 when the time ran out first (the answers not read stay asked for, the bytes
        read so far kept), -1 when the first ring failed (``fails[0]``). A further ring that
        fails meanwhile is ``dead`` (its failure in ``fails``)."""
        cdef pollfd waiters[C_MAX_RINGS + 1]
        cdef int which[C_MAX_RINGS + 1]
        cdef int j, k, confirmed, n_wait, ready, fail
        cdef uint64_t now
        while True:
            confirmed = n_wait = 0
            for j in range(n_holding):
                k = holding[j]
                if dead[k]:
                    continue
                if self.links[k].placed >= want[k]:
                    confirmed += 1
                elif self.links[k].asked > 0:
                    waiters[n_wait].fd, waiters[n_wait].events, waiters[n_wait].revents = self.links[k].fd, POLLIN, 0
                    which[n_wait] = k
                    n_wait += 1
            if confirmed >= self.quorum:
                return 1
            now = _mono_ns()
            if now >= until_ns or n_wait == 0:
                return 0
            ready = poll(waiters, n_wait, <int>((until_ns - now + 999999) // 1000000))
            if ready == 0:
                continue  # the clock decides (poll counts whole ms)
            if ready < 0:
                if errno == EINTR:
                    continue
                fails[0] = errno
                return -1
            for j in range(n_wait):
                if waiters[j].revents == 0:
                    continue
                k = which[j]
                fail = _take_answer(&self.links[k])
                if fail:
                    fails[k] = fail
                    if k == 0:
                        return -1
                    dead[k] = 1

    cdef void _note_gone(self, const int *dead):
        """The further rings found dead (1..), named in ``gone`` once each."""
        cdef int k
        for k in range(1, 1 + len(self.rings)):
            if dead[k] and k - 1 not in self.gone:
                self.gone.append(k - 1)

    def record_stages(self, stages):
        """The last run's "place" stage (per publish, its transactions at its first one's
        time) and "ack" stage (per ACK sent, from its transaction placed in the mirror)."""
        cdef int i
        for i in range(self.batches):
            stages.record("place", self.batch_us[i], self.batch_n[i])
        for i in range(self.ack_kept):
            stages.record("ack", self.ack_us[i], self.ack_n[i])

    cdef inline void _gil_waited(self, uint64_t woke_ns) noexcept:
        cdef uint64_t waited = _mono_ns() - woke_ns
        if waited > 1000000:
            self.gil_waits += 1
        if waited > self.gil_wait_max_ns:
            self.gil_wait_max_ns = waited

    cdef int _send_ack(self, uint64_t position, const char *log_file, Py_ssize_t n) noexcept nogil:
        """The semi-sync ACK on the dump connection (BinlogReader.send_ack): 0 or an errno."""
        cdef uint8_t packet[4 + 9 + 512]
        cdef Py_ssize_t size = 9 + n, at = 0
        cdef ssize_t sent
        if n > 512:
            return EINVAL
        packet[0], packet[1], packet[2], packet[3] = size & 0xFF, (size >> 8) & 0xFF, size >> 16, 0
        packet[4] = 0xEF
        wr64(packet + 5, position)
        memcpy(packet + 13, log_file, n)
        while at < 4 + size:
            sent = send(self.reader.fd, packet + at, 4 + size - at, MSG_NOSIGNAL)
            if sent < 0:
                if errno == EINTR:
                    continue
                return errno
            at += sent
        return 0

    def run(self, int seq_id, int wait_ms, ack_file=None, long long ack_wait_us=0):
        cdef Py_buffer mirror, ring
        cdef DumpReader rd = self.reader
        cdef Scanned s
        cdef Py_ssize_t size = self.producer.size, head = self.producer.head
        cdef Py_ssize_t room = size - self.producer.used, used, frame_at, last_len = 0
        cdef uint64_t seq = self.producer.next_seq, whole_ns = 0, woke_ns = 0
        cdef uint64_t deadline = _mono_ns() + <uint64_t>wait_ms * 1000000
        cdef uint32_t epoch = self.producer.epoch & 0xFFFFFFFF
        cdef uint8_t sid = seq_id
        cdef uint8_t *o
        cdef uint8_t *r
        cdef int scan, left_ms, bell_err = 0, send_err = 0, got_poll, answer, k, n_holding, err
        cdef uint64_t asked_ns, until_ns, ack_ns = 0
        cdef bint tcp = self.n_links > 0
        cdef bint semi_sync = ack_file is not None
        cdef const char *ack_name = NULL
        cdef Py_ssize_t ack_name_len = 0, batch_n = 0, batch_hb = 0
        cdef long long ack_pos = -1
        cdef bint pending = False
        cdef ssize_t got
        cdef pollfd waiter
        cdef char last[GTID_TEXT]
        cdef uint8_t published[8]
        # fan-out: the further rings (bridge.source.ship), each its own mirror, ring and bookkeeping
        cdef Py_buffer more_mirror[C_MAX_RINGS]
        cdef Py_buffer more_ring[C_MAX_RINGS]
        cdef uint8_t *mo[C_MAX_RINGS]
        cdef uint8_t *mr[C_MAX_RINGS]
        cdef Py_ssize_t msize[C_MAX_RINGS]
        cdef Py_ssize_t mhead[C_MAX_RINGS]
        cdef Py_ssize_t mfree[C_MAX_RINGS]
        cdef uint64_t mseq[C_MAX_RINGS]
        cdef uint32_t mepoch[C_MAX_RINGS]
        cdef int mbell[C_MAX_RINGS]
        cdef int n_more = len(self.rings), got_mirrors = 0, got_rings = 0, i
        cdef Py_ssize_t mframe_at, mused
        # per ring (0: the first): dead (a further one whose doorbell or connection failed) and why
        cdef int dead[C_MAX_RINGS + 1]
        cdef int fails[C_MAX_RINGS + 1]
        cdef int owes[C_MAX_RINGS]  # a further ring had no space for the last transaction
        cdef int holding[C_MAX_RINGS + 1]  # the rings that hold the transaction an ACK is asked for
        cdef uint64_t want[C_MAX_RINGS + 1]  # ... and their seq of it
        memset(dead, 0, sizeof(dead))
        memset(fails, 0, sizeof(fails))
        memset(owes, 0, sizeof(owes))
        entries = []
        more_entries = [[] for _ in range(n_more)]
        self.owed, self.gone, self.asked = [], [], None
        if semi_sync:
            ack_name, ack_name_len = PyBytes_AS_STRING(ack_file), len(ack_file)
        self.frames = self.heartbeats = self.batches = self.ack_kept = self.acks = self.ack_error = 0
        PyObject_GetBuffer(self.producer.region, &mirror, PyBUF_WRITABLE)
        try:
            PyObject_GetBuffer(self.remote if not tcp else self.producer.region, &ring, PyBUF_WRITABLE)
            try:
                if mirror.len != ring.len or mirror.len != DATA_OFFSET + size:
                    raise ValueError(f"ship lane: a mirror of {mirror.len} bytes and a ring of {ring.len} for "
                                     f"a {size}-byte data area")
                o = <uint8_t *>mirror.buf + DATA_OFFSET
                r = <uint8_t *>ring.buf
                for i in range(n_more):
                    other, shared, bell, _ = self.rings[i]
                    PyObject_GetBuffer(other.region, &more_mirror[i], PyBUF_WRITABLE)
                    got_mirrors += 1
                    PyObject_GetBuffer(shared if not tcp else other.region, &more_ring[i], PyBUF_WRITABLE)
                    got_rings += 1
                    msize[i], mhead[i], mfree[i] = other.size, other.head, other.size - other.used
                    mseq[i], mepoch[i], mbell[i] = other.next_seq, other.epoch & 0xFFFFFFFF, bell
                    if more_mirror[i].len != more_ring[i].len or more_mirror[i].len != DATA_OFFSET + msize[i]:
                        raise ValueError(f"ship lane: a further mirror of {more_mirror[i].len} bytes and a ring of "
                                         f"{more_ring[i].len} for a {msize[i]}-byte data area")
                    mo[i] = <uint8_t *>more_mirror[i].buf + DATA_OFFSET
                    mr[i] = <uint8_t *>more_ring[i].buf
                while True:
                    scan = _scan_one(rd.buf + rd.start, rd.end - rd.start, sid, semi_sync, self.max_bytes, &s) \
                        if rd.end > rd.start else SCAN_MORE
                    if scan == SCAN_WHOLE:
                        frame_at = head
                        used = _place_scanned(o, size, &frame_at, room, seq, epoch, rd.buf + rd.start, &s)
                        if used:
                            if not whole_ns:
                                whole_ns = _mono_ns()
                            if tcp:  # the same spans as WRITE messages (the ring's end first where it wrapped)
                                if frame_at < head:
                                    _queue(&self.links[0], OP_WRITE, DATA_OFFSET + head, o + head, size - head)
                                    _queue(&self.links[0], OP_WRITE, DATA_OFFSET, o, used - (size - head))
                                else:
                                    _queue(&self.links[0], OP_WRITE, DATA_OFFSET + head, o + head, used)
                            elif frame_at < head:  # wrapped: the ring's end (a PAD or implicit wrap), the frame
                                memcpy(r + DATA_OFFSET + head, o + head, size - head)
                                memcpy(r + DATA_OFFSET, o, used - (size - head))
                            else:
                                memcpy(r + DATA_OFFSET + head, o + head, used)
                            entries.append((seq, used, DATA_OFFSET + frame_at, _payload_len(&s), FrameKind.TXN, 0))
                            for i in range(n_more):  # fan-out: the same transaction into each further ring
                                if dead[i + 1]:
                                    continue
                                mframe_at = mhead[i]
                                mused = _place_scanned(mo[i], msize[i], &mframe_at, mfree[i], mseq[i], mepoch[i],
                                                       rd.buf + rd.start, &s)
                                if not mused:
                                    owes[i] = 1
                                    self.owed.append((i, PyBytes_FromStringAndSize(<char *>rd.buf + rd.start,
                                                                                   s.taken), sid))
                                    continue
                                if tcp and mframe_at < mhead[i]:
                                    _queue(&self.links[i + 1], OP_WRITE, DATA_OFFSET + mhead[i], mo[i] + mhead[i],
                                           msize[i] - mhead[i])
                                    _queue(&self.links[i + 1], OP_WRITE, DATA_OFFSET, mo[i],
                                           mused - (msize[i] - mhead[i]))
                                elif tcp:
                                    _queue(&self.links[i + 1], OP_WRITE, DATA_OFFSET + mhead[i], mo[i] + mhead[i],
                                           mused)
                                elif mframe_at < mhead[i]:
                                    memcpy(mr[i] + DATA_OFFSET + mhead[i], mo[i] + mhead[i], msize[i] - mhead[i])
                                    memcpy(mr[i] + DATA_OFFSET, mo[i], mused - (msize[i] - mhead[i]))
                                else:
                                    memcpy(mr[i] + DATA_OFFSET + mhead[i], mo[i] + mhead[i], mused)
                                more_entries[i].append((mseq[i], mused, DATA_OFFSET + mframe_at, _payload_len(&s),
                                                        FrameKind.TXN, 0))
                                mhead[i] = (mhead[i] + mused) % msize[i]
                                mfree[i] -= mused
                                mseq[i] += 1
                            if _is_heartbeat(rd.buf + rd.start, &s, self.hb_schema, self.hb_table):
                                self.heartbeats += 1
                                batch_hb += 1
                            head = (head + used) % size  # past the gap too, if it wrapped
                            room -= used
                            seq += 1
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
                                ack_ns = _mono_ns()  # the "ack" stage starts: placed in the mirror
                            elif self.frames % C_RUN_TXNS and not self.owed:
                                continue
                        else:
                            scan = SCAN_NO  # a full ring or over half of it: the general path waits for space
                    if pending and tcp:  # each ring's WRITE messages and a PUBLISH in one send
                        for k in range(self.n_links):
                            if dead[k]:
                                continue
                            wr64(published, seq - 1 if k == 0 else mseq[k - 1] - 1)  # the PUBLISH body: write_seq u64
                            _queue(&self.links[k], OP_PUBLISH_ANSWER if ack_pos >= 0 else OP_PUBLISH,
                                   <uint32_t>(head if k == 0 else mhead[k - 1]), published, 8)
                            with nogil:
                                err = _send_queued(&self.links[k], self.send_timeout_ms)
                            if err and k == 0:
                                send_err = err
                            elif err:
                                dead[k], fails[k] = 1, err
                            elif ack_pos >= 0:
                                self.links[k].asked += 1
                                self.links[k].asked_seq = rd64(published)
                        self._note_gone(dead)
                        if send_err:
                            break
                    elif pending:
                        wr32(r + HEAD_AT, <uint32_t>head)
                        __atomic_thread_fence(3)  # release: the frames before the seq that publishes them
                        wr64(r + WRITE_SEQ_AT, seq - 1)
                        __atomic_thread_fence(5)  # the seq out before the waiting flag is read (the consumer:
                        if self.doorbell >= 0 and rd32(r + WAITING_AT):  # the other way round)
                            if write(self.doorbell, b"\x01", 1) < 0 and errno != EAGAIN:
                                bell_err = errno
                        for i in range(n_more):  # fan-out: each further ring the same way
                            if dead[i + 1]:
                                continue
                            wr32(mr[i] + HEAD_AT, <uint32_t>mhead[i])
                            __atomic_thread_fence(3)
                            wr64(mr[i] + WRITE_SEQ_AT, mseq[i] - 1)
                            __atomic_thread_fence(5)
                            if mbell[i] >= 0 and rd32(mr[i] + WAITING_AT):
                                if write(mbell[i], b"\x01", 1) < 0 and errno != EAGAIN:
                                    dead[i + 1] = 1
                        self._note_gone(dead)
                    if pending:
                        _keep(self.batch_us, self.batch_n, &self.batches, _mono_ns() - whole_ns, batch_n)
                        if self.counts is not None:  # live: status and metrics see them as they happen
                            self._count(batch_n, batch_hb)
                        pending, whole_ns, batch_n, batch_hb = False, 0, 0, 0
                        if bell_err:
                            break
                        if ack_pos >= 0:
                            holding[0], want[0], n_holding = 0, seq - 1, 1
                            for i in range(n_more):
                                want[i + 1] = mseq[i] - 1
                                if not dead[i + 1] and not owes[i]:
                                    holding[n_holding] = i + 1
                                    n_holding += 1
                            asked_ns = _mono_ns()
                            answer = n_holding >= self.quorum
                            if answer and tcp:
                                until_ns = asked_ns + <uint64_t>ack_wait_us * 1000
                                if deadline < until_ns:
                                    until_ns = deadline
                                with nogil:
                                    answer = self._await_quorum(until_ns, want, holding, n_holding, dead, fails)
                                    woke_ns = _mono_ns()
                                self._gil_waited(woke_ns)
                                self._note_gone(dead)
                                if answer < 0:
                                    raise _link_error(&self.links[0], fails[0])
                            if not answer:
                                self.asked = (seq - 1, ack_pos, asked_ns)  # the general path waits for it
                                self.why = C_NOT_MINE
                                break
                            # the quorum's replica sides hold it: what semi-sync `received` promises
                            self.ack_error = self._acknowledge(<uint64_t>ack_pos, ack_name, ack_name_len)
                            ack_pos = -1
                            if self.ack_error:
                                self.why = C_NOT_MINE  # the general path meets the broken dump connection
                                break
                            self.acks += 1
                            _keep(self.ack_us, self.ack_n, &self.ack_kept, _mono_ns() - ack_ns, 1)
                    if self.owed:
                        self.why = C_NOT_MINE  # the node queues what a further ring had no space for
                        break
                    if scan == SCAN_WHOLE:
                        if _mono_ns() >= deadline:  # a steady stream: back to the node every wait_ms all the same
                            self.why = C_IDLE
                            break
                        continue
                    if scan == SCAN_NO or rd.end - rd.start == rd.cap:
                        self.why = C_NOT_MINE
                        break
                    rd._make_room()
                    left_ms = <int>((deadline - _mono_ns()) // 1000000) if _mono_ns() < deadline else 0
                    if left_ms <= 0:
                        self.why = C_IDLE
                        break
                    waiter.fd, waiter.events, waiter.revents = rd.fd, POLLIN, 0
                    with nogil:
                        got_poll = poll(&waiter, 1, left_ms)
                        woke_ns = _mono_ns()
                    self._gil_waited(woke_ns)
                    if got_poll == 0:
                        self.why = C_IDLE
                        break
                    if got_poll < 0:
                        if errno == EINTR:
                            PyErr_CheckSignals()
                            continue
                        self.why = C_NOT_MINE
                        break
                    got = recv(rd.fd, rd.buf + rd.end, rd.cap - rd.end, MSG_DONTWAIT)
                    if got > 0:
                        rd.end += got
                        rd.data_ns = _mono_ns()
                    elif got == 0 or (errno != EAGAIN and errno != EINTR):
                        self.why = C_NOT_MINE  # the end of the stream or an error: the general path meets it
                        break
            finally:
                for i in range(got_rings):
                    PyBuffer_Release(&more_ring[i])
                for i in range(got_mirrors):
                    PyBuffer_Release(&more_mirror[i])
                PyBuffer_Release(&ring)
        finally:
            PyBuffer_Release(&mirror)
            if entries:
                self.producer.placed(entries, head)
                self.gtid = PyUnicode_DecodeUTF8(last, last_len, NULL)
            for i in range(got_rings):
                if more_entries[i]:
                    self.rings[i][0].placed(more_entries[i], mhead[i])
            self.seq_id = sid
            for k in range(self.n_links):
                self.links[k].out_len = 0  # what a failure left unsent: the ring's resend covers it
        if bell_err:
            raise TransportError(f"ring the replica's doorbell: {os.strerror(bell_err)}")
        if send_err:
            raise TransportError(f"tcp transport: send: {os.strerror(send_err)}")
        return self.frames
