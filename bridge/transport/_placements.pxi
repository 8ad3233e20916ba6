# The tcp transport's placements carried out on the replica's ring (bridge.wire.placement),
# in C, shared by the receiver thread (bridge/transport/_receiver.pyx) and the apply lane
# (bridge/apply/_lane.pyx), which serves the data connection itself while it runs so that
# a transaction wakes one thread, not two. Names carry a pl_ prefix: the including modules
# declare their own.
#
# Who reads the connection: the receiver thread, but while an apply lane holds it (``pl_take``
# .. ``pl_give``), the lane; the thread is parked meanwhile (waiting on ``give_fd``), and
# hands over only between messages with its buffer empty. ``owner`` changes by
# compare-and-swap only, so a lane that stops asking and a thread that hands over at the
# same moment cannot both believe they hold it.

from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove


cdef extern from "sys/socket.h" nogil:
    Py_ssize_t pl_recv "recv"(int fd, void *buf, size_t n, int flags)
    Py_ssize_t pl_send "send"(int fd, const void *buf, size_t n, int flags)
    int PL_MSG_NOSIGNAL "MSG_NOSIGNAL"
    int PL_MSG_DONTWAIT "MSG_DONTWAIT"

cdef extern from "unistd.h" nogil:
    Py_ssize_t pl_write "write"(int fd, const void *buf, size_t n)
    Py_ssize_t pl_read "read"(int fd, void *buf, size_t n)

cdef extern from "poll.h" nogil:
    struct pl_pollfd "pollfd":
        int fd
        short events
        short revents
    int pl_poll "poll"(pl_pollfd *fds, unsigned long nfds, int timeout)
    short PL_POLLIN "POLLIN"

cdef extern from *:
    """
    #include <stdint.h>
    static inline void bridge_pl_store_release_u64(void *p, uint64_t v) {
        __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE);
    }
    static inline uint64_t bridge_pl_load_acquire_u64(const void *p) {
        return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
    }
    static inline uint32_t bridge_pl_load_u32(const void *p) {
        return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
    }
    static inline void bridge_pl_store_int(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
    static inline int bridge_pl_load_int(const int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline int bridge_pl_cas_int(int *p, int expected, int desired) {
        return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    """
    void pl_store_release_u64 "bridge_pl_store_release_u64"(void *p, uint64_t v) nogil
    uint64_t pl_load_acquire_u64 "bridge_pl_load_acquire_u64"(const void *p) nogil
    uint32_t pl_load_u32 "bridge_pl_load_u32"(const void *p) nogil
    void pl_store_int "bridge_pl_store_int"(int *p, int v) nogil
    int pl_load_int "bridge_pl_load_int"(const int *p) nogil
    bint pl_cas_int "bridge_pl_cas_int"(int *p, int expected, int desired) nogil


cdef enum:
    PL_BUFFER_BYTES = 65536  # bridge.transport.sockets.RECV_BYTES
    PL_HEAD_BYTES = 9  # bridge.wire.placement.HEAD: op u8 | offset u32 | length u32
    PL_SEQ_BYTES = 8
    PL_WRITE_SEQ_AT = 8  # bridge.ring.layout
    PL_ACK_SEQ_AT = 16
    PL_HEAD_AT = 24
    PL_WAITING_AT = 36
    PL_OP_WRITE = 1  # bridge.wire.placement.Op
    PL_OP_PUBLISH = 2
    PL_OP_ANSWER = 5
    PL_OP_PUBLISH_ANSWER = 6

# how a connection ended, with three numbers: the ENDED_* of bridge/transport/receiver.py
cdef enum:
    PL_CLOSED = 0  # the peer closed: (bytes it had, bytes it needed, 0)
    PL_OS_ERROR = 1  # recv or send failed: (errno, 0, 0)
    PL_BAD_HEAD = 2  # a head the twin refuses: (op, offset, length)
    PL_DOORBELL = 3  # writing the doorbell failed: (errno, 0, 0)

# who reads the connection (Placements.owner)
cdef enum:
    PL_THREAD = 0  # the receiver thread
    PL_WANTED = 1  # an apply lane asked; the thread hands over at its next turn
    PL_LANE = 2  # the apply lane; the thread is parked until it gives it back


cdef struct Placements:
    int fd  # the data connection
    uint8_t *buf  # PL_BUFFER_BYTES
    Py_ssize_t start
    Py_ssize_t end
    uint8_t *region  # the ring's region of the session this connection belongs to
    Py_ssize_t size
    int bell  # the ring's doorbell (eventfd)
    uint64_t a  # how it ended (see the codes above)
    uint64_t b
    uint64_t c
    int ended  # 1 once the connection ended (a, b, c say how)
    int owner  # PL_THREAD, PL_WANTED or PL_LANE
    int lane_stop  # a message too big for the buffer began while the lane held it: the thread takes it
    int wake_fd  # eventfd: the lane asks (the thread polls it beside the connection)
    int taken_fd  # eventfd: the thread parked (or ended): the lane holds the connection
    int give_fd  # eventfd: the lane gave it back: the thread goes on


cdef inline uint32_t pl_rd32(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef int pl_fill(Placements *s, Py_ssize_t need) noexcept nogil:
    """At least ``need`` bytes buffered, what is there moved to the front first (the
    twin's BufferedReceiver._fill); -1 with the reason in ``s`` otherwise."""
    cdef Py_ssize_t kept = s.end - s.start, n
    memmove(s.buf, s.buf + s.start, kept)
    s.start, s.end = 0, kept
    while s.end < need:
        n = pl_recv(s.fd, s.buf + s.end, PL_BUFFER_BYTES - s.end, 0)
        if n > 0:
            s.end += n
        elif n == 0:
            s.a, s.b, s.c = <uint64_t>s.end, <uint64_t>need, PL_CLOSED
            return -1
        elif errno == EAGAIN:  # a socket with a timeout: wait for the rest of the message
            pl_wait_readable(s.fd)
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, PL_OS_ERROR
            return -1
    return 0


cdef void pl_wait_readable(int fd) noexcept nogil:
    cdef pl_pollfd waiter
    waiter.fd, waiter.events, waiter.revents = fd, PL_POLLIN, 0
    pl_poll(&waiter, 1, -1)


cdef int pl_read_into(Placements *s, uint8_t *target, Py_ssize_t length) noexcept nogil:
    """What is buffered, then the rest straight into the ring (the twin's read_into)."""
    cdef Py_ssize_t have = s.end - s.start, got = 0, n
    if have > length:
        have = length
    memcpy(target, s.buf + s.start, have)
    s.start += have
    while have + got < length:
        n = pl_recv(s.fd, target + have + got, length - have - got, 0)
        if n > 0:
            got += n
        elif n == 0:
            s.a, s.b, s.c = <uint64_t>got, <uint64_t>(length - have), PL_CLOSED
            return -1
        elif errno == EAGAIN:
            pl_wait_readable(s.fd)
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, PL_OS_ERROR
            return -1
    return 0


cdef int pl_answer(Placements *s) noexcept nogil:
    """placed u64 | applied u64, from the ring header (bridge.wire.placement.REPLY)."""
    cdef uint64_t reply[2]
    cdef Py_ssize_t sent = 0, n
    reply[0] = pl_load_acquire_u64(s.region + PL_WRITE_SEQ_AT)
    reply[1] = pl_load_acquire_u64(s.region + PL_ACK_SEQ_AT)
    while sent < 16:
        n = pl_send(s.fd, (<uint8_t *>reply) + sent, 16 - sent, PL_MSG_NOSIGNAL)
        if n >= 0:
            sent += n
        elif errno == EAGAIN:
            pass  # 16 bytes on a socket with a timeout: the buffer frees at once
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, PL_OS_ERROR
            return -1
    return 0


cdef int pl_ring(Placements *s) noexcept nogil:
    """The doorbell, if the consumer sleeps on it (bridge.transport.doorbell.Doorbell.ring)."""
    cdef uint64_t one = 1
    if pl_load_u32(s.region + PL_WAITING_AT) == 0:
        return 0
    if pl_write(s.bell, &one, 8) < 0 and errno != EAGAIN:
        s.a, s.c = <uint64_t>errno, PL_DOORBELL
        return -1
    return 0


cdef int pl_one(Placements *s, bint bell) noexcept nogil:
    """Carry out the next message (the rest of it waited for: a message's bytes travel
    together); -1 with the reason in ``s`` when the connection ended or spoke nonsense.
    ``bell``: ring the doorbell after a publish (not when the lane that sleeps on it is
    the one reading)."""
    cdef uint32_t op, offset, length
    cdef uint64_t seq
    if s.end - s.start < PL_HEAD_BYTES and pl_fill(s, PL_HEAD_BYTES) < 0:
        return -1
    op, offset, length = s.buf[s.start], pl_rd32(s.buf + s.start + 1), pl_rd32(s.buf + s.start + 5)
    s.start += PL_HEAD_BYTES
    if not (op == PL_OP_WRITE and <uint64_t>offset + length <= <uint64_t>s.size
            or (op == PL_OP_PUBLISH or op == PL_OP_PUBLISH_ANSWER) and length == PL_SEQ_BYTES
            or op == PL_OP_ANSWER and offset == 0 and length == 0):
        s.a, s.b = op, offset
        s.c = (<uint64_t>length << 8) | PL_BAD_HEAD  # the length travels above the code
        return -1
    if op == PL_OP_WRITE:
        return pl_read_into(s, s.region + offset, length)
    if op == PL_OP_ANSWER:
        return pl_answer(s)
    if s.end - s.start < PL_SEQ_BYTES and pl_fill(s, PL_SEQ_BYTES) < 0:
        return -1
    memcpy(&seq, s.buf + s.start, 8)  # little-endian, as the twin unpacks it (x86, aarch64)
    s.start += PL_SEQ_BYTES
    memcpy(s.region + PL_HEAD_AT, &offset, 4)
    pl_store_release_u64(s.region + PL_WRITE_SEQ_AT, seq)
    if op == PL_OP_PUBLISH_ANSWER and pl_answer(s) < 0:
        return -1
    if bell and pl_ring(s) < 0:
        return -1
    return 0


cdef int pl_drain(Placements *s, bint bell) noexcept nogil:
    """What has arrived (one recv that does not wait), then every message it starts; 0,
    or -1 once the connection ended (``ended`` set, the reason in ``s``)."""
    cdef Py_ssize_t n
    if s.ended:
        return -1
    if s.end == s.start:
        s.start = s.end = 0
        n = pl_recv(s.fd, s.buf, PL_BUFFER_BYTES, PL_MSG_DONTWAIT)
        if n < 0 and (errno == EAGAIN or errno == EINTR):
            return 0
        if n <= 0:
            if n == 0:
                s.a, s.b, s.c = 0, <uint64_t>PL_HEAD_BYTES, PL_CLOSED
            else:
                s.a, s.c = <uint64_t>errno, PL_OS_ERROR
            pl_store_int(&s.ended, 1)
            return -1
        s.end = n
    while s.end > s.start:
        if pl_one(s, bell) < 0:
            pl_store_int(&s.ended, 1)
            return -1
    return 0


cdef int pl_drain_lane(Placements *s) noexcept nogil:
    """The apply lane's drain, which never waits: what has arrived (one recv that does not
    wait), and every message the buffer holds whole; a message cut short stays for the
    next call. 0; 1 when a message too big for the buffer has begun (``lane_stop``: the
    lane gives the connection back and the thread, which can wait, takes it); -1 once the
    connection ended (``ended`` set, the reason in ``s``)."""
    cdef Py_ssize_t n, kept = s.end - s.start, total
    if s.ended:
        return -1
    if s.start > 0:
        memmove(s.buf, s.buf + s.start, kept)
        s.start, s.end = 0, kept
    n = pl_recv(s.fd, s.buf + s.end, PL_BUFFER_BYTES - s.end, PL_MSG_DONTWAIT)
    if n > 0:
        s.end += n
    elif n == 0 or errno != EAGAIN and errno != EINTR:
        if n == 0:
            s.a, s.b, s.c = <uint64_t>kept, <uint64_t>pl_message_bytes(s), PL_CLOSED
        else:
            s.a, s.c = <uint64_t>errno, PL_OS_ERROR
        pl_store_int(&s.ended, 1)
        return -1
    while s.end - s.start >= PL_HEAD_BYTES:
        total = pl_message_bytes(s)
        if total > PL_BUFFER_BYTES:
            s.lane_stop = 1
            return 1
        if s.end - s.start < total:
            break
        if pl_one(s, False) < 0:  # all of it is buffered: carried out without waiting
            pl_store_int(&s.ended, 1)
            return -1
    return 0


cdef inline bint pl_pollable(Placements *s) noexcept nogil:
    """Whether a lane holding ``s`` (NULL: none) waits on its connection too: not once it
    ended, nor once a message for the receiver thread began."""
    return s != NULL and not pl_load_int(&s.ended) and not s.lane_stop


cdef Py_ssize_t pl_message_bytes(Placements *s) noexcept nogil:
    """The size of the message the buffer starts with (its head if it is not all there;
    a head pl_one refuses counts as the head alone, for pl_one to refuse)."""
    cdef uint8_t op
    if s.end - s.start < PL_HEAD_BYTES:
        return PL_HEAD_BYTES
    op = s.buf[s.start]
    if op == PL_OP_WRITE:
        return PL_HEAD_BYTES + <Py_ssize_t>pl_rd32(s.buf + s.start + 5)
    if op == PL_OP_PUBLISH or op == PL_OP_PUBLISH_ANSWER:
        return PL_HEAD_BYTES + PL_SEQ_BYTES
    return PL_HEAD_BYTES


cdef void pl_signal(int fd) noexcept nogil:
    cdef uint64_t one = 1
    pl_write(fd, &one, 8)


cdef void pl_consume(int fd) noexcept nogil:
    """An eventfd's count, read without waiting (the fds are non-blocking)."""
    cdef uint64_t count
    pl_read(fd, &count, 8)


cdef bint pl_take(Placements *s, int wait_ms) noexcept nogil:
    """The apply lane asks the receiver thread for the connection: True once it holds it
    (the thread parked between messages); False when the connection has ended or the
    thread did not hand over within ``wait_ms`` (busy with a message that has not all
    arrived): the thread goes on as before."""
    cdef pl_pollfd waiter
    if pl_load_int(&s.ended) or not pl_cas_int(&s.owner, PL_THREAD, PL_WANTED):
        return False
    s.lane_stop = 0
    pl_signal(s.wake_fd)
    waiter.fd, waiter.events, waiter.revents = s.taken_fd, PL_POLLIN, 0
    pl_poll(&waiter, 1, wait_ms)
    if pl_cas_int(&s.owner, PL_WANTED, PL_THREAD):  # not handed over: asked no more
        return False
    # the thread handed over (owner PL_LANE) or ended (PL_THREAD): either way it signals
    while pl_poll(&waiter, 1, -1) <= 0:
        pass
    pl_consume(s.taken_fd)
    return pl_load_int(&s.owner) == PL_LANE


cdef void pl_give(Placements *s) noexcept nogil:
    """The lane gives the connection back: the receiver thread goes on (or, when the
    lane saw it end, returns how)."""
    pl_store_int(&s.owner, PL_THREAD)
    pl_signal(s.give_fd)


cdef void pl_serve(Placements *s) noexcept nogil:
    """The receiver thread: carry out placements until the connection ends, parked while
    an apply lane holds it."""
    cdef pl_pollfd waiters[2]
    while True:
        if pl_load_int(&s.ended):
            break
        if pl_cas_int(&s.owner, PL_WANTED, PL_LANE):
            pl_signal(s.taken_fd)
            waiters[0].fd, waiters[0].events, waiters[0].revents = s.give_fd, PL_POLLIN, 0
            while pl_load_int(&s.owner) == PL_LANE:
                pl_poll(waiters, 1, -1)
                pl_consume(s.give_fd)
            continue
        waiters[0].fd, waiters[0].events, waiters[0].revents = s.fd, PL_POLLIN, 0
        waiters[1].fd, waiters[1].events, waiters[1].revents = s.wake_fd, PL_POLLIN, 0
        if pl_poll(waiters, 2, -1) <= 0:
            continue
        if waiters[1].revents:
            pl_consume(s.wake_fd)
        if waiters[0].revents and pl_load_int(&s.owner) == PL_THREAD:
            if pl_drain(s, True) < 0:
                break
    if pl_cas_int(&s.owner, PL_WANTED, PL_THREAD):
        pl_signal(s.taken_fd)  # a lane waiting to take it goes on without it


def _check_placement_constants(module_name):
    """The layouts this C copies, against their sources: a mismatch is an ImportError,
    and the module's picker runs the pure-Python twin, saying why."""
    from bridge.ring import layout as _layout
    from bridge.transport import sockets as _sockets
    from bridge.wire import placement as _placement
    copied = (PL_BUFFER_BYTES, PL_HEAD_BYTES, PL_SEQ_BYTES, PL_WRITE_SEQ_AT, PL_ACK_SEQ_AT, PL_HEAD_AT, PL_WAITING_AT,
              PL_OP_WRITE, PL_OP_PUBLISH, PL_OP_ANSWER, PL_OP_PUBLISH_ANSWER)
    sources = (_sockets.RECV_BYTES, _placement.HEAD.size, _placement.SEQ.size, _layout.WRITE_SEQ_AT,
               _layout.ACK_SEQ_AT, _layout.HEAD_AT, _layout.WAITING_AT, _placement.Op.WRITE, _placement.Op.PUBLISH,
               _placement.Op.ANSWER, _placement.Op.PUBLISH_ANSWER)
    if copied != sources:
        raise ImportError(f"{module_name}: built from tcp placement constants its sources no longer have "
                          "(bridge/transport/_placements.pxi); rebuild it")
