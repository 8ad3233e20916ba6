# A common transaction scanned in place in the binlog dump's packets (no Python object)
# and framed into a ring mirror; a frame's crc32c. Compiled in bridge/wire/_frames.pyx;
# the hot path (bridge/wire/_hotpath.pyx), the ship lane (bridge/source/_ship.pyx) and the
# apply lane (bridge/apply/lane/_lane.pyx) cimport it. The pure-Python twin of the scan and the
# placement is bridge.wire.hotpath (scan_transaction, place_run).
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from bridge.wire.layouts cimport (BINLOG_HEADER, DATA_OFFSET, HEADER_BYTES, KIND_PAD, MIN_FRAME_BYTES, SIZE_AT,
                                  TRAILER_BYTES, WRITE_SEQ_AT)
from bridge.wire.native_c cimport load_acquire_u64, rd32, rd64


cdef enum:
    RUN_EVENTS = 64  # bridge.wire.hotpath.RUN_EVENTS: TABLE_MAP and row events of one transaction, at most
    GTID_TEXT = 64  # "domain-server-seq" of u32, u32, u64 takes at most 52, MySQL's "uuid:gno" 57
    MAX_PACKET = 0xFFFFFF  # a protocol packet this long continues in the next one

    # gtid_text: which GTID event it read
    GTID_NONE = 0  # not a GTID event it reads
    GTID_MARIADB = 1  # a MariaDB GTID that is not standalone
    GTID_STANDALONE = 2  # a standalone MariaDB GTID (DDL)
    GTID_MYSQL = 3  # a MySQL GTID (not a tagged one): a BEGIN query follows it in a transaction of rows

    # whether a BEGIN query comes next: no, may, must (the twin's _BEGIN_*)
    BEGIN_NONE = 0
    BEGIN_MAY = 1
    BEGIN_MUST = 2

    # scan_one: what the buffer starts with
    SCAN_NO = 0  # not a transaction a run takes: the per-transaction path reads it
    SCAN_WHOLE = 1
    SCAN_MORE = 2  # the buffer ends inside one a run would take
    SCAN_EVENT = 3  # next_event: one event read


cdef struct Scanned:
    Py_ssize_t taken  # bytes of the buffer, packet headers included
    uint8_t seq_id  # the next packet's
    long long ack  # the ACK position asked for, or -1
    uint32_t position  # the XID's next-event position
    uint32_t rows
    int gtid_len
    char gtid[GTID_TEXT]
    int spans  # TABLE_MAP and row events kept, in order
    Py_ssize_t start[RUN_EVENTS]
    Py_ssize_t size[RUN_EVENTS]
    Py_ssize_t data_len
    int tables
    Py_ssize_t name_at[2 * RUN_EVENTS]  # schema, table of each TABLE_MAP: offset in the buffer, length
    Py_ssize_t name_len[2 * RUN_EVENTS]
    Py_ssize_t names_len  # their compact encoding: a length byte and the name each
    # relay apply mode (scan_one's ``verbatim``): the events the compact payload leaves out, kept
    # too (the GTID event, MySQL's BEGIN, the XID), and the file the verbatim payload names
    bint verbatim
    Py_ssize_t gtid_at, gtid_size, begin_at, begin_size, xid_at, xid_size  # begin_size 0: none
    const char *file
    Py_ssize_t file_len


cdef struct DumpPacket:  # next_event's place in the binlog dump's packets
    Py_ssize_t at  # where the next packet starts
    uint8_t seq_id  # the next packet's number
    long long ack  # the ACK position a semi-sync packet asked for, or -1
    Py_ssize_t event  # the event read: its start in the buffer, its size, type and next-event position
    Py_ssize_t size
    uint8_t etype
    uint32_t position


cdef inline int next_event(const uint8_t *b, Py_ssize_t end, bint semi_sync, DumpPacket *k) noexcept nogil:
    """The binlog event of the packet at ``k.at``, that packet passed (SCAN_EVENT). A
    semi-sync ACK asked for sets ``k.ack`` and restarts the packet numbers. SCAN_MORE: the
    buffer ends inside the packet; SCAN_NO: not one whole event in one packet."""
    cdef Py_ssize_t at = k.at, length, p, stop, size
    cdef bint ack_requested = False
    if end - at < 4:
        return SCAN_MORE
    length = b[at] | (b[at + 1] << 8) | (b[at + 2] << 16)
    if length >= MAX_PACKET or b[at + 3] != k.seq_id:
        return SCAN_NO
    if end - at - 4 < length:
        return SCAN_MORE
    p, stop = at + 4, at + 4 + length
    k.at = stop
    k.seq_id = <uint8_t>(k.seq_id + 1)
    if length < 1 or b[p] != 0:
        return SCAN_NO
    p += 1
    if semi_sync and stop - p >= 2 and b[p] == 0xEF:
        ack_requested = (b[p + 1] & 1) != 0
        p += 2
    if stop - p < BINLOG_HEADER:
        return SCAN_NO
    size = rd32(b + p + 9)
    if size < BINLOG_HEADER or p + size > stop:
        return SCAN_NO
    k.event, k.size, k.etype, k.position = p, size, b[p + 4], rd32(b + p + 13)
    if ack_requested:
        k.ack, k.seq_id = k.position, 1
    return SCAN_EVENT


cdef inline bint scanned_row_event(uint8_t etype) noexcept nogil:
    return 23 <= etype <= 25 or 30 <= etype <= 32  # WRITE/UPDATE/DELETE_ROWS v1 and v2


cdef uint32_t frame_crc(const uint8_t *head, const void *payload, size_t n) noexcept nogil


cdef inline bint frame_ok(const uint8_t *head, const void *payload, size_t n) noexcept nogil:
    """Whether the crc32c in a frame's header is its header's and payload's."""
    return frame_crc(head, payload, n) == rd32(head + 16)


cdef inline Py_ssize_t frame_span(uint32_t length) noexcept nogil:
    """The bytes a frame of ``length`` payload bytes takes in the ring, its commit word
    included (bridge.wire.frame.frame_bytes)."""
    return ((HEADER_BYTES + <Py_ssize_t>length + 7) & ~7) + TRAILER_BYTES


cdef inline uint64_t commit_word(uint64_t seq, uint32_t epoch) noexcept nogil:
    """A frame's trailer as one little-endian u64: the seq's low 32 bits, then the epoch."""
    return (seq & 0xFFFFFFFFu) | (<uint64_t>epoch << 32)


cdef inline const uint8_t *ring_frame(const uint8_t *b, uint32_t size, Py_ssize_t *at, uint64_t expected,
                                      uint32_t epoch, Py_ssize_t *framed) noexcept nogil:
    """The frame of seq ``expected`` in the ring ``b`` at data offset ``*at`` (after at most
    one PAD, or the implicit wrap where too few bytes are left for a frame; ``*at`` then
    where it starts), whole (its commit word, written last, loaded first and with acquire
    ordering: the payload is read only after it) and its crc right (``*framed``: the
    bytes it takes); NULL where there is none (not yet, or corrupt: ``ring_ready`` tells
    which). The twin: bridge.ring.consumer.next_frame."""
    cdef const uint8_t *h
    cdef uint32_t length
    cdef int _tries
    for _tries in range(2):  # at most one PAD before a frame
        if size - at[0] < MIN_FRAME_BYTES:
            at[0] = 0
        h = b + DATA_OFFSET + at[0]
        length = rd32(h + 4)
        if rd64(h + 8) != expected or rd32(h + 20) != epoch or length > size - at[0]:
            return NULL
        framed[0] = frame_span(length)
        if framed[0] > size - at[0]:
            return NULL
        if load_acquire_u64(h + framed[0] - TRAILER_BYTES) != commit_word(expected, epoch) or \
                not frame_ok(h, h + HEADER_BYTES, length):
            return NULL
        if h[0] != KIND_PAD:
            return h
        at[0] = 0
    return NULL


cdef inline bint ring_ready(const uint8_t *b, Py_ssize_t tail, uint64_t expected, uint32_t epoch) noexcept nogil:
    """The ring's next frame (seq ``expected`` at ``tail``) is there for someone to take:
    published (write_seq, loaded with acquire ordering, reached it; one that then fails
    its check is late or corrupt, and the general path says which), or whole by its own
    check (over rdma the frames land before the header says so, and the header's
    write_seq only follows now and then)."""
    cdef Py_ssize_t at = tail, framed
    if load_acquire_u64(b + WRITE_SEQ_AT) >= expected:
        return True
    return ring_frame(b, rd32(b + SIZE_AT), &at, expected, epoch, &framed) != NULL


cdef int gtid_text(const uint8_t *e, Py_ssize_t size, char *out, int *out_len) noexcept nogil
cdef bint is_begin_query(const uint8_t *e, Py_ssize_t size) noexcept nogil
cdef int scan_one(const uint8_t *b, Py_ssize_t end, uint8_t seq_id, bint semi_sync, Py_ssize_t max_bytes,
                  bint verbatim, Scanned *s) noexcept nogil


cdef inline Py_ssize_t payload_len(const Scanned *s) noexcept nogil:
    """The payload's size of ``s``: compact, or verbatim (bridge.wire.hotpath.encode_verbatim)."""
    if s.verbatim:
        return 2 + s.gtid_len + 20 + 1 + s.file_len + 4 + s.gtid_size + s.begin_size + s.data_len + s.xid_size
    return 2 + s.gtid_len + 26 + s.names_len + s.data_len


cdef Py_ssize_t put_frame(uint8_t *at, uint8_t kind, uint8_t flags, uint64_t seq, uint32_t epoch,
                          Py_ssize_t n) noexcept nogil
cdef Py_ssize_t place_scanned(uint8_t *o, Py_ssize_t size, Py_ssize_t *head, Py_ssize_t room, uint64_t seq,
                              uint32_t epoch, const uint8_t *b, const Scanned *s) noexcept nogil
cdef bint is_heartbeat(const uint8_t *b, const Scanned *s, bytes schema, bytes table)
