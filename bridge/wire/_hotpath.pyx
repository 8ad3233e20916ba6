# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.wire.hotpath`` (read its docstring): the same
functions, the same results. Each does the common, well-formed case in C; any input
it would have to refuse goes to the pure-Python twin, so errors (type and message)
are the twin's own. Built by the normal install (setup.py, Cython); when it is
missing ``bridge.wire.native`` uses the twin.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from bridge.errors import RemoteProtocolError
from bridge.wire import hotpath as _twin
from bridge.wire.frame import FrameKind

from bridge.wire._frames cimport (BEGIN_MAY, BEGIN_MUST, BEGIN_NONE, GTID_NONE, GTID_STANDALONE, GTID_TEXT,
                                  SCAN_EVENT, SCAN_MORE, SCAN_WHOLE, DumpPacket, Scanned, commit_word, frame_crc,
                                  frame_span, gtid_text, is_begin_query, is_heartbeat, next_event, payload_len,
                                  place_scanned, put_frame, scan_one, scanned_row_event)
from bridge.wire.layouts cimport (BINLOG_HEADER, HEADER_BYTES, MIN_FRAME_BYTES, MYSQL_GTID_EVENT, TABLE_MAP_EVENT,
                                  TRAILER_BYTES, XID_EVENT)
from bridge.wire.native_c cimport (bridge_b64_end, bridge_b64_into, bridge_crc_feed, bridge_crc_init, fence_acquire,
                                   rd32, rd64, wr32, wr64)

bridge_crc_init()


cdef inline bint fits(object v, uint64_t limit):
    """v is an int (an IntEnum too) in [0, limit]."""
    return isinstance(v, int) and 0 <= v <= limit


def crc32c(data, uint32_t value=0):
    """crc32c(data, value) as the crc32c package's (the test compares them)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return ~bridge_crc_feed(~value, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


def encode_compact(gtid, read_ns, ship_ns, fmt, events, tables, data):
    if type(gtid) is not str or type(tables) is not tuple or not fits(read_ns, 0xFFFFFFFFFFFFFFFF) \
            or not fits(ship_ns, 0xFFFFFFFFFFFFFFFF) or not fits(events, 0xFFFFFFFF) or len(tables) > 0xFFFF:
        return _twin.encode_compact(gtid, read_ns, ship_ns, fmt, events, tables, data)
    cdef bytes text = PyUnicode_AsUTF8String(gtid)
    names = []
    cdef Py_ssize_t total = 2 + len(text) + 20 + 6
    for pair in tables:
        if type(pair) is not tuple or len(pair) != 2 or type(pair[0]) is not str or type(pair[1]) is not str:
            return _twin.encode_compact(gtid, read_ns, ship_ns, fmt, events, tables, data)
        for name in pair:
            encoded = PyUnicode_AsUTF8String(name)
            if len(encoded) > 255:
                return _twin.encode_compact(gtid, read_ns, ship_ns, fmt, events, tables, data)
            names.append(encoded)
            total += 1 + len(encoded)
    if len(text) > 255:
        return _twin.encode_compact(gtid, read_ns, ship_ns, fmt, events, tables, data)
    cdef Py_buffer f, d
    PyObject_GetBuffer(fmt, &f, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(data, &d, PyBUF_SIMPLE)
        try:
            out = PyByteArray_FromStringAndSize(NULL, total + f.len + d.len)
            _fill_compact(<uint8_t *>PyByteArray_AS_STRING(out), text, read_ns, ship_ns, &f, events, names, &d)
        finally:
            PyBuffer_Release(&d)
    finally:
        PyBuffer_Release(&f)
    return out


def encode_verbatim(gtid, read_ns, ship_ns, fmt, file, events, data):
    if type(gtid) is not str or type(file) is not bytes or not fits(read_ns, 0xFFFFFFFFFFFFFFFF) \
            or not fits(ship_ns, 0xFFFFFFFFFFFFFFFF) or not fits(events, 0xFFFFFFFF) or len(file) > 255:
        return _twin.encode_verbatim(gtid, read_ns, ship_ns, fmt, file, events, data)
    cdef bytes text = PyUnicode_AsUTF8String(gtid)
    if len(text) > 255:
        return _twin.encode_verbatim(gtid, read_ns, ship_ns, fmt, file, events, data)
    cdef Py_buffer f, d
    cdef uint8_t *o
    cdef Py_ssize_t n = len(text), fn = len(file)
    PyObject_GetBuffer(fmt, &f, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(data, &d, PyBUF_SIMPLE)
        try:
            out = PyByteArray_FromStringAndSize(NULL, 2 + n + 20 + f.len + 1 + fn + 4 + d.len)
            o = _put_head(<uint8_t *>PyByteArray_AS_STRING(out), 86, text, read_ns, ship_ns, &f)  # "V"
            o[0] = <uint8_t>fn
            memcpy(o + 1, PyBytes_AS_STRING(file), fn)
            o += 1 + fn
            wr32(o, <uint32_t>events)
            memcpy(o + 4, d.buf, d.len)
        finally:
            PyBuffer_Release(&d)
    finally:
        PyBuffer_Release(&f)
    return out


cdef uint8_t *_put_head(uint8_t *p, uint8_t tag, bytes text, uint64_t read_ns, uint64_t ship_ns, Py_buffer *f):
    """What the compact and verbatim payloads begin with (the twin's _payload_head); where
    the rest goes."""
    cdef Py_ssize_t n = len(text)
    p[0] = tag
    p[1] = <uint8_t>n
    memcpy(p + 2, PyBytes_AS_STRING(text), n)
    p += 2 + n
    wr64(p, read_ns)
    wr64(p + 8, ship_ns)
    wr32(p + 16, <uint32_t>f.len)
    memcpy(p + 20, f.buf, f.len)
    return p + 20 + f.len


cdef void _fill_compact(uint8_t *p, bytes text, uint64_t read_ns, uint64_t ship_ns, Py_buffer *f, uint32_t events,
                        list names, Py_buffer *d):
    cdef bytes name
    p = _put_head(p, 69, text, read_ns, ship_ns, f)  # "E"
    wr32(p, events)
    p[4] = (len(names) // 2) & 0xFF
    p[5] = (len(names) // 2) >> 8
    p += 6
    for name in names:
        n = len(name)
        p[0] = <uint8_t>n
        memcpy(p + 1, PyBytes_AS_STRING(name), n)
        p += 1 + n
    memcpy(p, d.buf, d.len)


ctypedef object (*Reader)(const uint8_t *, Py_ssize_t)


cdef object _read(obj, Reader read):
    """``read`` over the bytes of ``obj`` (any buffer): its result, or None."""
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    try:
        return read(<const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


def decode_compact(buf):
    result = _read(buf, _decode_compact)
    return _twin.decode_compact(buf) if result is None else result  # the twin names what is wrong


cdef object _decode_compact(const uint8_t *p, Py_ssize_t size):
    cdef Py_ssize_t n, at, fmt_len, count
    if size < 2:
        return None
    n = p[1]
    at = 2 + n
    if at + 20 > size:
        return None
    try:
        gtid = PyUnicode_DecodeUTF8(<const char *>p + 2, n, NULL)
    except UnicodeDecodeError:
        return None
    read_ns, ship_ns, fmt_len = rd64(p + at), rd64(p + at + 8), rd32(p + at + 16)
    at += 20
    if fmt_len > size - at:
        return None
    fmt = PyBytes_FromStringAndSize(<const char *>p + at, fmt_len)
    at += fmt_len
    if at + 6 > size:
        return None
    events, count = rd32(p + at), p[at + 4] | (p[at + 5] << 8)
    at += 6
    tables = []
    for _ in range(count):
        pair = []
        for _ in range(2):
            if at >= size or at + 1 + p[at] > size:
                return None
            n = p[at]
            try:
                pair.append(PyUnicode_DecodeUTF8(<const char *>p + at + 1, n, NULL))
            except UnicodeDecodeError:
                return None
            at += 1 + n
        tables.append(tuple(pair))
    data = PyBytes_FromStringAndSize(<const char *>p + at, size - at)
    return gtid, read_ns, ship_ns, fmt, events, tuple(tables), data


def place_frame(region, Py_ssize_t start, kind, flags, seq, epoch, payload):
    if not (fits(kind, 0xFF) and fits(flags, 0xFF) and fits(seq, 0xFFFFFFFFFFFFFFFF) and isinstance(epoch, int)):
        return _twin.place_frame(region, start, kind, flags, seq, epoch, payload)
    cdef Py_buffer r, pl
    cdef uint8_t *at
    cdef Py_ssize_t n, span
    PyObject_GetBuffer(region, &r, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(payload, &pl, PyBUF_SIMPLE)
        try:
            n = pl.len
            if start < 0 or n > 0xFFFFFFFF or start + frame_span(<uint32_t>n) > r.len:
                return _twin.place_frame(region, start, kind, flags, seq, epoch, payload)
            at = <uint8_t *>r.buf + start
            memcpy(at + HEADER_BYTES, pl.buf, n)
            span = put_frame(at, <uint8_t>kind, <uint8_t>flags, <uint64_t>seq, <uint32_t>(epoch & 0xFFFFFFFF), n)
        finally:
            PyBuffer_Release(&pl)
    finally:
        PyBuffer_Release(&r)
    return span


def frame_at(region, Py_ssize_t at, Py_ssize_t room, expected_seq, epoch):
    cdef Py_buffer r
    cdef uint8_t h[HEADER_BYTES]
    cdef uint32_t length
    cdef Py_ssize_t n
    if not (fits(expected_seq, 0xFFFFFFFFFFFFFFFF) and fits(epoch, 0xFFFFFFFF)):
        return _twin.frame_at(region, at, room, expected_seq, epoch)
    PyObject_GetBuffer(region, &r, PyBUF_SIMPLE)
    try:
        if at < 0 or room < 0 or at + room > r.len:
            return _twin.frame_at(region, at, room, expected_seq, epoch)
        if room < MIN_FRAME_BYTES:
            return None
        memcpy(h, <uint8_t *>r.buf + at, HEADER_BYTES)  # once: the other side may be writing
        length = rd32(h + 4)
        if rd64(h + 8) != <uint64_t>expected_seq or rd32(h + 20) != <uint32_t>epoch or length > room:
            return None
        n = frame_span(length)
        if n > room or h[0] < 1 or h[0] > 4:
            return None
        if rd64(<uint8_t *>r.buf + at + n - TRAILER_BYTES) != commit_word(expected_seq, epoch):
            return None  # still being placed (or stale)
        fence_acquire()  # the payload is read after its commit word (a region may be unaligned: no atomic load)
        payload = PyBytes_FromStringAndSize(<const char *>r.buf + at + HEADER_BYTES, length)
    finally:
        PyBuffer_Release(&r)
    if frame_crc(h, PyBytes_AS_STRING(payload), length) != rd32(h + 16):
        return None
    return h[0], h[1], payload, n


def parse_gtid(event):
    result = _read(event, _gtid)
    return _twin.parse_gtid(event) if result is None else result  # MySQL's GTID and errors: the twin


cdef object _gtid(const uint8_t *p, Py_ssize_t size):
    """(text, standalone) of a whole MariaDB GTID event or MySQL GTID event (not a tagged one), else None."""
    cdef char text[GTID_TEXT]
    cdef int n = 0
    cdef int kind = gtid_text(p, size, text, &n)
    if kind == GTID_NONE:
        return None
    return PyUnicode_DecodeUTF8(text, n, NULL), kind == GTID_STANDALONE


def is_begin(event):
    return _read(event, _begin)


cdef object _begin(const uint8_t *p, Py_ssize_t size):
    return is_begin_query(p, size)


def table_map_names(event):
    result = _read(event, _names)
    return _twin.table_map_names(event) if result is None else result


cdef object _names(const uint8_t *p, Py_ssize_t size):
    """(schema, table) of a TABLE_MAP event when both are whole and UTF-8, else None."""
    cdef Py_ssize_t at = BINLOG_HEADER + 8, n
    if at >= size or at + 1 + p[at] + 1 >= size:
        return None
    n = p[at]
    try:
        schema = PyUnicode_DecodeUTF8(<const char *>p + at + 1, n, NULL)
        at += n + 2
        if at + 1 + p[at] > size:
            return None
        return schema, PyUnicode_DecodeUTF8(<const char *>p + at + 1, p[at], NULL)
    except UnicodeDecodeError:
        return None


def scan_transaction(buf, seq_id, bint semi_sync, Py_ssize_t max_bytes, bint gtid_first=False):
    cdef Py_buffer view
    if not fits(seq_id, 255):
        return _twin.scan_transaction(buf, seq_id, semi_sync, max_bytes, gtid_first)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return _scan(<const uint8_t *>view.buf, view.len, seq_id, semi_sync, max_bytes, gtid_first, False)
    finally:
        PyBuffer_Release(&view)


def scan_verbatim(buf, seq_id, bint semi_sync, Py_ssize_t max_bytes):
    cdef Py_buffer view
    if not fits(seq_id, 255):
        return _twin.scan_verbatim(buf, seq_id, semi_sync, max_bytes)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        scanned = _scan(<const uint8_t *>view.buf, view.len, seq_id, semi_sync, max_bytes, True, True)
    finally:
        PyBuffer_Release(&view)
    if scanned is None:
        return None
    taken, next_id, gtid, data, _, events, position, ack = scanned
    return taken, next_id, gtid, data, events, position, ack


cdef object _scan(const uint8_t *b, Py_ssize_t end, uint8_t seq_id, bint semi_sync, Py_ssize_t max_bytes,
                  bint gtid_first, bint verbatim):
    """scan_transaction's answer; ``verbatim``: scan_verbatim's kind (every event kept, GTID
    and BEGIN and XID too, and counted in place of the row events)."""
    cdef DumpPacket k
    cdef Py_ssize_t p, size, data_len = 0
    cdef uint8_t etype
    cdef Py_ssize_t rows = 0
    cdef int begin = BEGIN_NONE if gtid_first else BEGIN_MAY
    spans = []  # (start, size) of each kept event in b
    tables = []
    gtid = None
    k.at, k.seq_id, k.ack = 0, seq_id, -1
    while True:
        if next_event(b, end, semi_sync, &k) != SCAN_EVENT:
            return None
        p, size, etype = k.event, k.size, k.etype
        if gtid_first:
            got = _gtid(b + p, size)
            if got is None or got[1]:
                return None  # not a GTID this reads, or a standalone one (DDL)
            gtid, gtid_first = got[0], False
            begin = BEGIN_MUST if etype == MYSQL_GTID_EVENT else BEGIN_NONE
            if verbatim:
                spans.append((p, size))
                data_len += size
            continue
        if begin != BEGIN_NONE:
            if is_begin_query(b + p, size):
                begin = BEGIN_NONE
                if verbatim:
                    spans.append((p, size))
                    data_len += size
                continue
            if begin == BEGIN_MUST:
                return None  # MySQL's DDL (its QUERY after the GTID), or anything else
            begin = BEGIN_NONE
        if etype == XID_EVENT:
            if not rows:
                return None
            if verbatim:
                spans.append((p, size))
                data_len += size
                rows = len(spans)
            return k.at, k.seq_id, gtid, _joined(b, spans, data_len), tuple(tables), rows, k.position, k.ack
        if etype == TABLE_MAP_EVENT:
            names = _names(b + p, size)
            if names is None:  # what the twin does with it (a cut table name, or an error)
                try:
                    names = _twin.table_map_names(PyBytes_FromStringAndSize(<const char *>b + p, size))
                except RemoteProtocolError:
                    return None
            tables.append(names)
        elif scanned_row_event(etype):
            rows += 1
        else:
            return None
        spans.append((p, size))
        data_len += size
        if data_len >= max_bytes:
            return None


cdef bytes _joined(const uint8_t *b, list spans, Py_ssize_t total):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    cdef char *o = PyBytes_AS_STRING(out)
    cdef Py_ssize_t start, size
    for start, size in spans:
        memcpy(o, b + start, size)
        o += size
    return out


def place_run(buf, seq_id, bint semi_sync, Py_ssize_t max_bytes, region, Py_ssize_t base, Py_ssize_t head,
              Py_ssize_t free, next_seq, epoch, heartbeat, Py_ssize_t max_txns, file=None):
    if not (fits(seq_id, 255) and fits(next_seq, 0x7FFFFFFFFFFFFFFF) and isinstance(epoch, int)
            and type(heartbeat) is tuple and len(heartbeat) == 2 and type(heartbeat[0]) is str
            and type(heartbeat[1]) is str and (file is None or type(file) is bytes and len(file) < 256)):
        return _twin.place_run(buf, seq_id, semi_sync, max_bytes, region, base, head, free, next_seq, epoch,
                               heartbeat, max_txns, file)
    cdef bytes hb_schema = PyUnicode_AsUTF8String(heartbeat[0]), hb_table = PyUnicode_AsUTF8String(heartbeat[1])
    cdef Py_buffer v, r
    cdef Scanned s
    cdef Py_ssize_t at = 0, size, used, frame_at, n_heartbeats = 0, count = 0
    cdef uint64_t seq = next_seq
    cdef uint32_t ep = epoch & 0xFFFFFFFF, commit = 0
    cdef long long ack = -1
    cdef uint8_t sid = seq_id
    cdef uint8_t *o
    cdef const uint8_t *b
    cdef char last[GTID_TEXT]
    cdef int last_len = 0
    entries = []
    PyObject_GetBuffer(region, &r, PyBUF_WRITABLE)
    try:
        size = r.len - base
        if base < 0 or size <= 0 or head < 0 or head >= size or free < 0 or free > size:
            return _twin.place_run(buf, seq_id, semi_sync, max_bytes, region, base, head, free, next_seq, epoch,
                                   heartbeat, max_txns, file)
        PyObject_GetBuffer(buf, &v, PyBUF_SIMPLE)
        try:
            b = <const uint8_t *>v.buf
            o = <uint8_t *>r.buf + base
            while count < max_txns and ack < 0:
                if scan_one(b + at, v.len - at, sid, semi_sync, max_bytes, file is not None, &s) != SCAN_WHOLE:
                    break
                if file is not None:
                    s.file, s.file_len = PyBytes_AS_STRING(file), len(<bytes>file)
                frame_at = head
                used = place_scanned(o, size, &frame_at, free, seq, ep, b + at, &s)
                if not used:
                    break
                entries.append((seq, used, base + frame_at, payload_len(&s), FrameKind.TXN, 0))
                if is_heartbeat(b + at, &s, hb_schema, hb_table):
                    n_heartbeats += 1
                head = (head + used) % size  # past the gap too, if it wrapped
                free, seq = free - used, seq + 1
                at, sid, commit, ack = at + s.taken, s.seq_id, s.position, s.ack
                memcpy(last, s.gtid, s.gtid_len)
                last_len = s.gtid_len
                count += 1
        finally:
            PyBuffer_Release(&v)
    finally:
        PyBuffer_Release(&r)
    if not count:
        return None
    return at, sid, entries, head, n_heartbeats, PyUnicode_DecodeUTF8(last, last_len, NULL), commit, ack


def scan_wants_more(buf, seq_id, bint semi_sync, Py_ssize_t max_bytes):
    cdef Py_buffer view
    cdef Scanned s
    if not fits(seq_id, 255):
        return _twin.scan_wants_more(buf, seq_id, semi_sync, max_bytes)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return scan_one(<const uint8_t *>view.buf, view.len, seq_id, semi_sync, max_bytes, False, &s) == SCAN_MORE
    finally:
        PyBuffer_Release(&view)


def one_trip(datas, tail, Py_ssize_t limit):
    if type(datas) is not list or type(tail) is not list:
        return _twin.one_trip(datas, tail, limit)
    cdef Py_ssize_t total = 0, size
    for d in datas:
        if type(d) is not bytes:
            return _twin.one_trip(datas, tail, limit)
        total += len(<bytes>d)
    size = 8 + 4 * ((total + 2) // 3) + 1
    for t in tail:
        if type(t) is not bytes:
            return _twin.one_trip(datas, tail, limit)
        size += 1 + len(<bytes>t)
    if not total or size > limit:
        return None
    out = PyBytes_FromStringAndSize(NULL, size)
    cdef char *o = PyBytes_AS_STRING(out)
    cdef uint32_t carry = 0
    cdef int held = 0
    memcpy(o, b"BINLOG '", 8)
    o += 8
    for d in datas:
        o = bridge_b64_into(o, <const uint8_t *>PyBytes_AS_STRING(d), len(<bytes>d), &carry, &held)
    o = bridge_b64_end(o, carry, held)
    o[0] = b"'"[0]
    o += 1
    for t in tail:
        o[0] = b";"[0]
        memcpy(o + 1, PyBytes_AS_STRING(t), len(<bytes>t))
        o += 1 + len(<bytes>t)
    return out
