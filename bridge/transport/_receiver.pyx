# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.transport.receiver.serve_twin``: the tcp receiver's whole
loop in C, the interpreter lock released from the first wait to the end of the
connection, so an answer the primary side waits on (semi-sync ``received``) never waits
for the replica side's apply thread to give the lock up. Same messages, same ring bytes,
same answers as the twin; how it ended comes back as numbers, and
``bridge.transport.receiver.serve`` raises from them exactly what the twin raises. While
the compiled apply lane runs it may hold the connection and carry out the placements
itself (``take``, ``drain_lane``, ``give``: _receiver.pxd): one thread woken per
transaction instead of two. Built by the normal install (setup.py); missing, the twin runs.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove
from posix.unistd cimport close, read, write

from bridge.transport.posix_io cimport (EFD_CLOEXEC, EFD_NONBLOCK, MSG_DONTWAIT, MSG_NOSIGNAL, POLLIN, eventfd, poll,
                                        pollfd, recv, send)
from bridge.wire.layouts cimport (ACK_SEQ_AT, HEAD_AT, OP_ANSWER, OP_HEAD_BYTES, OP_PUBLISH, OP_PUBLISH_ANSWER,
                                  OP_SEQ_BYTES, OP_WRITE, WAITING_AT, WRITE_SEQ_AT)
from bridge.wire.native_c cimport (cas_int, fence_full, load_acquire_u32, load_acquire_u64, load_int, rd32, store_int,
                                   store_release_u64)

ENDED_CLOSED, ENDED_OS_ERROR, ENDED_BAD_HEAD, ENDED_DOORBELL = CLOSED, OS_ERROR, BAD_HEAD, DOORBELL
BUFFER = BUFFER_BYTES


cdef int _fill(Placements *s, Py_ssize_t need) noexcept nogil:
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
        elif errno == EAGAIN:  # a socket with a timeout: wait for the rest of the message
            _wait_readable(s.fd)
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, OS_ERROR
            return -1
    return 0


cdef void _wait_readable(int fd) noexcept nogil:
    cdef pollfd waiter
    waiter.fd, waiter.events, waiter.revents = fd, POLLIN, 0
    poll(&waiter, 1, -1)


cdef int _read_into(Placements *s, uint8_t *target, Py_ssize_t length) noexcept nogil:
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
        elif errno == EAGAIN:
            _wait_readable(s.fd)
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, OS_ERROR
            return -1
    return 0


cdef int _answer(Placements *s) noexcept nogil:
    """placed u64 | applied u64, from the ring header (bridge.wire.placement.REPLY)."""
    cdef uint64_t reply[2]
    cdef Py_ssize_t sent = 0, n
    reply[0] = load_acquire_u64(s.region + WRITE_SEQ_AT)
    reply[1] = load_acquire_u64(s.region + ACK_SEQ_AT)
    while sent < 16:
        n = send(s.fd, (<uint8_t *>reply) + sent, 16 - sent, MSG_NOSIGNAL)
        if n >= 0:
            sent += n
        elif errno == EAGAIN:
            pass  # 16 bytes on a socket with a timeout: the buffer frees at once
        elif errno != EINTR:
            s.a, s.c = <uint64_t>errno, OS_ERROR
            return -1
    return 0


cdef int _ring(Placements *s) noexcept nogil:
    """The doorbell, if the consumer sleeps on it (bridge.transport.doorbell.Doorbell.ring)."""
    cdef uint64_t one = 1
    fence_full()  # the published seq out before the flag is read (the consumer: the other way round)
    if load_acquire_u32(s.region + WAITING_AT) == 0:
        return 0
    if write(s.bell, &one, 8) < 0 and errno != EAGAIN:
        s.a, s.c = <uint64_t>errno, DOORBELL
        return -1
    return 0


cdef int _one(Placements *s, bint bell) noexcept nogil:
    """Carry out the next message (the rest of it waited for: a message's bytes travel
    together); -1 with the reason in ``s`` when the connection ended or spoke nonsense.
    ``bell``: ring the doorbell after a publish (not when the lane that sleeps on it is
    the one reading)."""
    cdef uint32_t op, offset, length
    cdef uint64_t seq
    if s.end - s.start < OP_HEAD_BYTES and _fill(s, OP_HEAD_BYTES) < 0:
        return -1
    op, offset, length = s.buf[s.start], rd32(s.buf + s.start + 1), rd32(s.buf + s.start + 5)
    s.start += OP_HEAD_BYTES
    if not (op == OP_WRITE and <uint64_t>offset + length <= <uint64_t>s.size
            or (op == OP_PUBLISH or op == OP_PUBLISH_ANSWER) and length == OP_SEQ_BYTES
            or op == OP_ANSWER and offset == 0 and length == 0):
        s.a, s.b = op, offset
        s.c = (<uint64_t>length << 8) | BAD_HEAD  # the length travels above the code
        return -1
    if op == OP_WRITE:
        return _read_into(s, s.region + offset, length)
    if op == OP_ANSWER:
        return _answer(s)
    if s.end - s.start < OP_SEQ_BYTES and _fill(s, OP_SEQ_BYTES) < 0:
        return -1
    memcpy(&seq, s.buf + s.start, 8)  # little-endian, as the twin unpacks it (x86, aarch64)
    s.start += OP_SEQ_BYTES
    memcpy(s.region + HEAD_AT, &offset, 4)
    store_release_u64(s.region + WRITE_SEQ_AT, seq)
    if op == OP_PUBLISH_ANSWER and _answer(s) < 0:
        return -1
    if bell and _ring(s) < 0:
        return -1
    return 0


cdef int _drain(Placements *s, bint bell) noexcept nogil:
    """What has arrived (one recv that does not wait), then every message it starts; 0,
    or -1 once the connection ended (``ended`` set, the reason in ``s``)."""
    cdef Py_ssize_t n
    if s.ended:
        return -1
    if s.end == s.start:
        s.start = s.end = 0
        n = recv(s.fd, s.buf, BUFFER_BYTES, MSG_DONTWAIT)
        if n < 0 and (errno == EAGAIN or errno == EINTR):
            return 0
        if n <= 0:
            if n == 0:
                s.a, s.b, s.c = 0, <uint64_t>OP_HEAD_BYTES, CLOSED
            else:
                s.a, s.c = <uint64_t>errno, OS_ERROR
            store_int(&s.ended, 1)
            return -1
        s.end = n
    while s.end > s.start:
        if _one(s, bell) < 0:
            store_int(&s.ended, 1)
            return -1
    return 0


cdef int drain_lane(Placements *s) noexcept nogil:
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
    n = recv(s.fd, s.buf + s.end, BUFFER_BYTES - s.end, MSG_DONTWAIT)
    if n > 0:
        s.end += n
    elif n == 0 or errno != EAGAIN and errno != EINTR:
        if n == 0:
            s.a, s.b, s.c = <uint64_t>kept, <uint64_t>_message_bytes(s), CLOSED
        else:
            s.a, s.c = <uint64_t>errno, OS_ERROR
        store_int(&s.ended, 1)
        return -1
    while s.end - s.start >= OP_HEAD_BYTES:
        total = _message_bytes(s)
        if total > BUFFER_BYTES:
            s.lane_stop = 1
            return 1
        if s.end - s.start < total:
            break
        if _one(s, False) < 0:  # all of it is buffered: carried out without waiting
            store_int(&s.ended, 1)
            return -1
    return 0


cdef Py_ssize_t _message_bytes(Placements *s) noexcept nogil:
    """The size of the message the buffer starts with (its head if it is not all there;
    a head _one refuses counts as the head alone, for _one to refuse)."""
    cdef uint8_t op
    if s.end - s.start < OP_HEAD_BYTES:
        return OP_HEAD_BYTES
    op = s.buf[s.start]
    if op == OP_WRITE:
        return OP_HEAD_BYTES + <Py_ssize_t>rd32(s.buf + s.start + 5)
    if op == OP_PUBLISH or op == OP_PUBLISH_ANSWER:
        return OP_HEAD_BYTES + OP_SEQ_BYTES
    return OP_HEAD_BYTES


cdef void _signal(int fd) noexcept nogil:
    cdef uint64_t one = 1
    write(fd, &one, 8)


cdef void _consume(int fd) noexcept nogil:
    """An eventfd's count, read without waiting (the fds are non-blocking)."""
    cdef uint64_t count
    read(fd, &count, 8)


cdef bint take(Placements *s, int wait_ms) noexcept nogil:
    """The apply lane asks the receiver thread for the connection: True once it holds it
    (the thread parked between messages); False when the connection has ended or the
    thread did not hand over within ``wait_ms`` (busy with a message that has not all
    arrived): the thread goes on as before."""
    cdef pollfd waiter
    if load_int(&s.ended) or not cas_int(&s.owner, THREAD, WANTED):
        return False
    s.lane_stop = 0
    _signal(s.wake_fd)
    waiter.fd, waiter.events, waiter.revents = s.taken_fd, POLLIN, 0
    poll(&waiter, 1, wait_ms)
    if cas_int(&s.owner, WANTED, THREAD):  # not handed over: asked no more
        return False
    # the thread handed over (owner LANE) or ended (THREAD): either way it signals
    while poll(&waiter, 1, -1) <= 0:
        pass
    _consume(s.taken_fd)
    return load_int(&s.owner) == LANE


cdef void give(Placements *s) noexcept nogil:
    """The lane gives the connection back: the receiver thread goes on (or, when the
    lane saw it end, returns how)."""
    store_int(&s.owner, THREAD)
    _signal(s.give_fd)


cdef void _serve(Placements *s) noexcept nogil:
    """The receiver thread: carry out placements until the connection ends, parked while
    an apply lane holds it."""
    cdef pollfd waiters[2]
    while True:
        if load_int(&s.ended):
            break
        if cas_int(&s.owner, WANTED, LANE):
            _signal(s.taken_fd)
            waiters[0].fd, waiters[0].events, waiters[0].revents = s.give_fd, POLLIN, 0
            while load_int(&s.owner) == LANE:
                poll(waiters, 1, -1)
                _consume(s.give_fd)
            continue
        waiters[0].fd, waiters[0].events, waiters[0].revents = s.fd, POLLIN, 0
        waiters[1].fd, waiters[1].events, waiters[1].revents = s.wake_fd, POLLIN, 0
        if poll(waiters, 2, -1) <= 0:
            continue
        if waiters[1].revents:
            _consume(s.wake_fd)
        if waiters[0].revents and load_int(&s.owner) == THREAD:
            if _drain(s, True) < 0:
                break
    if cas_int(&s.owner, WANTED, THREAD):
        _signal(s.taken_fd)  # a lane waiting to take it goes on without it


cdef class Receiver:
    """One data connection's placements into ``region`` (its session's ring), rung on
    ``bell``; with three eventfds of its own for handing the connection to an apply lane
    and back (``take``, ``give``), closed with it."""

    def __cinit__(self, int fd, region, int bell):
        self.s.buf = NULL
        self.s.wake_fd = self.s.taken_fd = self.s.give_fd = -1
        PyObject_GetBuffer(region, &self.view, PyBUF_WRITABLE)
        self.viewing = True
        self.region = region
        self.s.buf = <uint8_t *>malloc(BUFFER_BYTES)
        if self.s.buf == NULL:
            raise MemoryError("tcp receiver: its 64 KiB buffer")
        self.s.fd, self.s.start, self.s.end = fd, 0, 0
        self.s.region, self.s.size, self.s.bell = <uint8_t *>self.view.buf, self.view.len, bell
        self.s.a = self.s.b = self.s.c = 0
        self.s.ended, self.s.owner = 0, THREAD
        self.s.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        self.s.taken_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        self.s.give_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        if self.s.wake_fd < 0 or self.s.taken_fd < 0 or self.s.give_fd < 0:
            raise OSError(errno, "tcp receiver: eventfd")

    def __dealloc__(self):
        free(self.s.buf)
        for fd in (self.s.wake_fd, self.s.taken_fd, self.s.give_fd):
            if fd >= 0:
                close(fd)
        if self.viewing:
            PyBuffer_Release(&self.view)

    @property
    def ended(self) -> bool:
        return load_int(&self.s.ended) != 0

    def serve(self):
        """Carry out the placements until the connection ends; returns (ENDED_..., a, b, c)
        as described in _receiver.pxd (never raises for them)."""
        with nogil:
            _serve(&self.s)
        code = self.s.c & 0xFF
        if code == BAD_HEAD:
            return code, self.s.a, self.s.b, self.s.c >> 8
        return code, self.s.a, self.s.b, 0
