# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.transport.receiver.serve_twin``: the tcp receiver's whole
loop in C, the interpreter lock released from the first recv to the end of the
connection, so an answer the primary side waits on (semi-sync ``received``) never
waits for the replica side's apply thread to give the lock up. Same messages, same
ring bytes, same answers as the twin; how it ended comes back as numbers, and
``bridge.transport.receiver.serve`` raises from them exactly what the twin raises.
Built by the normal install (setup.py); missing, the twin runs.
"""

from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove
from posix.unistd cimport write


cdef extern from "sys/socket.h" nogil:
    Py_ssize_t recv(int fd, void *buf, size_t n, int flags)
    Py_ssize_t send(int fd, const void *buf, size_t n, int flags)
    int MSG_NOSIGNAL


cdef extern from *:
    """
    #include <stdint.h>
    static inline void bridge_store_release_u64(void *p, uint64_t v) { __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE); }
    static inline uint64_t bridge_load_acquire_u64(const void *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE); }
    static inline uint32_t bridge_load_u32(const void *p) { return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE); }
    """
    void store_release_u64 "bridge_store_release_u64"(void *p, uint64_t v) nogil
    uint64_t load_acquire_u64 "bridge_load_acquire_u64"(const void *p) nogil
    uint32_t load_u32 "bridge_load_u32"(const void *p) nogil


cdef enum:
    BUFFER_BYTES = 65536  # bridge.transport.sockets.RECV_BYTES
    HEAD_BYTES = 9  # bridge.wire.placement.HEAD: op u8 | offset u32 | length u32
    SEQ_BYTES = 8
    WRITE_SEQ_AT = 8  # bridge.ring.layout
    ACK_SEQ_AT = 16
    HEAD_AT = 24
    WAITING_AT = 36
    OP_WRITE = 1  # bridge.wire.placement.Op
    OP_PUBLISH = 2
    OP_ANSWER = 5
    OP_PUBLISH_ANSWER = 6

# how the loop ended, with three numbers: the ENDED_* of bridge/transport/receiver.py
cdef enum:
    CLOSED = 0  # the peer closed: (bytes it had, bytes it needed, 0)
    OS_ERROR = 1  # recv or send failed: (errno, 0, 0)
    BAD_HEAD = 2  # a head the twin refuses: (op, offset, length)
    DOORBELL = 3  # writing the doorbell failed: (errno, 0, 0)

ENDED_CLOSED, ENDED_OS_ERROR, ENDED_BAD_HEAD, ENDED_DOORBELL = CLOSED, OS_ERROR, BAD_HEAD, DOORBELL


cdef struct Loop:
    int fd
    uint8_t *buf
    Py_ssize_t start
    Py_ssize_t end
    uint64_t a
    uint64_t b
    uint64_t c


cdef inline uint32_t rd32(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef int fill(Loop *s, Py_ssize_t need) noexcept nogil:
    """At least ``need`` bytes buffered, what is there moved to the front first (the
    twin's BufferedReceiver._fill); -1 with the reason in ``s`` otherwise."""
    cdef Py_ssize_t kept = s.end - s.start, n
    memmove(s.buf, s.buf + s.start, kept)
    s.start, s.end = 0, kept
    while s.end < need:
        n = recv(s.fd, s.buf + s.end, BUFFER_BYTES - s.end, 0)
        if n > 0:
            s.end += n
        elif n == 0:
            s.a, s.b, s.c = <uint64_t>s.end, <uint64_t>need, CLOSED
            return -1
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, OS_ERROR
            return -1
    return 0


cdef int read_into(Loop *s, uint8_t *target, Py_ssize_t length) noexcept nogil:
    """What is buffered, then the rest straight into the ring (the twin's read_into)."""
    cdef Py_ssize_t have = s.end - s.start, got = 0, n
    if have > length:
        have = length
    memcpy(target, s.buf + s.start, have)
    s.start += have
    while have + got < length:
        n = recv(s.fd, target + have + got, length - have - got, 0)
        if n > 0:
            got += n
        elif n == 0:
            s.a, s.b, s.c = <uint64_t>got, <uint64_t>(length - have), CLOSED
            return -1
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, OS_ERROR
            return -1
    return 0


cdef int answer(Loop *s, const uint8_t *region) noexcept nogil:
    """placed u64 | applied u64, from the ring header (bridge.wire.placement.REPLY)."""
    cdef uint64_t reply[2]
    cdef Py_ssize_t sent = 0, n
    reply[0] = load_acquire_u64(region + WRITE_SEQ_AT)
    reply[1] = load_acquire_u64(region + ACK_SEQ_AT)
    while sent < 16:
        n = send(s.fd, (<uint8_t *>reply) + sent, 16 - sent, MSG_NOSIGNAL)
        if n >= 0:
            sent += n
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, OS_ERROR
            return -1
    return 0


cdef int ring(Loop *s, const uint8_t *region, int bell) noexcept nogil:
    """The doorbell, if the consumer sleeps on it (bridge.transport.doorbell.Doorbell.ring)."""
    cdef uint64_t one = 1
    if load_u32(region + WAITING_AT) == 0:
        return 0
    if write(bell, &one, 8) < 0 and errno != EAGAIN:
        s.a, s.c = <uint64_t>errno, DOORBELL
        return -1
    return 0


cdef int serve_loop(Loop *s, uint8_t *region, Py_ssize_t size, int bell) noexcept nogil:
    cdef uint32_t op, offset, length
    cdef uint64_t seq
    while True:
        if s.end - s.start < HEAD_BYTES and fill(s, HEAD_BYTES) < 0:
            return -1
        op, offset, length = s.buf[s.start], rd32(s.buf + s.start + 1), rd32(s.buf + s.start + 5)
        s.start += HEAD_BYTES
        if not (op == OP_WRITE and <uint64_t>offset + length <= <uint64_t>size
                or (op == OP_PUBLISH or op == OP_PUBLISH_ANSWER) and length == SEQ_BYTES
                or op == OP_ANSWER and offset == 0 and length == 0):
            s.a, s.b = op, offset
            s.c = (<uint64_t>length << 8) | BAD_HEAD  # the length travels above the code
            return -1
        if op == OP_WRITE:
            if read_into(s, region + offset, length) < 0:
                return -1
        elif op == OP_ANSWER:
            if answer(s, region) < 0:
                return -1
        else:
            if s.end - s.start < SEQ_BYTES and fill(s, SEQ_BYTES) < 0:
                return -1
            memcpy(&seq, s.buf + s.start, 8)  # little-endian, as the twin unpacks it (x86, aarch64)
            s.start += SEQ_BYTES
            memcpy(region + HEAD_AT, &offset, 4)
            store_release_u64(region + WRITE_SEQ_AT, seq)
            if op == OP_PUBLISH_ANSWER and answer(s, region) < 0:
                return -1
            if ring(s, region, bell) < 0:
                return -1


def serve(int fd, unsigned char[::1] region not None, int bell):
    """Carry out the placements arriving on ``fd`` into ``region`` until the connection
    ends; returns (ENDED_..., a, b, c) as described above (never raises for them)."""
    cdef Loop s
    cdef Py_ssize_t size = region.shape[0]
    cdef uint8_t *ring_at = &region[0]
    s.fd, s.start, s.end, s.a, s.b, s.c = fd, 0, 0, 0, 0, 0
    s.buf = <uint8_t *>malloc(BUFFER_BYTES)
    if s.buf == NULL:
        raise MemoryError("tcp receiver: its 64 KiB buffer")
    with nogil:
        serve_loop(&s, ring_at, size, bell)
    free(s.buf)
    code = s.c & 0xFF
    if code == BAD_HEAD:
        return code, s.a, s.b, s.c >> 8
    return code, s.a, s.b, 0
