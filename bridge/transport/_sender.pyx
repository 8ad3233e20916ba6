# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The tcp transport's sending end as the compiled ship lane feeds it (_sender.pxd): a
transaction's frames queued as WRITE messages, the batch's PUBLISH (asking for an answer
where a semi-sync ACK waits on it) in the same send, the answers read without waiting.
The twin is bridge.source.ship's ``_Link`` over bridge.transport.tcp's socket.
"""

import os

from libc.errno cimport EAGAIN, EINTR, ETIMEDOUT, errno
from libc.stdlib cimport realloc
from libc.string cimport memcpy

from bridge.errors import TransportError

from bridge.transport.posix_io cimport MSG_DONTWAIT, MSG_NOSIGNAL, POLLOUT, poll, pollfd, recv, send
from bridge.wire.layouts cimport DATA_OFFSET, OP_HEAD_BYTES, OP_PUBLISH, OP_PUBLISH_ANSWER, OP_WRITE
from bridge.wire.native_c cimport rd64, wr32, wr64


cdef int queue(Link *link, uint8_t op, uint32_t offset, const uint8_t *body, uint32_t n) except -1:
    """A placement message (op, offset, length, body) after those not sent yet on the link."""
    cdef Py_ssize_t want = link.out_len + OP_HEAD_BYTES + n
    cdef uint8_t *grown
    if want > link.out_cap:
        grown = <uint8_t *>realloc(link.out, want * 2)
        if grown is NULL:
            raise MemoryError()
        link.out, link.out_cap = grown, want * 2
    link.out[link.out_len] = op
    wr32(link.out + link.out_len + 1, offset)
    wr32(link.out + link.out_len + 5, n)
    memcpy(link.out + link.out_len + OP_HEAD_BYTES, body, n)
    link.out_len = want
    return 0


cdef int queue_span(Link *link, const uint8_t *mirror, Py_ssize_t size, Py_ssize_t head, Py_ssize_t used,
                    bint wrapped) except -1:
    """The ``used`` bytes a placement took in the mirror's data area from ``head`` as WRITE
    messages: the ring's end first (a PAD, or an implicit wrap) where it ``wrapped``."""
    if wrapped:
        queue(link, OP_WRITE, DATA_OFFSET + head, mirror + head, size - head)
        queue(link, OP_WRITE, DATA_OFFSET, mirror, used - (size - head))
    else:
        queue(link, OP_WRITE, DATA_OFFSET + head, mirror + head, used)
    return 0


cdef int publish(Link *link, uint64_t write_seq, Py_ssize_t head, bint answer, int timeout_ms) except? -3:
    """The batch's PUBLISH (PUBLISH_ANSWER: ``answer``) after its WRITE messages, all sent
    in one go: 0 (an answer then asked for), or the errno that stopped it."""
    cdef uint8_t body[8]
    cdef int err
    wr64(body, write_seq)
    queue(link, OP_PUBLISH_ANSWER if answer else OP_PUBLISH, <uint32_t>head, body, 8)
    with nogil:
        err = send_queued(link, timeout_ms)
    if not err and answer:
        link.asked += 1
        link.asked_seq = write_seq
    return err


cdef int send_queued(Link *link, int timeout_ms) noexcept nogil:
    """Everything queued on the link, sent (waiting for room as ``sendall`` does, up to the
    socket's timeout) and dropped: 0, or the errno that stopped it."""
    cdef Py_ssize_t at = 0
    cdef ssize_t sent
    cdef pollfd waiter
    cdef int ready
    while at < link.out_len:
        sent = send(link.fd, link.out + at, link.out_len - at, MSG_NOSIGNAL | MSG_DONTWAIT)
        if sent >= 0:
            at += sent
            continue
        if errno == EINTR:
            continue
        if errno != EAGAIN:
            link.out_len = 0
            return errno
        waiter.fd, waiter.events, waiter.revents = link.fd, POLLOUT, 0
        ready = poll(&waiter, 1, timeout_ms)
        if ready == 0 or ready < 0 and errno != EINTR:
            link.out_len = 0
            return ETIMEDOUT if ready == 0 else errno
    link.out_len = 0
    return 0


cdef int take_answer(Link *link) noexcept nogil:
    """The bytes of the link's next answer the socket holds (one whole answer at most): 0,
    or its failure (FAIL_CLOSED, FAIL_SHORT, an errno)."""
    cdef ssize_t got = recv(link.fd, link.reply + link.reply_len, REPLY_BYTES - link.reply_len, MSG_DONTWAIT)
    if got == 0:
        return FAIL_CLOSED
    if got < 0:
        return 0 if errno == EINTR or errno == EAGAIN else errno
    link.reply_len += got
    if link.reply_len < REPLY_BYTES:
        return 0
    link.reply_len = 0
    link.asked -= 1
    if rd64(link.reply) > link.placed:
        link.placed = rd64(link.reply)
    if rd64(link.reply + 8) > link.applied:
        link.applied = rd64(link.reply + 8)
    return FAIL_SHORT if link.asked == 0 and link.placed < link.asked_seq else 0


cdef object link_error(Link *link, int fail):
    """The TransportError the twin raises for the link's ``fail``."""
    if fail == FAIL_CLOSED:
        return TransportError("tcp transport: the replica side closed the data connection with an answer outstanding")
    if fail == FAIL_SHORT:
        return TransportError(f"tcp transport: the replica side answered that its ring holds seq {link.placed}, "
                              f"after seq {link.asked_seq} was published")
    return TransportError(f"tcp transport: recv: {os.strerror(fail)}")
