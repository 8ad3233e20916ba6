# The tcp transport's sending end, compiled (bridge/transport/_sender.pyx): one data
# connection as a ship lane (bridge/source/_ship.pyx) feeds it, its placement messages
# queued and sent together, the replica side's answers taken as they come. The twin is
# bridge.source.ship's _Link with the transport's own socket calls.
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from bridge.wire.layouts cimport REPLY_BYTES


cdef enum:
    # a link's failure (else an errno)
    FAIL_CLOSED = -1  # the replica side closed the data connection
    FAIL_SHORT = -2  # it answered that its ring holds less than was published when the answer was asked


cdef struct Link:
    # its messages not sent yet, the answers asked for and not read (the last asked with
    # asked_seq published; the next one's bytes read so far) and the replica side's last answer
    int fd
    uint8_t *out
    Py_ssize_t out_len, out_cap
    uint8_t reply[REPLY_BYTES]
    int reply_len, asked
    uint64_t asked_seq, placed, applied


cdef int queue(Link *link, uint8_t op, uint32_t offset, const uint8_t *body, uint32_t n) except -1
cdef int queue_span(Link *link, const uint8_t *mirror, Py_ssize_t size, Py_ssize_t head, Py_ssize_t used,
                    bint wrapped) except -1
cdef int publish(Link *link, uint64_t write_seq, Py_ssize_t head, bint answer, int timeout_ms) except? -3
cdef int send_queued(Link *link, int timeout_ms) noexcept nogil
cdef int take_answer(Link *link) noexcept nogil
cdef object link_error(Link *link, int fail)
