# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.apply.lane`` (read its docstring): the same class, the
same results, the same bytes on the wire. The scan of the ring, the BINLOG text and
the round trip are C; the socket waits run without the GIL. Built by the normal
install (setup.py, Cython); when it is missing bridge.apply.lanes uses the twin.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset

import socket as _socket

from bridge.apply import lane as _twin
from bridge.apply import lanepos as _lanepos
from bridge.wire import frame as _frame

from bridge.wire.native_c cimport (bridge_b64_end, bridge_b64_into, bridge_crc32, bridge_crc32_init, bridge_crc_feed,
                                   bridge_crc_init, rd32, rd64, wr32, wr64)

cdef extern from "<time.h>" nogil:
    struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *ts)
    enum: CLOCK_REALTIME, CLOCK_MONOTONIC

cdef extern from "<unistd.h>" nogil:
    ssize_t read(int fd, void *buf, size_t n)

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum: POLLIN

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    int setsockopt(int fd, int level, int name, const void *value, unsigned int size)
    enum: SOL_SOCKET, SO_RCVLOWAT, MSG_NOSIGNAL, MSG_DONTWAIT

cdef extern from * nogil:
    void __atomic_thread_fence(int order)

include "../transport/_placements.pxi"  # the tcp data connection, read while a run holds it (pl_take)

bridge_crc_init()
bridge_crc32_init()

NOTHING, FAILED, LOST = _twin.NOTHING, _twin.FAILED, _twin.LOST
MAX_DOMAINS = _twin.MAX_DOMAINS

cdef enum:
    HEADER_BYTES = 24
    DATA_OFFSET = 64
    WRITE_SEQ_AT = 8
    ACK_SEQ_AT = 16
    TAIL_AT = 28
    SIZE_AT = 32
    WAITING_AT = 36
    KIND_TXN = 1
    KIND_PAD = 4
    COMPACT = 0x45
    UPDATE_ROWS_V1 = 24
    DOMAINS = 64
    OK_BYTES_MIN = 11
    ANSWERS_WAIT_MS = 10
    ANSWER_ROOM = 512  # both answers of a round trip fit, but for a long error message
    MAX_QUERY = 0xFFFFFF - 1
    POSITION_MAX = 4096  # the position's UPDATE event, its GTID set at DOMAINS domains included
    MYSQL_SET_MAX = 2048
    MYSQL_TXN_BYTES = 44
    MYSQL_GROUP_BYTES = 42
    # what the run keeps of each transaction of a group (``Lane.spans``, so many per transaction)
    SPAN_DATA = 0  # its row events: offset in the region, length
    SPAN_LEN = 1
    SPAN_AT = 2  # the ring offset after it
    SPAN_EVENTS = 3  # row events, heartbeats of the group up to it
    SPAN_BEATS = 4
    SPAN_BEAT = 5  # the group's last heartbeat up to it (its index), or -1
    SPAN_GTID = 6  # its GTID's text: offset in the region, length
    SPAN_GTID_LEN = 7
    SPAN = 8


def _check_constants():
    """The layouts this module copies, against their sources (through the twin): a
    mismatch is an ImportError, and bridge.apply.lanes runs the twin, saying why."""
    copied = {"HEADER_BYTES": HEADER_BYTES, "DATA_OFFSET": DATA_OFFSET, "WRITE_SEQ_AT": WRITE_SEQ_AT,
              "ACK_SEQ_AT": ACK_SEQ_AT, "TAIL_AT": TAIL_AT, "SIZE_AT": SIZE_AT, "WAITING_AT": WAITING_AT,
              "TXN": KIND_TXN, "PAD": KIND_PAD, "COMPACT": COMPACT, "UPDATE_ROWS_V1": UPDATE_ROWS_V1,
              "MAX_DOMAINS": DOMAINS, "OK_BYTES_MIN": OK_BYTES_MIN, "ANSWERS_WAIT_MS": ANSWERS_WAIT_MS,
              "MYSQL_SET_MAX": MYSQL_SET_MAX, "MYSQL_TXN_BYTES": MYSQL_TXN_BYTES,
              "MYSQL_GROUP_BYTES": MYSQL_GROUP_BYTES}
    sources = {name: getattr(_twin, name) for name in copied if name not in ("HEADER_BYTES", "MYSQL_SET_MAX")}
    sources["HEADER_BYTES"], sources["MYSQL_SET_MAX"] = _frame.HEADER_BYTES, _lanepos.MYSQL_SET_MAX
    wrong = sorted(name for name in copied if copied[name] != sources[name])
    if wrong:
        raise ImportError("bridge.apply._lane: built with other " + ", ".join(wrong) + " than bridge's sources "
                          "(rebuild it)")


_check_constants()
_check_placement_constants("bridge.apply._lane")


cdef inline Py_ssize_t query_bytes(Py_ssize_t events) noexcept nogil:
    return 8 + 4 * ((events + 2) // 3) + 1 + 7


cdef bint frame_ok(const uint8_t *h, const uint8_t *payload, uint32_t length) noexcept nogil:
    """The frame's crc32c (its reserved and crc fields zeroed, as bridge.wire.frame packs it)."""
    cdef uint8_t copy[HEADER_BYTES]
    memcpy(copy, h, HEADER_BYTES)
    memset(copy + 2, 0, 2)
    memset(copy + 16, 0, 4)
    return ~bridge_crc_feed(bridge_crc_feed(0xFFFFFFFFu, copy, HEADER_BYTES), payload, length) == rd32(h + 16)


cdef int parse_gtid(const uint8_t *p, Py_ssize_t n, uint64_t *out) noexcept nogil:
    """domain-server-seq (decimal, at most 20 digits each) into out[0..2]; 0 when it is not that."""
    cdef int part = 0, digits = 0
    cdef uint64_t v = 0, most = 0xFFFFFFFFFFFFFFFFULL, digit
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] == 45:  # "-"
            if not digits or part == 2:
                return 0
            out[part] = v
            part, digits, v = part + 1, 0, 0
        elif 48 <= p[i] <= 57 and digits < 20:
            digit = p[i] - 48
            if v > (most - digit) // 10:
                return 0
            v = v * 10 + digit
            digits += 1
        else:
            return 0
    if part != 2 or not digits:
        return 0
    out[2] = v
    return (out[0] >> 32) == 0 and (out[1] >> 32) == 0


cdef uint64_t mysql_gno(const uint8_t *p, Py_ssize_t n, Py_ssize_t *colon) noexcept nogil:
    """The number after the last ":" of a MySQL GTID (uuid:n, uuid:tag:n; at most 19
    digits), ``colon`` where that ":" is; 0 when it is not that."""
    cdef Py_ssize_t i = n
    cdef uint64_t v = 0
    while i > 0 and p[i - 1] != 58:  # ":"
        i -= 1
    if i == 0 or i == n or n - i > 19:
        return 0
    colon[0] = i - 1
    while i < n:
        if not 48 <= p[i] <= 57:
            return 0
        v = v * 10 + (p[i] - 48)
        i += 1
    return v


cdef char *write_uint(char *o, uint64_t v) noexcept nogil:
    cdef char digits[24]
    cdef int n = 0
    while True:
        digits[n] = <char>(48 + v % 10)
        v //= 10
        n += 1
        if not v:
            break
    while n:
        n -= 1
        o[0] = digits[n]
        o += 1
    return o


cdef inline uint64_t now_ns(int clock) noexcept nogil:
    cdef timespec t
    clock_gettime(clock, &t)
    return <uint64_t>t.tv_sec * 1000000000 + t.tv_nsec


cdef void sleep_on(uint8_t *b, int doorbell, uint64_t expected_seq, int wait_ms, Placements *pl) noexcept nogil:
    """Until the producer rings ``doorbell`` (bridge.transport.doorbell: the ring's waiting
    flag up meanwhile), or, where the run holds the tcp data connection (``pl``), until
    placements arrive on it: carried out here, no other thread woken."""
    cdef pollfd waiters[2]
    cdef uint8_t drained[4096]
    cdef int n = 0
    wr32(b + WAITING_AT, 1)
    __atomic_thread_fence(5)  # the flag up before the seq is read again (the producer: the other way round)
    if rd64(b + WRITE_SEQ_AT) < expected_seq:
        if doorbell >= 0:
            waiters[n].fd, waiters[n].events, waiters[n].revents = doorbell, POLLIN, 0
            n += 1
        if pl_pollable(pl):
            waiters[n].fd, waiters[n].events, waiters[n].revents = pl.fd, POLLIN, 0
            n += 1
        if poll(waiters, n, wait_ms) > 0 and pl != NULL and waiters[n - 1].fd == pl.fd and waiters[n - 1].revents:
            pl_drain_lane(pl)
    if doorbell >= 0:
        read(doorbell, drained, sizeof(drained))  # non-blocking: every byte rung, or the eventfd's counter
    wr32(b + WAITING_AT, 0)


cdef void wait_answers(int fd, Placements *pl, int timeout_ms) noexcept nogil:
    """Until ``fd`` is readable (its low-water mark met) or ``timeout_ms`` passed (-1:
    none), carrying out the placements that arrive meanwhile on the data connection the
    run holds (``pl``): an ANSWER the primary side waits on is not held up by the replica
    server."""
    cdef pollfd waiters[2]
    cdef int n, ready, left = timeout_ms
    cdef uint64_t until = now_ns(CLOCK_MONOTONIC) + <uint64_t>(timeout_ms if timeout_ms > 0 else 0) * 1000000
    cdef uint64_t now
    while True:
        waiters[0].fd, waiters[0].events, waiters[0].revents = fd, POLLIN, 0
        n = 1
        if pl_pollable(pl):
            waiters[1].fd, waiters[1].events, waiters[1].revents = pl.fd, POLLIN, 0
            n = 2
        ready = poll(waiters, n, left)
        if ready == 0:
            return
        if ready < 0 and errno != EINTR:
            return
        if n == 2 and waiters[1].revents:
            pl_drain_lane(pl)
        if waiters[0].revents:
            return
        if timeout_ms >= 0:
            now = now_ns(CLOCK_MONOTONIC)
            if now >= until:
                return
            left = <int>((until - now) // 1000000) + 1


cdef int send_all(int fd, const char *p, Py_ssize_t n) noexcept nogil:
    cdef ssize_t sent
    while n > 0:
        sent = send(fd, p, n, MSG_NOSIGNAL)
        if sent < 0:
            if errno == EINTR:
                continue
            return -1
        p += sent
        n -= sent
    return 0


cdef int recv_more(int fd, uint8_t *buf, Py_ssize_t have, Py_ssize_t room, bint tcp, Placements *pl) noexcept nogil:
    """Bytes after ``have`` in ``buf``: what has arrived (one recv), waiting for some when
    none has; the new count, or -1 (closed, error). Over tcp the run keeps SO_RCVLOWAT
    at both answers' size, so a wait for the rest of a split answer drops it to one byte
    for that wait. Where the run holds the data connection (``pl``) it is served while
    this waits."""
    cdef int one = 1, lowat = 2 * OK_BYTES_MIN
    # after the poll (tcp, or a held data connection) the answers are in, but for a slow
    # server or a split one; else (a Unix socket) the recv itself waits
    cdef ssize_t got = recv(fd, buf + have, room - have, MSG_DONTWAIT if tcp or pl != NULL else 0)
    if got < 0 and (errno == EAGAIN or errno == EINTR):  # EAGAIN also: a socket with a timeout
        if tcp:
            setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(int))
        while got < 0 and (errno == EAGAIN or errno == EINTR):
            wait_answers(fd, pl, -1)
            got = recv(fd, buf + have, room - have, MSG_DONTWAIT)
        if tcp:
            setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(int))
    if got <= 0:
        return -1
    return have + got


cdef Py_ssize_t recv_until(int fd, uint8_t *buf, Py_ssize_t have, Py_ssize_t need, Py_ssize_t room, bint tcp,
                           Placements *pl) noexcept nogil:
    """``recv_more`` until ``need`` bytes are in ``buf``: the count, or -1."""
    while have >= 0 and have < need:
        have = recv_more(fd, buf, have, room, tcp, pl)
    return have


cdef int grow(uint8_t **buf, uint8_t *small, Py_ssize_t *room, Py_ssize_t need, Py_ssize_t have) noexcept nogil:
    """Room for ``need`` bytes in ``*buf`` (``small`` on the stack, or malloc'd), its first
    ``have`` bytes kept: 0, or -1 (no memory)."""
    cdef uint8_t *grown
    cdef Py_ssize_t size = max(need, 2 * room[0])
    if need <= room[0]:
        return 0
    grown = <uint8_t *>malloc(size)
    if grown == NULL:
        return -1
    memcpy(grown, buf[0], have)
    if buf[0] != small:
        free(buf[0])
    buf[0], room[0] = grown, size
    return 0


cdef int round_trip(int fd, bint tcp, const char *packet, Py_ssize_t n, int answers, int *oks, uint8_t **error,
                    Py_ssize_t *error_len, Placements *pl) noexcept nogil:
    """Send the COM_QUERY ``packet``, read its ``answers`` answers: 0, FAILED (``error``:
    the ERR packet, malloc'd) or LOST; ``oks``: the OK answers read. Over tcp the caller
    (``Lane.run``) has set SO_RCVLOWAT to two answers' size, so the poll wakes once for
    two (bridge.apply.connection) and one recv takes them: no other bytes come on this
    connection meanwhile. ``pl``: the tcp data connection the run holds, served while
    this waits."""
    cdef uint8_t small[ANSWER_ROOM]
    cdef uint8_t *buf = small
    cdef Py_ssize_t have = 0, at = 0, room = ANSWER_ROOM, need
    cdef uint32_t length
    cdef int k, status = 0
    oks[0] = 0
    if send_all(fd, packet, n):
        return -2
    if tcp or pl != NULL:
        wait_answers(fd, pl, ANSWERS_WAIT_MS if tcp else -1)
    for k in range(answers):
        if grow(&buf, small, &room, at + 4, have):
            status = -2
            break
        have = recv_until(fd, buf, have, at + 4, room, tcp, pl)
        if have < 0:
            status = -2
            break
        length = buf[at] | (<uint32_t>buf[at + 1] << 8) | (<uint32_t>buf[at + 2] << 16)
        if buf[at + 3] != <uint8_t>(k + 1) or length == 0xFFFFFF or length == 0:
            status = -2
            break
        need = at + 4 + length
        if grow(&buf, small, &room, need, have):  # a long error message, or many answers
            status = -2
            break
        have = recv_until(fd, buf, have, need, room, tcp, pl)
        if have < 0:
            status = -2
            break
        if buf[at + 4] == 0xFF:
            error[0] = <uint8_t *>malloc(4 + length)
            if error[0] != NULL:
                memcpy(error[0], buf + at, 4 + length)
                error_len[0] = 4 + length
            status = -1
            break
        if buf[at + 4] != 0:  # not OK
            status = -2
            break
        oks[0] += 1
        at = need
    if buf != small:
        free(buf)
    return status


cdef class Lane:
    cdef readonly bytes channel_key, position_map
    cdef readonly int digits
    cdef readonly bint checksum
    cdef readonly uint32_t server_id
    cdef readonly int update_type
    cdef readonly object engines  # the twin's: MySQL, the applier's {(schema, table): non-transactional}
    cdef readonly object _mysql  # the twin's MysqlPosition, or None (a MariaDB set)
    cdef uint32_t dom[DOMAINS]
    cdef uint32_t srv[DOMAINS]
    cdef uint64_t dseq[DOMAINS]
    cdef int ndom
    cdef public uint64_t seq
    cdef public Py_ssize_t tail
    cdef public uint64_t expected_seq
    cdef readonly long txns, beats, events  # of the last run, over its groups
    cdef readonly long groups, largest, given_back  # groups applied, the largest, frames of the one given back
    cdef readonly object last_gtid, heartbeat, error
    cdef readonly uint64_t picked_ns, heartbeat_ns
    cdef readonly Py_ssize_t position_bytes_max
    cdef uint64_t *stamps  # (picked, done, read, ship) ns of the last run's transactions
    cdef Py_ssize_t stamps_room
    cdef Py_ssize_t *spans  # SPAN per transaction of a group: its row events in the region, where it ends...
    cdef Py_ssize_t spans_room

    def __init__(self, channel_key, position_map, int digits, checksum, uint32_t server_id, engines=None,
                 int update_type=UPDATE_ROWS_V1):
        self.channel_key, self.position_map = bytes(channel_key), bytes(position_map)
        self.digits, self.checksum, self.server_id, self.update_type = digits, bool(checksum), server_id, update_type
        self.engines, self._mysql = engines, None
        self.ndom, self.seq, self.tail, self.expected_seq = 0, 0, 0, 0
        self.txns = self.beats = self.events = self.groups = self.largest = self.given_back = 0
        self.last_gtid, self.heartbeat, self.error, self.picked_ns, self.heartbeat_ns = "", None, b"", 0, 0
        self.position_bytes_max = query_bytes(len(self.position_map) + 19 + len(self.channel_key) + 1 + 8 + 2
                                              + MAX_DOMAINS * 63 + 8 + 4 + 3 + 4) - query_bytes(0)

    def __dealloc__(self):
        free(self.stamps)
        free(self.spans)

    # --- the position the lane carries ----------------------------------------

    def set_position(self, seq, gtids):
        self._mysql = _lanepos.mysql_position(gtids, self.engines is not None)
        parts = [] if self._mysql is not None else _twin.mariadb_parts(gtids)
        if parts is None:
            self.ndom = 0
            return False
        self.ndom = len(parts)
        for i, (d, s, n) in enumerate(parts):
            self.dom[i], self.srv[i], self.dseq[i] = d, s, n
        self.seq = seq
        return True

    def gtid_parts(self):
        return [(self.dom[i], self.srv[i], self.dseq[i]) for i in range(self.ndom)]

    @property
    def mysql(self):
        return self._mysql is not None

    @property
    def gtids(self):
        if self._mysql is not None:
            return self._mysql.text().decode()
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self.gtid_parts())

    cdef bint add(self, const uint64_t *g) noexcept nogil:
        cdef int i, j
        for i in range(self.ndom):
            if self.dom[i] == g[0]:
                self.srv[i], self.dseq[i] = <uint32_t>g[1], g[2]
                return True
            if self.dom[i] > g[0]:
                if self.ndom >= DOMAINS:
                    return False
                j = self.ndom
                while j > i:
                    self.dom[j], self.srv[j], self.dseq[j] = self.dom[j - 1], self.srv[j - 1], self.dseq[j - 1]
                    j -= 1
                self.dom[i], self.srv[i], self.dseq[i] = <uint32_t>g[0], <uint32_t>g[1], g[2]
                self.ndom += 1
                return True
        if self.ndom >= DOMAINS:
            return False
        self.dom[self.ndom], self.srv[self.ndom], self.dseq[self.ndom] = <uint32_t>g[0], <uint32_t>g[1], g[2]
        self.ndom += 1
        return True

    # --- the round trip -------------------------------------------------------------

    cdef Py_ssize_t update_event(self, uint8_t *o, uint64_t seq, uint64_t now_us, const char *before=NULL,
                                 Py_ssize_t nb=0, uint64_t hi=0, const char *after=NULL, Py_ssize_t na=0) noexcept:
        """The position's UPDATE_ROWS event into ``o`` (POSITION_MAX bytes): its length. Its
        GTID set: the MariaDB domains, or (``before`` given) ``before``, ``hi`` (0: none), ``after``."""
        cdef Py_ssize_t key = len(self.channel_key), at, i
        cdef char *g
        cdef uint64_t seconds = now_us // 1000000, micros = now_us % 1000000, fraction, scale = 1
        cdef int width = (self.digits + 1) // 2, k
        at = 19
        memcpy(o + at, PyBytes_AS_STRING(self.channel_key), key)
        at += key
        o[at] = 0
        wr64(o + at + 1, seq)
        at += 9
        g = <char *>o + at + 2
        if before != NULL:
            memcpy(g, before, nb)
            g += nb
            if hi:
                g = write_uint(g, hi)
            memcpy(g, after, na)
            g += na
        for i in range(self.ndom if before == NULL else 0):
            if i:
                g[0] = 44  # ","
                g += 1
            g = write_uint(g, self.dom[i])
            g[0] = 45
            g = write_uint(g + 1, self.srv[i])
            g[0] = 45
            g = write_uint(g + 1, self.dseq[i])
        i = g - (<char *>o + at + 2)
        o[at], o[at + 1] = <uint8_t>i, <uint8_t>(i >> 8)
        at += 2 + i
        memset(o + at, 0, 8)
        at += 8
        o[at], o[at + 1], o[at + 2], o[at + 3] = seconds >> 24, seconds >> 16, seconds >> 8, seconds
        at += 4
        for _ in range(6 - self.digits):
            scale *= 10
        fraction = micros - micros % scale
        scale = 1
        for _ in range(6 - 2 * width):
            scale *= 10
        fraction //= scale
        for k in range(width):
            o[at + width - 1 - k] = <uint8_t>(fraction >> (8 * k))
        at += width
        if self.checksum:
            at += 4
        memset(o, 0, 4)
        o[4] = <uint8_t>self.update_type
        wr32(o + 5, self.server_id)
        wr32(o + 9, <uint32_t>at)
        memset(o + 13, 0, 6)
        if self.checksum:
            wr32(o + at - 4, bridge_crc32(o, at - 4))
        return at

    def position_events(self, seq, now_us, gtids=None):
        """The position's TABLE_MAP and UPDATE_ROWS events (as binlog_sql.PositionTable),
        with ``gtids`` (bytes; default: the set the lane carries)."""
        cdef uint8_t event[POSITION_MAX]
        cdef Py_ssize_t n
        cdef bytes text
        if gtids is None and self._mysql is None:
            n = self.update_event(event, seq, now_us)
        else:
            text = self._mysql.text() if gtids is None else bytes(gtids)
            if len(text) > POSITION_MAX - 256:
                raise ValueError(f"position: a GTID set of {len(text)} bytes")
            n = self.update_event(event, seq, now_us, PyBytes_AS_STRING(text), len(text), 0, b"", 0)
        return self.position_map + PyBytes_FromStringAndSize(<char *>event, n)

    def mysql_query(self, gtids, datas, seq, hi, now_us):
        """The twin's (a group's query on a MySQL replica): what ``run`` sends is compared with it."""
        return _twin.Lane.mysql_query(self, gtids, datas, seq, hi, now_us)

    def query(self, datas, seq, now_us):
        """``BINLOG '<the row events, then the position's>';COMMIT``."""
        events = b"".join(datas) + self.position_events(seq, now_us)
        cdef Py_ssize_t n = query_bytes(len(events))
        out = PyBytes_FromStringAndSize(NULL, n)
        cdef char *o = PyBytes_AS_STRING(out)
        cdef uint32_t carry = 0
        cdef int held = 0
        memcpy(o, b"BINLOG '", 8)
        o = bridge_b64_into(o + 8, <const uint8_t *>PyBytes_AS_STRING(events), len(events), &carry, &held)
        o = bridge_b64_end(o, carry, held)
        memcpy(o, b"';COMMIT", 8)
        return out

    # --- one group ------------------------------------------------------------------

    cdef int room_for(self, Py_ssize_t n) except -1:
        """Room for ``n`` transactions in the run's arrays."""
        if n > self.spans_room:
            n = max(n, 2 * self.spans_room, 64)
            self.spans = <Py_ssize_t *>realloc(self.spans, SPAN * n * sizeof(Py_ssize_t))
            self.stamps = <uint64_t *>realloc(self.stamps, 4 * n * sizeof(uint64_t))
            if self.spans == NULL or self.stamps == NULL:
                raise MemoryError()
            self.spans_room = n
        return 0

    def run(self, region, Py_ssize_t tail, uint64_t expected_seq, uint32_t epoch, sock, long max_txns,
            long max_events, Py_ssize_t max_bytes, Py_ssize_t limit, int doorbell=-1, int wait_ms=0,
            receiver=None):
        """``receiver``: the tcp data connection's compiled receiver (bridge.transport._receiver)
        of this ring: where the run would sleep it holds the connection and carries out
        the placements itself (one thread woken per transaction, not two), until it returns."""
        cdef Py_buffer r
        cdef Placements *pl = NULL
        cdef bint held = False
        cdef uint8_t *b
        cdef int got, fd = sock.fileno()
        cdef bint tcp = sock.family != _socket.AF_UNIX
        cdef uint64_t deadline = now_ns(CLOCK_MONOTONIC) + <uint64_t>wait_ms * 1000000, now
        cdef int lowat = 2 * OK_BYTES_MIN, one = 1
        self.tail, self.expected_seq = tail, expected_seq
        self.groups = self.largest = self.txns = self.beats = self.events = self.given_back = 0
        self.heartbeat, self.heartbeat_ns = None, 0
        PyObject_GetBuffer(region, &r, PyBUF_WRITABLE)
        if tcp:  # for this run's round trips (round_trip); PyMySQL's reads need it at one byte
            setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(int))
        try:
            b = <uint8_t *>r.buf
            if r.len < DATA_OFFSET or DATA_OFFSET + <Py_ssize_t>rd32(b + SIZE_AT) > r.len:
                return NOTHING
            while True:
                got = self.group(b, epoch, fd, tcp, max_txns, max_events, max_bytes, limit, pl)
                if got < 0:
                    return got
                now = now_ns(CLOCK_MONOTONIC)
                if held and pl.lane_stop:  # a message for the receiver thread: the run gives it back
                    return self.txns
                if got == NOTHING:
                    if rd64(b + WRITE_SEQ_AT) >= self.expected_seq or now >= deadline or \
                            doorbell < 0 and receiver is None:
                        return self.txns  # the next frame is the general path's, or nothing to wait on
                    if receiver is not None and not held:
                        pl = <Placements *><uintptr_t>receiver.address
                        with nogil:
                            held = pl_take(pl, <int>((deadline - now) // 1000000) + 1)
                        if not held:
                            pl, receiver = NULL, None  # the receiver thread serves it this run
                            if doorbell < 0:
                                return self.txns
                        now = now_ns(CLOCK_MONOTONIC)
                    with nogil:
                        sleep_on(b, doorbell, self.expected_seq, <int>((deadline - now) // 1000000) + 1, pl)
                elif now >= deadline:
                    return self.txns
        finally:
            if held:
                pl_give(pl)
            if tcp:
                setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(int))
            PyBuffer_Release(&r)

    cdef int group(self, uint8_t *b, uint32_t epoch, int fd, bint tcp, long max_txns, long max_events,
                   Py_ssize_t max_bytes, Py_ssize_t limit, Placements *pl) except -100:
        """One group from ``self.tail``: its frame count, NOTHING, FAILED or LOST."""
        cdef const uint8_t *h
        cdef const uint8_t *p
        cdef uint32_t size = rd32(b + SIZE_AT), length, count
        cdef uint64_t published = rd64(b + WRITE_SEQ_AT), expected = self.expected_seq, saved_seq = self.seq
        cdef uint64_t gtid[3]
        cdef uint64_t picked, done_ns, gno, hi = 0, saved_hi = 0
        cdef uint32_t saved_dom[DOMAINS]
        cdef uint32_t saved_srv[DOMAINS]
        cdef uint64_t saved_dseq[DOMAINS]
        cdef int saved_ndom = self.ndom, status = 0, k, answers = 2, oks = 0
        cdef Py_ssize_t at = self.tail, n = 0, total = 0, room, framed, pos, colon = 0, sent = 0, cost = 0, done
        cdef Py_ssize_t schema_len, table_len, i, o_len, error_len = 0, beat_at = -1
        cdef Py_ssize_t first = self.txns  # this group's entries in the run's arrays start there
        cdef Py_ssize_t *span
        cdef long events = 0, beats = 0
        cdef bint beat
        cdef uint8_t position[POSITION_MAX]
        cdef uint8_t *error = NULL
        cdef char *o
        cdef char *packet
        cdef uint32_t carry = 0
        cdef int held = 0
        cdef object my = self._mysql  # MySQL: each transaction on its own, with its GTID
        cdef bytes key = None, before = b"", after = b""
        if my is not None:
            hi = my.hi
            if my.key is not None:
                key, before, after = my.key.encode(), my.before, my.after
        __atomic_thread_fence(2)  # acquire: the frames published are read after their seq
        memcpy(saved_dom, self.dom, sizeof(saved_dom))
        memcpy(saved_srv, self.srv, sizeof(saved_srv))
        memcpy(saved_dseq, self.dseq, sizeof(saved_dseq))
        room = min(limit, <Py_ssize_t>MAX_QUERY - 1) - (self.position_bytes_max if my is None else MYSQL_GROUP_BYTES)
        while n < max_txns and events < max_events and total < max_bytes and published >= expected:
            framed = 0
            for _ in range(2):  # at most one PAD before a frame
                if size - at < HEADER_BYTES:
                    at = 0
                h = b + DATA_OFFSET + at
                length = rd32(h + 4)
                if rd64(h + 8) != expected or rd32(h + 20) != epoch or length > size - at:
                    break
                framed = (HEADER_BYTES + length + 7) & ~7
                if framed > size - at or not frame_ok(h, h + HEADER_BYTES, length):
                    framed = 0
                    break
                if h[0] != KIND_PAD:
                    break
                at, framed = 0, 0
            if not framed or h[0] != KIND_TXN or length < 30:
                break
            p = h + HEADER_BYTES
            if p[0] != COMPACT or 2 + p[1] + 26 > length:
                break
            pos = 2 + p[1]
            if rd32(p + pos + 16) != 0:  # a format of its own
                break
            if my is None:
                if not parse_gtid(p + 2, p[1], gtid):
                    break
            else:
                gno = mysql_gno(p + 2, p[1], &colon)
                if not gno:
                    break
                if key is None:  # the first transaction names the uuid the lane carries
                    try:
                        if not my.follow(PyUnicode_DecodeUTF8(<char *>p + 2, colon, NULL)):
                            break
                    except UnicodeDecodeError:
                        break
                    key, before, after, hi = my.key.encode(), my.before, my.after, my.hi
                if colon != len(key) or memcmp(p + 2, PyBytes_AS_STRING(key), colon) != 0 or gno != hi + 1:
                    break
            count = rd32(p + pos + 20)
            k = p[pos + 24] | (p[pos + 25] << 8)
            i = pos + 26
            beat = False
            while k > 0:  # the tables: a schema and a table name each
                if i >= length or i + 1 + p[i] >= length:
                    break
                schema_len = p[i]
                table_len = p[i + 1 + schema_len]
                if i + 2 + schema_len + table_len > length:
                    break
                if schema_len == 11 and memcmp(p + i + 1, b"rdma_bridge", 11) == 0:
                    if table_len != 9 or memcmp(p + i + 2 + schema_len, b"heartbeat", 9) != 0 or \
                            p[pos + 24] != 1 or p[pos + 25] != 0:
                        break  # a repair, a checksum, another channel's table: the general path
                    beat = True
                elif my is not None and not self.transactional(p + i + 1, schema_len, p + i + 2 + schema_len,
                                                               table_len):
                    break  # a table the general path has not applied yet, or a non-transactional one
                i += 2 + schema_len + table_len
                k -= 1
            if k or i >= length:
                break
            if my is None:
                if query_bytes(total + length - i) > room or not self.add(gtid):
                    break
            else:
                cost = MYSQL_TXN_BYTES + p[1] + 4 * ((length - i + 2) // 3) + self.position_bytes_max
                if sent + cost > room:
                    break
                sent += cost
                hi += 1
            self.room_for(first + n + 1)
            span = self.spans + SPAN * n
            span[SPAN_DATA], span[SPAN_LEN] = DATA_OFFSET + at + HEADER_BYTES + i, length - i
            span[SPAN_GTID], span[SPAN_GTID_LEN] = DATA_OFFSET + at + HEADER_BYTES + 2, p[1]
            self.stamps[4 * (first + n) + 2], self.stamps[4 * (first + n) + 3] = rd64(p + pos), rd64(p + pos + 8)
            if beat:
                beats += 1
                beat_at = n
            n += 1
            events += count
            total += length - i
            at = (at + framed) % size
            expected += 1
            span[SPAN_AT], span[SPAN_EVENTS], span[SPAN_BEATS], span[SPAN_BEAT] = at, events, beats, beat_at
        if not n:
            return NOTHING
        saved_hi = hi - n  # the carried interval's end before the group (the group may have named it)
        picked = now_ns(CLOCK_REALTIME)
        self.picked_ns = picked
        if my is None:
            pos = self.update_event(position, saved_seq + n, picked // 1000)
            o_len = query_bytes(total + len(self.position_map) + pos)
        else:
            o_len, answers = sent + MYSQL_GROUP_BYTES, 3 * n + 2  # at most: each position at its longest
        packet = <char *>malloc(5 + o_len)
        if packet == NULL:
            raise MemoryError()
        try:
            packet[3], packet[4] = 0, 3  # sequence id 0, COM_QUERY
            if my is None:
                memcpy(packet + 5, b"BINLOG '", 8)
                o = packet + 13
                for i in range(n):
                    span = self.spans + SPAN * i
                    o = bridge_b64_into(o, b + span[SPAN_DATA], span[SPAN_LEN], &carry, &held)
                o = bridge_b64_into(o, <const uint8_t *>PyBytes_AS_STRING(self.position_map),
                                    len(self.position_map), &carry, &held)
                o = bridge_b64_into(o, position, pos, &carry, &held)
                o = bridge_b64_end(o, carry, held)
                memcpy(o, b"';COMMIT", 8)
                o += 8
            else:
                o = packet + 5
                memcpy(o, b"COMMIT", 6)
                o += 6
                for i in range(n):
                    span = self.spans + SPAN * i
                    memcpy(o, b";SET @@SESSION.GTID_NEXT='", 26)
                    memcpy(o + 26, b + span[SPAN_GTID], span[SPAN_GTID_LEN])
                    o += 26 + span[SPAN_GTID_LEN]
                    memcpy(o, b"';BINLOG '", 10)
                    o += 10
                    carry, held = 0, 0
                    o = bridge_b64_into(o, b + span[SPAN_DATA], span[SPAN_LEN], &carry, &held)
                    o = bridge_b64_into(o, <const uint8_t *>PyBytes_AS_STRING(self.position_map),
                                        len(self.position_map), &carry, &held)
                    pos = self.update_event(position, saved_seq + i + 1, picked // 1000, PyBytes_AS_STRING(before),
                                            len(before), saved_hi + i + 1, PyBytes_AS_STRING(after), len(after))
                    o = bridge_b64_into(o, position, pos, &carry, &held)
                    o = bridge_b64_end(o, carry, held)
                    memcpy(o, b"';COMMIT", 8)
                    o += 8
                memcpy(o, b";SET @@SESSION.GTID_NEXT='AUTOMATIC'", 36)
                o += 36
            o_len = o - (packet + 5)
            wr32(<uint8_t *>packet, <uint32_t>(o_len + 1))  # length (3 bytes), then sequence id 0
            packet[3] = 0
            with nogil:
                status = round_trip(fd, tcp, packet, 5 + o_len, answers, &oks, &error, &error_len, pl)
        finally:
            free(packet)
        done = n
        if status:
            if error != NULL:
                self.error = PyBytes_FromStringAndSize(<char *>error, error_len)
                free(error)
            # MySQL: those before the last COMMIT answered OK stay committed; else none
            done = (oks - 1) // 3 if my is not None and status == -1 and oks > 0 else 0
            self.seq, self.ndom = saved_seq, saved_ndom
            memcpy(self.dom, saved_dom, sizeof(saved_dom))
            memcpy(self.srv, saved_srv, sizeof(saved_srv))
            memcpy(self.dseq, saved_dseq, sizeof(saved_dseq))
            self.given_back = n - done
        if my is not None:
            my.hi = saved_hi + done
        if done:
            span = self.spans + SPAN * (done - 1)
            done_ns = now_ns(CLOCK_REALTIME)
            for i in range(first, first + done):
                self.stamps[4 * i], self.stamps[4 * i + 1] = picked, done_ns
            at, expected = span[SPAN_AT], self.expected_seq + done
            wr64(b + ACK_SEQ_AT, expected - 1)
            wr32(b + TAIL_AT, <uint32_t>at)
            self.seq = saved_seq + done
            self.tail, self.expected_seq = at, expected
            self.groups += 1
            self.largest = max(self.largest, done)
            self.txns += done
            self.beats += span[SPAN_BEATS]
            self.events += span[SPAN_EVENTS]
            self.last_gtid = PyUnicode_DecodeASCII(<char *>b + span[SPAN_GTID], span[SPAN_GTID_LEN], NULL)
            if span[SPAN_BEAT] >= 0:
                beat_at = span[SPAN_BEAT]
                self.heartbeat = PyBytes_FromStringAndSize(<char *>b + self.spans[SPAN * beat_at + SPAN_DATA],
                                                           self.spans[SPAN * beat_at + SPAN_LEN])
                self.heartbeat_ns = done_ns
        if status:
            return FAILED if status == -1 else LOST
        return n

    cdef bint transactional(self, const uint8_t *schema, Py_ssize_t schema_len, const uint8_t *table,
                            Py_ssize_t table_len) except -1:
        """The applier knows this table and it is transactional (MySQL: its rows may share
        a transaction with the position)."""
        try:
            name = (PyUnicode_DecodeUTF8(<char *>schema, schema_len, NULL),
                    PyUnicode_DecodeUTF8(<char *>table, table_len, NULL))
        except UnicodeDecodeError:
            return False
        return self.engines.get(name) is False

    def record_stages(self, stages):
        cdef Py_ssize_t i
        cdef uint64_t *t
        record = stages.record
        for i in range(self.txns):
            t = self.stamps + 4 * i
            record("apply", (<double>t[1] - <double>t[0]) / 1000)
            if t[3]:
                record("deliver", (<double>t[0] - <double>t[3]) / 1000)
                record("bridge", (<double>t[1] - <double>t[2]) / 1000)
