# The tcp transport's compiled receiver (bridge/transport/_receiver.pyx): the state of one
# data connection's placements on the replica's ring, and what the compiled apply lane
# (bridge/apply/lane/_lane.pyx) cimports to hold the connection and carry the placements out
# itself while it runs. Who reads the connection: the receiver thread, but while an apply
# lane holds it (``take`` .. ``give``), the lane; the thread is parked meanwhile (waiting on
# ``give_fd``), and hands over only between messages with its buffer empty. ``owner``
# changes by compare-and-swap only, so a lane that stops asking and a thread that hands
# over at the same moment cannot both believe they hold it.
from cpython.buffer cimport Py_buffer
from libc.stdint cimport uint8_t, uint64_t

from bridge.wire.native_c cimport load_int


cdef enum:
    BUFFER_BYTES = 65536  # what one recv takes (the twin's BufferedReceiver: bridge.transport.sockets.RECV_BYTES)

    # how a connection ended, with three numbers: the ENDED_* of bridge/transport/receiver.py
    CLOSED = 0  # the peer closed: (bytes it had, bytes it needed, 0)
    OS_ERROR = 1  # recv or send failed: (errno, 0, 0)
    BAD_HEAD = 2  # a head the twin refuses: (op, offset, length)
    DOORBELL = 3  # writing the doorbell failed: (errno, 0, 0)

    # who reads the connection (Placements.owner)
    THREAD = 0  # the receiver thread
    WANTED = 1  # an apply lane asked; the thread hands over at its next turn
    LANE = 2  # the apply lane; the thread is parked until it gives it back


cdef struct Placements:
    int fd  # the data connection
    uint8_t *buf  # BUFFER_BYTES
    Py_ssize_t start
    Py_ssize_t end
    uint8_t *region  # the ring's region of the session this connection belongs to
    Py_ssize_t size
    int bell  # the ring's doorbell (eventfd)
    uint64_t a  # how it ended (see the codes above)
    uint64_t b
    uint64_t c
    int ended  # 1 once the connection ended (a, b, c say how)
    int owner  # THREAD, WANTED or LANE
    int lane_stop  # a message too big for the buffer began while the lane held it: the thread takes it
    int wake_fd  # eventfd: the lane asks (the thread polls it beside the connection)
    int taken_fd  # eventfd: the thread parked (or ended): the lane holds the connection
    int give_fd  # eventfd: the lane gave it back: the thread goes on


cdef class Receiver:
    cdef Placements s
    cdef Py_buffer view
    cdef readonly object region  # the ring's region this connection writes into
    cdef bint viewing


cdef int drain_lane(Placements *s) noexcept nogil
cdef bint take(Placements *s, int wait_ms) noexcept nogil
cdef void give(Placements *s) noexcept nogil


cdef inline bint pollable(Placements *s) noexcept nogil:
    """Whether a lane holding ``s`` (NULL: none) waits on its connection too: not once it
    ended, nor once a message for the receiver thread began."""
    return s != NULL and not load_int(&s.ended) and not s.lane_stop
