# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The position the compiled apply lane carries and writes (_position.pxd): GTID text read
from a frame (MariaDB's domain-server-seq, MySQL's number after the uuid), the MariaDB
set grown transaction by transaction, and the position's UPDATE_ROWS event, byte for
byte the twin's (bridge.apply.lane, bridge.apply.binlog.build.PositionTable.update).
"""

from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from bridge.wire.native_c cimport bridge_crc32, bridge_crc32_init, wr32, wr64

bridge_crc32_init()


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


cdef bint add_gtid(Domains *d, const uint64_t *g) noexcept nogil:
    """The GTID (domain, server, seq) ``g`` as its domain's last: False when it would be a
    domain past DOMAINS (the set is then the general path's)."""
    cdef int i, j
    for i in range(d.n):
        if d.dom[i] == g[0]:
            d.srv[i], d.dseq[i] = <uint32_t>g[1], g[2]
            return True
        if d.dom[i] > g[0]:
            if d.n >= DOMAINS:
                return False
            j = d.n
            while j > i:
                d.dom[j], d.srv[j], d.dseq[j] = d.dom[j - 1], d.srv[j - 1], d.dseq[j - 1]
                j -= 1
            d.dom[i], d.srv[i], d.dseq[i] = <uint32_t>g[0], <uint32_t>g[1], g[2]
            d.n += 1
            return True
    if d.n >= DOMAINS:
        return False
    d.dom[d.n], d.srv[d.n], d.dseq[d.n] = <uint32_t>g[0], <uint32_t>g[1], g[2]
    d.n += 1
    return True


cdef char *_write_uint(char *o, uint64_t v) noexcept nogil:
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


cdef char *_write_domains(char *g, const Domains *d) noexcept nogil:
    """The MariaDB set as text: domain-server-seq, comma-separated."""
    cdef int i
    for i in range(d.n):
        if i:
            g[0] = 44  # ","
            g += 1
        g = _write_uint(g, d.dom[i])
        g[0] = 45
        g = _write_uint(g + 1, d.srv[i])
        g[0] = 45
        g = _write_uint(g + 1, d.dseq[i])
    return g


cdef Py_ssize_t _write_timestamp(uint8_t *o, int digits, uint64_t now_us) noexcept nogil:
    """TIMESTAMP2 of ``digits`` fractional digits (my_timestamp_to_binary): its bytes."""
    cdef uint64_t seconds = now_us // 1000000, micros = now_us % 1000000, fraction, scale = 1
    cdef int width = (digits + 1) // 2, k, _step
    o[0], o[1], o[2], o[3] = seconds >> 24, seconds >> 16, seconds >> 8, seconds
    for _step in range(6 - digits):
        scale *= 10
    fraction = micros - micros % scale
    scale = 1
    for _step in range(6 - 2 * width):
        scale *= 10
    fraction //= scale
    for k in range(width):
        o[4 + width - 1 - k] = <uint8_t>(fraction >> (8 * k))
    return 4 + width


cdef Py_ssize_t position_event(uint8_t *o, const EventForm *form, const Domains *d, uint64_t seq, uint64_t now_us,
                               const char *before, Py_ssize_t nb, uint64_t hi, const char *after,
                               Py_ssize_t na) noexcept nogil:
    """The position's UPDATE_ROWS event into ``o`` (POSITION_MAX bytes): its length. Its
    GTID set: the MariaDB domains ``d`` (``before`` NULL), or ``before``, ``hi`` (0: none),
    ``after`` (MySQL: the set's text around the interval the lane grows)."""
    cdef Py_ssize_t at = 19, i
    cdef char *g
    memcpy(o + at, form.key, form.key_len)
    at += form.key_len
    o[at] = 0
    wr64(o + at + 1, seq)
    at += 9
    g = <char *>o + at + 2
    if before != NULL:
        memcpy(g, before, nb)
        g += nb
        if hi:
            g = _write_uint(g, hi)
        memcpy(g, after, na)
        g += na
    else:
        g = _write_domains(g, d)
    i = g - (<char *>o + at + 2)
    o[at], o[at + 1] = <uint8_t>i, <uint8_t>(i >> 8)
    at += 2 + i
    memset(o + at, 0, 8)
    at += 8
    at += _write_timestamp(o + at, form.digits, now_us)
    if form.checksum:
        at += 4
    memset(o, 0, 4)
    o[4] = <uint8_t>form.update_type
    wr32(o + 5, form.server_id)
    wr32(o + 9, <uint32_t>at)
    memset(o + 13, 0, 6)
    if form.checksum:
        wr32(o + at - 4, bridge_crc32(o, at - 4))
    return at
