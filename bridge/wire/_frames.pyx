# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""What the compiled binlog-to-ring paths share (declared in _frames.pxd): a common
transaction scanned in the dump's packets into spans (no Python object), its compact
payload and frame written into a ring mirror, and a frame's crc32c. The twins of the
scan and the placement are bridge.wire.hotpath's ``scan_transaction`` and ``place_run``.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcmp, memcpy, memset

from bridge.wire.layouts cimport (BINLOG_HEADER, COMPACT, DATA_OFFSET, HEADER_BYTES, KIND_PAD, KIND_TXN,
                                  MARIADB_GTID_EVENT, MIN_FRAME_BYTES, MYSQL_GTID_EVENT, QUERY_EVENT, SIZE_AT,
                                  TABLE_MAP_EVENT, VERBATIM, XID_EVENT)
from bridge.wire.native_c cimport (CLOCK_REALTIME, bridge_crc_feed, bridge_crc_init, now_ns, rd32, rd64,
                                   store_release_u64, wr32, wr64)

bridge_crc_init()


cdef uint32_t frame_crc(const uint8_t *head, const void *payload, size_t n) noexcept nogil:
    """crc32c of a header (its reserved and crc fields zeroed, as the twin packs it)
    followed by the payload."""
    cdef uint8_t h[HEADER_BYTES]
    memcpy(h, head, HEADER_BYTES)
    memset(h + 2, 0, 2)
    memset(h + 16, 0, 4)
    return ~bridge_crc_feed(bridge_crc_feed(0xFFFFFFFFu, h, HEADER_BYTES), payload, n)


cdef int gtid_text(const uint8_t *e, Py_ssize_t size, char *out, int *out_len) noexcept nogil:
    """The text of the GTID event ``e`` into ``out`` (GTID_TEXT bytes; the twin's
    bridge.wire.binlog.parse_gtid), its length into ``out_len``: which kind it is."""
    cdef const uint8_t *u = e + BINLOG_HEADER + 1
    if e[4] == MARIADB_GTID_EVENT and size >= BINLOG_HEADER + 13:
        out_len[0] = snprintf(out, GTID_TEXT, "%u-%u-%llu", rd32(e + BINLOG_HEADER + 8), rd32(e + 5),
                              <unsigned long long>rd64(e + BINLOG_HEADER))
        return GTID_STANDALONE if e[BINLOG_HEADER + 12] & 1 else GTID_MARIADB
    if e[4] == MYSQL_GTID_EVENT and size >= BINLOG_HEADER + 25:
        out_len[0] = snprintf(out, GTID_TEXT,
                              "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x:%llu",
                              u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                              u[14], u[15], <unsigned long long>rd64(e + BINLOG_HEADER + 17))
        return GTID_MYSQL
    return GTID_NONE


cdef bint is_begin_query(const uint8_t *e, Py_ssize_t size) noexcept nogil:
    """A QUERY event of the statement BEGIN (the twin's bridge.wire.hotpath.is_begin)."""
    cdef Py_ssize_t at
    if size < BINLOG_HEADER + 13 or e[4] != QUERY_EVENT:
        return False
    at = BINLOG_HEADER + 13 + (e[BINLOG_HEADER + 11] | (e[BINLOG_HEADER + 12] << 8)) + e[BINLOG_HEADER + 8] + 1
    return (size - at == 5 or size - at == 9) and memcmp(e + at, b"BEGIN", 5) == 0


cdef bint _ascii_name(const uint8_t *b, Py_ssize_t at, Py_ssize_t end, Py_ssize_t *out_len) noexcept nogil:
    """The name whose length byte is at ``at`` in an event ending at ``end``, cut at the
    event's end as the twin's slice cuts it; False where it is not ASCII."""
    cdef Py_ssize_t n = b[at], i
    if at + 1 + n > end:
        n = end - at - 1
    for i in range(n):
        if b[at + 1 + i] >= 0x80:
            return False
    out_len[0] = n
    return True


cdef bint _table_names(const uint8_t *b, Py_ssize_t p, Py_ssize_t size, Scanned *s) noexcept nogil:
    """A TABLE_MAP event's schema and table (ASCII, the twin's slices) noted in ``s``."""
    cdef Py_ssize_t ev_end = p + size, n_at = p + BINLOG_HEADER + 8
    cdef int k = 2 * s.tables
    if n_at >= ev_end or not _ascii_name(b, n_at, ev_end, &s.name_len[k]):
        return False
    s.name_at[k] = n_at + 1
    n_at += b[n_at] + 2
    if n_at >= ev_end or not _ascii_name(b, n_at, ev_end, &s.name_len[k + 1]):
        return False
    s.name_at[k + 1] = n_at + 1
    s.names_len += 2 + s.name_len[k] + s.name_len[k + 1]
    s.tables += 1
    return True


cdef int scan_one(const uint8_t *b, Py_ssize_t end, uint8_t seq_id, bint semi_sync, Py_ssize_t max_bytes,
                  bint verbatim, Scanned *s) noexcept nogil:
    """``_scan(gtid_first=True, run_rules=True, verbatim)`` of the twin: a common transaction
    whole from ``b`` into ``s`` (spans, not copies), or why not. ``verbatim``: the GTID
    event, a BEGIN and the XID noted too, and counted as its events in ``rows``."""
    cdef DumpPacket k
    cdef Py_ssize_t p, size
    cdef bint gtid_first = True
    cdef int got, kind, begin = BEGIN_NONE
    k.at, k.seq_id, k.ack = 0, seq_id, -1
    s.rows, s.spans, s.data_len, s.tables, s.names_len = 0, 0, 0, 0, 0
    s.verbatim, s.gtid_size, s.begin_size, s.xid_size = verbatim, 0, 0, 0
    while True:
        got = next_event(b, end, semi_sync, &k)
        s.ack = k.ack
        if got != SCAN_EVENT:
            return got
        p, size = k.event, k.size
        if gtid_first:
            kind = gtid_text(b + p, size, s.gtid, &s.gtid_len)
            if kind != GTID_MARIADB and kind != GTID_MYSQL:
                return SCAN_NO  # not a GTID this reads, or a standalone one (DDL)
            gtid_first, begin = False, (BEGIN_MUST if kind == GTID_MYSQL else BEGIN_NONE)
            s.gtid_at, s.gtid_size = p, size
            continue
        if begin == BEGIN_MUST:
            if not is_begin_query(b + p, size):
                return SCAN_NO  # MySQL's DDL (its QUERY after the GTID), or anything else
            begin = BEGIN_NONE
            s.begin_at, s.begin_size = p, size
            continue
        if k.etype == XID_EVENT:
            if not s.rows:
                return SCAN_NO
            s.taken, s.seq_id, s.position = k.at, k.seq_id, k.position
            if verbatim:
                s.xid_at, s.xid_size = p, size
                s.rows = s.spans + 2 + (s.begin_size > 0)
            return SCAN_WHOLE
        if s.spans >= RUN_EVENTS:
            return SCAN_NO
        if k.etype == TABLE_MAP_EVENT:
            if not _table_names(b, p, size, s):
                return SCAN_NO
        elif scanned_row_event(k.etype):
            s.rows += 1
        else:
            return SCAN_NO
        s.start[s.spans], s.size[s.spans] = p, size
        s.spans += 1
        s.data_len += size
        if s.data_len + (s.gtid_size + s.begin_size if verbatim else 0) >= max_bytes:
            return SCAN_NO


cdef uint8_t *_fill_head(uint8_t *o, uint8_t tag, const Scanned *s) noexcept nogil:
    """What both payloads of ``s`` begin with at ``o`` (the tag, the GTID, the stamps: now,
    no format event); where the rest goes."""
    cdef uint64_t now = now_ns(CLOCK_REALTIME)
    o[0] = tag
    o[1] = <uint8_t>s.gtid_len
    memcpy(o + 2, s.gtid, s.gtid_len)
    o += 2 + s.gtid_len
    wr64(o, now)
    wr64(o + 8, now)
    wr32(o + 16, 0)
    return o + 20


cdef Py_ssize_t _fill_verbatim(uint8_t *o, const uint8_t *b, const Scanned *s) noexcept nogil:
    """The verbatim payload of ``s`` (encode_verbatim's layout, no format event) at ``o``."""
    cdef uint8_t *start = o
    cdef int i
    o = _fill_head(o, VERBATIM, s)
    o[0] = <uint8_t>s.file_len
    memcpy(o + 1, s.file, s.file_len)
    o += 1 + s.file_len
    wr32(o, s.rows)
    o += 4
    memcpy(o, b + s.gtid_at, s.gtid_size)
    o += s.gtid_size
    if s.begin_size:
        memcpy(o, b + s.begin_at, s.begin_size)
        o += s.begin_size
    for i in range(s.spans):
        memcpy(o, b + s.start[i], s.size[i])
        o += s.size[i]
    memcpy(o, b + s.xid_at, s.xid_size)
    return o + s.xid_size - start


cdef Py_ssize_t _fill_scanned(uint8_t *o, const uint8_t *b, const Scanned *s) noexcept nogil:
    """The compact payload of ``s`` (encode_compact's layout, no format event) at ``o``, or
    the verbatim one."""
    cdef uint8_t *start = o
    cdef int i
    if s.verbatim:
        return _fill_verbatim(o, b, s)
    o = _fill_head(o, COMPACT, s)
    wr32(o, s.rows)
    o[4] = s.tables & 0xFF
    o[5] = s.tables >> 8
    o += 6
    for i in range(2 * s.tables):
        o[0] = <uint8_t>s.name_len[i]
        memcpy(o + 1, b + s.name_at[i], s.name_len[i])
        o += 1 + s.name_len[i]
    for i in range(s.spans):
        memcpy(o, b + s.start[i], s.size[i])
        o += s.size[i]
    return o - start


cdef Py_ssize_t put_frame(uint8_t *at, uint8_t kind, uint8_t flags, uint64_t seq, uint32_t epoch,
                          Py_ssize_t n) noexcept nogil:
    """The header of the payload already at ``at + HEADER_BYTES`` (place_frame's), then,
    with release ordering, its commit word; the bytes the frame takes."""
    cdef Py_ssize_t span = frame_span(<uint32_t>n)
    at[0], at[1], at[2], at[3] = kind, flags, 0, 0
    wr32(at + 4, <uint32_t>n)
    wr64(at + 8, seq)
    wr32(at + 20, epoch)
    wr32(at + 16, frame_crc(at, at + HEADER_BYTES, n))
    store_release_u64(at + span - TRAILER_BYTES, commit_word(seq, epoch))
    return span


cdef bint is_heartbeat(const uint8_t *b, const Scanned *s, bytes schema, bytes table):
    """Whether ``s`` changes just the heartbeat table (``schema``.``table``)."""
    return s.tables == 1 and s.name_len[0] == len(schema) and s.name_len[1] == len(table) and \
        memcmp(b + s.name_at[0], PyBytes_AS_STRING(schema), s.name_len[0]) == 0 and \
        memcmp(b + s.name_at[1], PyBytes_AS_STRING(table), s.name_len[1]) == 0


cdef Py_ssize_t place_scanned(uint8_t *o, Py_ssize_t size, Py_ssize_t *head, Py_ssize_t room, uint64_t seq,
                              uint32_t epoch, const uint8_t *b, const Scanned *s) noexcept nogil:
    """Frame ``s`` into the ring data area ``o`` of ``size`` bytes at ``*head`` (a PAD, or
    an implicit wrap, first where the ring's end comes first; ``*head`` then where the
    TXN frame starts): the bytes it took, the gap included; 0 when it does not fit the
    ``room`` left or is over half the ring (nothing written). The head after it is
    ``(*head as given + the bytes it took) % size``."""
    cdef Py_ssize_t plen = payload_len(s)
    cdef Py_ssize_t need = frame_span(<uint32_t>plen)
    cdef Py_ssize_t at = head[0]
    cdef Py_ssize_t gap = size - at if at + need > size else 0
    if need > size // 2 or gap + need > room:
        return 0
    if gap >= MIN_FRAME_BYTES:  # the PAD carries the seq of the frame after it
        memset(o + at + HEADER_BYTES, 0, gap - MIN_FRAME_BYTES)
        put_frame(o + at, KIND_PAD, 0, seq, epoch, gap - MIN_FRAME_BYTES)
    if gap:
        at = 0
    _fill_scanned(o + at + HEADER_BYTES, b, s)
    put_frame(o + at, KIND_TXN, 0, seq, epoch, plen)
    head[0] = at
    return gap + need


def ring_take(region, Py_ssize_t tail, uint64_t expected, uint32_t epoch):
    """The compiled consumer's look at a ring ``region`` (header and data area) for the frame
    of seq ``expected`` at data offset ``tail``: (where it starts, the bytes it takes) as
    ``ring_frame`` finds it, else None; and whether ``ring_ready`` says it is there. For
    the tests that hold it beside its twin (bridge.ring.consumer.next_frame, frame_ready)."""
    cdef Py_buffer r
    cdef Py_ssize_t at = tail, framed = 0
    cdef const uint8_t *h
    cdef bint ready
    PyObject_GetBuffer(region, &r, PyBUF_SIMPLE)
    try:
        if r.len < DATA_OFFSET or tail < 0 or tail >= rd32(<const uint8_t *>r.buf + SIZE_AT) or \
                r.len < DATA_OFFSET + rd32(<const uint8_t *>r.buf + SIZE_AT):
            raise ValueError(f"ring take: a region of {r.len} bytes, tail {tail}")
        h = ring_frame(<const uint8_t *>r.buf, rd32(<const uint8_t *>r.buf + SIZE_AT), &at, expected, epoch, &framed)
        ready = ring_ready(<const uint8_t *>r.buf, tail, expected, epoch)
    finally:
        PyBuffer_Release(&r)
    return ((at, framed) if h != NULL else None), ready
