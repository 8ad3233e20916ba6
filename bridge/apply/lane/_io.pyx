# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled apply lane's waits (_io.pxd): the sleep on the ring's doorbell (rdma: on the
queue pair's completion channel, through its sleeper), and
one round trip on the replica connection's raw socket (a COM_QUERY, then its answers, read
with at most one wakeup over TCP: the lane keeps the socket's SO_RCVLOWAT at two answers'
size), each serving the tcp data connection the lane holds meanwhile so that an ANSWER a
semi-sync ACK waits on is sent at once.
"""

from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from posix.unistd cimport read

from bridge.transport._receiver cimport drain_lane, pollable
from bridge.transport.verbs_c cimport bv_sleep_done, bv_sleep_prepare, bv_sleeper
from bridge.transport.posix_io cimport (MSG_DONTWAIT, MSG_NOSIGNAL, POLLIN, SO_RCVLOWAT, SOL_SOCKET, poll, pollfd, recv,
                                        send, setsockopt)
from bridge.wire._frames cimport ring_ready
from bridge.wire.layouts cimport WAITING_AT
from bridge.wire.native_c cimport CLOCK_MONOTONIC, fence_full, now_ns, wr32

cdef enum:
    ANSWER_ROOM = 512  # both answers of a round trip fit, but for a long error message


cdef inline int sleep_verbs(uint8_t *b, bv_sleeper *sleeper, Py_ssize_t tail, uint64_t expected_seq,
                            uint32_t epoch, int wait_ms, int interrupt) noexcept nogil:
    """rdma: until the primary side wakes this side (a write with immediate data on the
    queue pair's completion channel), ``interrupt`` is readable (drained here) or
    ``wait_ms`` passed: the wakeups taken, and this side announced as sleeping in the
    primary side's mirror where it is not (its completion waited for, so a publish from
    then on finds it), then the ring looked at once more."""
    cdef pollfd waiters[2]
    cdef uint64_t drained
    cdef int n = 1, fd = bv_sleep_prepare(sleeper), ended = SLEEP_WOKEN
    if fd < 0:
        return SLEEP_CANNOT
    if not ring_ready(b, tail, expected_seq, epoch):
        waiters[0].fd, waiters[0].events, waiters[0].revents = fd, POLLIN, 0
        if interrupt >= 0:
            waiters[1].fd, waiters[1].events, waiters[1].revents = interrupt, POLLIN, 0
            n = 2
        if poll(waiters, n, wait_ms) > 0 and n == 2 and waiters[1].revents:
            read(interrupt, &drained, 8)  # an eventfd's count, read without waiting
            ended = SLEEP_RUNG
    bv_sleep_done(sleeper)
    return ended


cdef int sleep_on(uint8_t *b, int doorbell, Py_ssize_t tail, uint64_t expected_seq, uint32_t epoch, int wait_ms,
                  Placements *pl, bv_sleeper *verbs, int interrupt) noexcept nogil:
    """Until the producer rings ``doorbell`` (bridge.transport.doorbell: the ring's waiting
    flag up meanwhile), or, where the run holds the tcp data connection (``pl``), until
    placements arrive on it: carried out here, no other thread woken; over rdma until the
    primary side wakes the queue pair's ``verbs`` sleeper or ``interrupt`` is readable
    (``sleep_verbs``). How it ended: SLEEP_CANNOT, SLEEP_WOKEN or SLEEP_RUNG (the doorbell:
    the producer's, or the host's interrupt; the caller tells them apart by the ring)."""
    cdef pollfd waiters[2]
    cdef uint8_t drained[4096]
    cdef int n = 0, ended = SLEEP_WOKEN
    if verbs != NULL:
        return sleep_verbs(b, verbs, tail, expected_seq, epoch, wait_ms, interrupt)
    wr32(b + WAITING_AT, 1)
    fence_full()  # the flag up before the ring is looked at again (the producer: the other way round)
    if not ring_ready(b, tail, expected_seq, epoch):
        if doorbell >= 0:
            waiters[n].fd, waiters[n].events, waiters[n].revents = doorbell, POLLIN, 0
            n += 1
        if pollable(pl):
            waiters[n].fd, waiters[n].events, waiters[n].revents = pl.fd, POLLIN, 0
            n += 1
        if poll(waiters, n, wait_ms) > 0:
            if doorbell >= 0 and waiters[0].revents:
                ended = SLEEP_RUNG
            if pl != NULL and waiters[n - 1].fd == pl.fd and waiters[n - 1].revents:
                drain_lane(pl)
    if doorbell >= 0:
        read(doorbell, drained, sizeof(drained))  # non-blocking: every byte rung, or the eventfd's counter
    wr32(b + WAITING_AT, 0)
    return ended


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
        if pollable(pl):
            waiters[1].fd, waiters[1].events, waiters[1].revents = pl.fd, POLLIN, 0
            n = 2
        ready = poll(waiters, n, left)
        if ready == 0:
            return
        if ready < 0 and errno != EINTR:
            return
        if n == 2 and waiters[1].revents:
            drain_lane(pl)
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
    """Send the COM_QUERY ``packet``, read its ``answers`` answers: 0, FAILED_ANSWER
    (``error``: the ERR packet, malloc'd) or LOST_CONNECTION; ``oks``: the OK answers read. Over tcp the caller
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
        return LOST_CONNECTION
    if tcp or pl != NULL:
        wait_answers(fd, pl, ANSWERS_WAIT_MS if tcp else -1)
    for k in range(answers):
        if grow(&buf, small, &room, at + 4, have):
            status = LOST_CONNECTION
            break
        have = recv_until(fd, buf, have, at + 4, room, tcp, pl)
        if have < 0:
            status = LOST_CONNECTION
            break
        length = buf[at] | (<uint32_t>buf[at + 1] << 8) | (<uint32_t>buf[at + 2] << 16)
        if buf[at + 3] != <uint8_t>(k + 1) or length == 0xFFFFFF or length == 0:
            status = LOST_CONNECTION
            break
        need = at + 4 + length
        if grow(&buf, small, &room, need, have):  # a long error message, or many answers
            status = LOST_CONNECTION
            break
        have = recv_until(fd, buf, have, need, room, tcp, pl)
        if have < 0:
            status = LOST_CONNECTION
            break
        if buf[at + 4] == 0xFF:
            error[0] = <uint8_t *>malloc(4 + length)
            if error[0] != NULL:
                memcpy(error[0], buf + at, 4 + length)
                error_len[0] = 4 + length
            status = FAILED_ANSWER
            break
        if buf[at + 4] != 0:  # not OK
            status = LOST_CONNECTION
            break
        oks[0] += 1
        at = need
    if buf != small:
        free(buf)
    return status
