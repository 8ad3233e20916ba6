# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.apply.lane`` (read its docstring): the same class, the
same results, the same bytes on the wire. The scan of the ring and the BINLOG text are C
here; the position it writes is bridge/apply/lane/_position.pyx, the waits (the doorbell, the
replica's answers, both without the GIL) bridge/apply/lane/_io.pyx. Built by the normal
install (setup.py, Cython); when it is missing bridge.apply.lane uses the twin.
"""

import socket as _socket

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy
from posix.time cimport nanosleep, timespec

from bridge.apply.lane import lane as _twin
from bridge.apply.lane import mysqlpos as _mysqlpos

from bridge.apply.lane._io cimport (ANSWERS_WAIT_MS, FAILED_ANSWER, OK_BYTES_MIN, SLEEP_CANNOT, SLEEP_RUNG,
                                    round_trip, sleep_on)
from bridge.apply.lane._position cimport DOMAINS, POSITION_MAX, add_gtid, mysql_gno, parse_gtid, position_event
from bridge.transport._receiver cimport Receiver, give, take
from bridge.transport.posix_io cimport SO_RCVLOWAT, SOL_SOCKET, setsockopt
from bridge.transport.verbs_c cimport bv_sleeper
from bridge.wire._frames cimport ring_frame, ring_ready
from bridge.wire.layouts cimport (ACK_SEQ_AT, COMPACT, DATA_OFFSET, HEADER_BYTES, KIND_TXN, SIZE_AT, TAIL_AT,
                                  UPDATE_ROWS_V1)
from bridge.wire.native_c cimport (CLOCK_MONOTONIC, CLOCK_REALTIME, bridge_b64_end, bridge_b64_into, fence_acquire,
                                   now_ns, rd32, rd64, wr32, wr64)

NOTHING, FAILED, LOST = _twin.NOTHING, _twin.FAILED, _twin.LOST
MAX_DOMAINS = _twin.MAX_DOMAINS

_copied = (DOMAINS, OK_BYTES_MIN, ANSWERS_WAIT_MS, MYSQL_SET_MAX, MYSQL_TXN_BYTES, MYSQL_GROUP_BYTES, MAX_QUERY)
if _copied != (_twin.MAX_DOMAINS, _twin.OK_BYTES_MIN, _twin.ANSWERS_WAIT_MS, _mysqlpos.MYSQL_SET_MAX,
               _twin.MYSQL_TXN_BYTES, _twin.MYSQL_GROUP_BYTES, _twin.MAX_QUERY):
    raise ImportError("bridge.apply.lane._lane was built from constants its twin no longer has; rebuild it")


cdef inline Py_ssize_t query_bytes(Py_ssize_t events) noexcept nogil:
    return 8 + 4 * ((events + 2) // 3) + 1 + 7


cdef class Lane:
    def __init__(self, channel_key, position_map, int digits, checksum, uint32_t server_id, engines=None,
                 int update_type=UPDATE_ROWS_V1):
        self.channel_key, self.position_map = bytes(channel_key), bytes(position_map)
        self.digits, self.checksum, self.server_id, self.update_type = digits, bool(checksum), server_id, update_type
        self.form.key, self.form.key_len = <const uint8_t *>PyBytes_AS_STRING(self.channel_key), len(self.channel_key)
        self.form.digits, self.form.checksum, self.form.server_id = digits, self.checksum, server_id
        self.form.update_type = update_type
        self.engines, self._mysql = engines, None
        self.domains.n, self.seq, self.tail, self.expected_seq = 0, 0, 0, 0
        self.txns = self.beats = self.events = self.groups = self.largest = self.given_back = 0
        self.last_gtid, self.heartbeat, self.error, self.picked_ns, self.heartbeat_ns = "", None, b"", 0, 0
        self.position_bytes_max = query_bytes(len(self.position_map) + 19 + len(self.channel_key) + 1 + 8 + 2
                                              + MAX_DOMAINS * 63 + 8 + 4 + 3 + 4) - query_bytes(0)

    def __dealloc__(self):
        free(self.stamps)
        free(self.spans)

    # --- the position the lane carries ----------------------------------------

    def set_position(self, seq, gtids):
        self._mysql = _mysqlpos.mysql_position(gtids, self.engines is not None)
        parts = [] if self._mysql is not None else _twin.mariadb_parts(gtids)
        if parts is None:
            self.domains.n = 0
            return False
        self.domains.n = len(parts)
        for i, (d, s, n) in enumerate(parts):
            self.domains.dom[i], self.domains.srv[i], self.domains.dseq[i] = d, s, n
        self.seq = seq
        return True

    def gtid_parts(self):
        cdef int i
        return [(self.domains.dom[i], self.domains.srv[i], self.domains.dseq[i]) for i in range(self.domains.n)]

    @property
    def mysql(self):
        return self._mysql is not None

    @property
    def gtids(self):
        if self._mysql is not None:
            return self._mysql.text().decode()
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self.gtid_parts())

    # --- the round trip -------------------------------------------------------------

    def position_events(self, seq, now_us, gtids=None):
        """The position's TABLE_MAP and UPDATE_ROWS events (as bridge.apply.binlog.build.PositionTable),
        with ``gtids`` (bytes; default: the set the lane carries)."""
        cdef uint8_t event[POSITION_MAX]
        cdef Py_ssize_t n
        cdef bytes text
        if gtids is None and self._mysql is None:
            n = position_event(event, &self.form, &self.domains, seq, now_us, NULL, 0, 0, NULL, 0)
        else:
            text = self._mysql.text() if gtids is None else bytes(gtids)
            if len(text) > POSITION_MAX - 256:
                raise ValueError(f"position: a GTID set of {len(text)} bytes")
            n = position_event(event, &self.form, &self.domains, seq, now_us, PyBytes_AS_STRING(text), len(text), 0,
                               b"", 0)
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

    # --- a run: groups until the ring has nothing the lane takes, or its time is up

    def run(self, region, Py_ssize_t tail, uint64_t expected_seq, uint32_t epoch, sock, long max_txns,
            long max_events, Py_ssize_t max_bytes, Py_ssize_t limit, int doorbell=-1, int wait_ms=0,
            Receiver receiver=None, sleeper=None, long spin_us=0, int busy_ms=0, interrupt_fd=None):
        """``receiver``: the tcp data connection's compiled receiver (bridge.transport._receiver)
        of this ring: where the run would sleep it holds the connection and carries out
        the placements itself (one thread woken per transaction, not two), until it returns.
        ``sleeper``: rdma, the queue pair an idle run sleeps through (its ``lane_sleeper``,
        bridge_verbs.h), held by the caller while the run lasts. ``spin_us``: after the last
        frame the ring is polled this long, a zero sleep apart (as the twin), before it sleeps.
        ``busy_ms``, ``interrupt_fd``: as the twin's (bridge.apply.lane.lane)."""
        cdef Py_buffer r
        cdef Placements *pl = NULL
        cdef bint held = False
        cdef int slept
        cdef timespec zero
        cdef uint8_t *b
        cdef int got, fd = sock.fileno()
        cdef bint tcp = sock.family != _socket.AF_UNIX
        cdef uint64_t deadline = now_ns(CLOCK_MONOTONIC) + <uint64_t>wait_ms * 1000000, now, idle_since = 0
        cdef uint64_t spin_ns = <uint64_t>spin_us * 1000 if spin_us > 0 else 0
        cdef uint64_t busy_ns = <uint64_t>busy_ms * 1000000 if busy_ms > 0 else 0
        cdef int interrupt = interrupt_fd if interrupt_fd is not None else -1
        cdef int lowat = 2 * OK_BYTES_MIN, one = 1
        cdef bv_sleeper *verbs = <bv_sleeper *><uintptr_t>((sleeper.lane_sleeper or 0) if sleeper is not None else 0)
        zero.tv_sec, zero.tv_nsec = 0, 0
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
                    if ring_ready(b, self.tail, self.expected_seq, epoch) or now >= deadline or \
                            doorbell < 0 and receiver is None and verbs == NULL:
                        return self.txns  # the next frame is the general path's, or nothing to wait on
                    if idle_since == 0:
                        idle_since = now
                    if now - idle_since < spin_ns:
                        with nogil:
                            nanosleep(&zero, NULL)  # --spin-us: a zero sleep lasts Linux's timer slack, ~50-70 µs
                        continue
                    if receiver is not None and not held:
                        pl = &receiver.s
                        with nogil:
                            held = take(pl, <int>((deadline - now) // 1000000) + 1)
                        if not held:
                            pl, receiver = NULL, None  # the receiver thread serves it this run
                            if doorbell < 0:
                                return self.txns
                        now = now_ns(CLOCK_MONOTONIC)
                    with nogil:
                        slept = sleep_on(b, doorbell, self.tail, self.expected_seq, epoch,
                                         <int>((deadline - now) // 1000000) + 1, pl, verbs, interrupt)
                    if slept == SLEEP_CANNOT:
                        return self.txns  # rdma: the queue pair cannot sleep (closed, broken); the caller polls
                    if slept == SLEEP_RUNG and not ring_ready(b, self.tail, self.expected_seq, epoch):
                        return self.txns  # rung with nothing to take: the host's interrupt (stop, a new session)
                else:
                    idle_since = 0
                    if busy_ns and now + busy_ns < deadline:
                        deadline = now + busy_ns
                    if now >= deadline:
                        return self.txns
        finally:
            if held:
                give(pl)
            if tcp:
                setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(int))
            PyBuffer_Release(&r)

    # --- one group: taken from the ring, one round trip, settled ------------------------

    cdef int group(self, uint8_t *b, uint32_t epoch, int fd, bint tcp, long max_txns, long max_events,
                   Py_ssize_t max_bytes, Py_ssize_t limit, Placements *pl) except -100:
        """One group from ``self.tail``: its frame count, NOTHING, FAILED or LOST."""
        cdef Group g
        cdef Domains saved = self.domains
        cdef uint64_t saved_seq = self.seq, picked, saved_hi
        cdef int status = 0, answers = 2, oks = 0
        cdef Py_ssize_t n_max, room, error_len = 0
        cdef uint8_t *error = NULL
        cdef char *packet
        cdef uint8_t position[POSITION_MAX]
        cdef Py_ssize_t position_len = 0
        cdef object my = self._mysql  # MySQL: each transaction on its own, with its GTID
        self.my_key, self.my_before, self.my_after = None, b"", b""
        g.first, g.n, g.events, g.beats, g.total, g.sent, g.hi = self.txns, 0, 0, 0, 0, 0, 0
        if my is not None:
            g.hi = my.hi
            if my.key is not None:
                self.my_key, self.my_before, self.my_after = my.key.encode(), my.before, my.after
        fence_acquire()  # the ring read as it is now: a frame after its own header (its crc checks both)
        room = min(limit, <Py_ssize_t>MAX_QUERY - 1) - (self.position_bytes_max if my is None else MYSQL_GROUP_BYTES)
        self._take(b, epoch, max_txns, max_events, max_bytes, room, &g)
        if not g.n:
            return NOTHING
        saved_hi = g.hi - g.n  # the carried interval's end before the group (the group may have named it)
        picked = now_ns(CLOCK_REALTIME)
        self.picked_ns = picked
        if my is None:  # the position first: the packet is allocated to size (small ones come from malloc's cache)
            position_len = position_event(position, &self.form, &self.domains, saved_seq + g.n, picked // 1000, NULL,
                                          0, 0, NULL, 0)
            n_max = query_bytes(g.total + len(self.position_map) + position_len)
        else:
            n_max = g.sent + MYSQL_GROUP_BYTES  # each position at its longest
        packet = <char *>malloc(5 + n_max)
        if packet == NULL:
            raise MemoryError()
        try:
            if my is None:
                n_max = self._mariadb_query(packet + 5, b, &g, position, position_len) - (packet + 5)
            else:
                n_max = self._mysql_query(packet + 5, b, &g, saved_seq, saved_hi, picked) - (packet + 5)
                answers = 3 * g.n + 2
            wr32(<uint8_t *>packet, <uint32_t>(n_max + 1))  # length (3 bytes), then sequence id 0, COM_QUERY
            packet[3], packet[4] = 0, 3
            with nogil:
                status = round_trip(fd, tcp, packet, 5 + n_max, answers, &oks, &error, &error_len, pl)
        finally:
            free(packet)
        if status:
            if error != NULL:
                self.error = PyBytes_FromStringAndSize(<char *>error, error_len)
                free(error)
            self.seq, self.domains = saved_seq, saved
        return self._settle(b, &g, status, oks, saved_seq, saved_hi)

    cdef int _take(self, const uint8_t *b, uint32_t epoch, long max_txns, long max_events, Py_ssize_t max_bytes,
                   Py_ssize_t room, Group *g) except -1:
        """The transactions of one group, from ``self.tail`` while the group's bounds and the
        query's ``room`` allow and each is the lane's kind: their spans noted (``spans``),
        the GTIDs added to the set carried (MariaDB) or counted on (MySQL)."""
        cdef const uint8_t *h
        cdef const uint8_t *p
        cdef uint32_t size = rd32(b + SIZE_AT), length, count
        cdef uint64_t expected = self.expected_seq
        cdef uint64_t gtid[3]
        cdef Py_ssize_t at = self.tail, framed, pos, rows_at, cost
        cdef Py_ssize_t *span
        cdef bint beat
        cdef Py_ssize_t beat_at = -1
        while g.n < max_txns and g.events < max_events and g.total < max_bytes:
            h = ring_frame(b, size, &at, expected, epoch, &framed)
            if h == NULL or h[0] != KIND_TXN:
                break
            length = rd32(h + 4)
            p = h + HEADER_BYTES
            if length < 30 or p[0] != COMPACT or 2 + p[1] + 26 > length:
                break
            pos = 2 + p[1]
            if rd32(p + pos + 16) != 0:  # a format of its own
                break
            if self._mysql is None and not parse_gtid(p + 2, p[1], gtid):
                break
            if self._mysql is not None and not self._follows(p + 2, p[1], g):
                break
            count = rd32(p + pos + 20)
            rows_at = self._tables(p, pos, length, &beat)
            if rows_at < 0:
                break
            if self._mysql is None:
                if query_bytes(g.total + length - rows_at) > room or not add_gtid(&self.domains, gtid):
                    break
            else:
                cost = MYSQL_TXN_BYTES + p[1] + 4 * ((length - rows_at + 2) // 3) + self.position_bytes_max
                if g.sent + cost > room:
                    break
                g.sent += cost
                g.hi += 1
            self.room_for(g.first + g.n + 1)
            span = self.spans + SPAN * g.n
            span[SPAN_DATA], span[SPAN_LEN] = DATA_OFFSET + at + HEADER_BYTES + rows_at, length - rows_at
            span[SPAN_GTID], span[SPAN_GTID_LEN] = DATA_OFFSET + at + HEADER_BYTES + 2, p[1]
            self.stamps[4 * (g.first + g.n) + 2], self.stamps[4 * (g.first + g.n) + 3] = rd64(p + pos), \
                rd64(p + pos + 8)
            if beat:
                g.beats += 1
                beat_at = g.n
            g.n += 1
            g.events += count
            g.total += length - rows_at
            at = (at + framed) % size
            expected += 1
            span[SPAN_AT], span[SPAN_EVENTS], span[SPAN_BEATS], span[SPAN_BEAT] = at, g.events, g.beats, beat_at
        return 0

    cdef bint _follows(self, const uint8_t *text, Py_ssize_t n, Group *g) except -1:
        """MySQL: the GTID ``text`` is the next of the uuid the lane carries (the group's
        first one may name that uuid)."""
        cdef Py_ssize_t colon = 0
        cdef uint64_t gno = mysql_gno(text, n, &colon)
        my = self._mysql
        if not gno:
            return False
        if self.my_key is None:  # the first transaction names the uuid the lane carries
            try:
                if not my.follow(PyUnicode_DecodeUTF8(<char *>text, colon, NULL)):
                    return False
            except UnicodeDecodeError:
                return False
            self.my_key, self.my_before, self.my_after, g.hi = my.key.encode(), my.before, my.after, my.hi
        return colon == len(self.my_key) and memcmp(text, PyBytes_AS_STRING(self.my_key), colon) == 0 and \
            gno == g.hi + 1

    cdef Py_ssize_t _tables(self, const uint8_t *p, Py_ssize_t pos, uint32_t length, bint *beat) except -2:
        """Where the row events of the compact payload ``p`` start, after its tables (a
        schema and a table name each); -1 where a table is not the lane's: a bridge table but
        the heartbeat (alone), or (MySQL) one the applier does not know transactional.
        ``beat``: it is a heartbeat."""
        cdef int k = p[pos + 24] | (p[pos + 25] << 8)
        cdef Py_ssize_t i = pos + 26, schema_len, table_len
        beat[0] = False
        while k > 0:
            if i >= length or i + 1 + p[i] >= length:
                return -1
            schema_len = p[i]
            table_len = p[i + 1 + schema_len]
            if i + 2 + schema_len + table_len > length:
                return -1
            if schema_len == 11 and memcmp(p + i + 1, b"rdma_bridge", 11) == 0:
                if table_len != 9 or memcmp(p + i + 2 + schema_len, b"heartbeat", 9) != 0 or \
                        p[pos + 24] != 1 or p[pos + 25] != 0:
                    return -1  # a repair, a checksum, another channel's table: the general path
                beat[0] = True
            elif self._mysql is not None and not self.transactional(p + i + 1, schema_len, p + i + 2 + schema_len,
                                                                    table_len):
                return -1  # a table the general path has not applied yet, or a non-transactional one
            i += 2 + schema_len + table_len
            k -= 1
        return -1 if i >= length else i

    cdef char *_mariadb_query(self, char *o, const uint8_t *b, const Group *g, const uint8_t *position,
                              Py_ssize_t n):
        """``BINLOG '<the group's row events, the position's events>';COMMIT`` at ``o`` (``position``:
        its ``n`` bytes): its end."""
        cdef uint32_t carry = 0
        cdef int held = 0, i
        cdef Py_ssize_t *span
        memcpy(o, b"BINLOG '", 8)
        o += 8
        for i in range(g.n):
            span = self.spans + SPAN * i
            o = bridge_b64_into(o, b + span[SPAN_DATA], span[SPAN_LEN], &carry, &held)
        o = bridge_b64_into(o, <const uint8_t *>PyBytes_AS_STRING(self.position_map), len(self.position_map), &carry,
                            &held)
        o = bridge_b64_into(o, position, n, &carry, &held)
        o = bridge_b64_end(o, carry, held)
        memcpy(o, b"';COMMIT", 8)
        return o + 8

    cdef char *_mysql_query(self, char *o, const uint8_t *b, const Group *g, uint64_t saved_seq, uint64_t saved_hi,
                            uint64_t picked):
        """``COMMIT``, then each transaction committed with its GTID (``SET GTID_NEXT``, its row
        events and the position's in one BINLOG, ``COMMIT``), then GTID_NEXT back to
        AUTOMATIC, at ``o``: its end."""
        cdef uint8_t position[POSITION_MAX]
        cdef Py_ssize_t n
        cdef Py_ssize_t *span
        cdef uint32_t carry
        cdef int held, i
        cdef const char *before = PyBytes_AS_STRING(self.my_before)
        cdef const char *after = PyBytes_AS_STRING(self.my_after)
        memcpy(o, b"COMMIT", 6)
        o += 6
        for i in range(g.n):
            span = self.spans + SPAN * i
            memcpy(o, b";SET @@SESSION.GTID_NEXT='", 26)
            memcpy(o + 26, b + span[SPAN_GTID], span[SPAN_GTID_LEN])
            o += 26 + span[SPAN_GTID_LEN]
            memcpy(o, b"';BINLOG '", 10)
            o += 10
            carry, held = 0, 0
            o = bridge_b64_into(o, b + span[SPAN_DATA], span[SPAN_LEN], &carry, &held)
            o = bridge_b64_into(o, <const uint8_t *>PyBytes_AS_STRING(self.position_map), len(self.position_map),
                                &carry, &held)
            n = position_event(position, &self.form, &self.domains, saved_seq + i + 1, picked // 1000, before,
                               len(self.my_before), saved_hi + i + 1, after, len(self.my_after))
            o = bridge_b64_into(o, position, n, &carry, &held)
            o = bridge_b64_end(o, carry, held)
            memcpy(o, b"';COMMIT", 8)
            o += 8
        memcpy(o, b";SET @@SESSION.GTID_NEXT='AUTOMATIC'", 36)
        return o + 36

    cdef int _settle(self, uint8_t *b, const Group *g, int status, int oks, uint64_t saved_seq,
                     uint64_t saved_hi) except -100:
        """The round trip's outcome: the transactions it committed acknowledged in the ring
        and counted (MySQL: those whose COMMIT answered OK before an error; else all or
        none), the rest given back; the group's frame count, FAILED or LOST."""
        cdef Py_ssize_t done = g.n, i
        cdef Py_ssize_t *span
        cdef uint64_t done_ns
        if status:
            done = (oks - 1) // 3 if self._mysql is not None and status == FAILED_ANSWER and oks > 0 else 0
            self.given_back = g.n - done
        if self._mysql is not None:
            self._mysql.hi = saved_hi + done
        if done:
            span = self.spans + SPAN * (done - 1)
            done_ns = now_ns(CLOCK_REALTIME)
            for i in range(g.first, g.first + done):
                self.stamps[4 * i], self.stamps[4 * i + 1] = self.picked_ns, done_ns
            # what is read from the frames first: once acknowledged, the primary side may
            # write over them (a full ring is taken again at once)
            self.last_gtid = PyUnicode_DecodeASCII(<char *>b + span[SPAN_GTID], span[SPAN_GTID_LEN], NULL)
            if span[SPAN_BEAT] >= 0:
                i = span[SPAN_BEAT]
                self.heartbeat = PyBytes_FromStringAndSize(<char *>b + self.spans[SPAN * i + SPAN_DATA],
                                                           self.spans[SPAN * i + SPAN_LEN])
                self.heartbeat_ns = done_ns
            wr64(b + ACK_SEQ_AT, self.expected_seq + done - 1)
            wr32(b + TAIL_AT, <uint32_t>span[SPAN_AT])
            self.seq = saved_seq + done
            self.tail, self.expected_seq = span[SPAN_AT], self.expected_seq + done
            self.groups += 1
            self.largest = max(self.largest, done)
            self.txns += done
            self.beats += span[SPAN_BEATS]
            self.events += span[SPAN_EVENTS]
        if status:
            return FAILED if status == FAILED_ANSWER else LOST
        return g.n

    # --- the run's arrays and what it learned ----------------------------------------

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
