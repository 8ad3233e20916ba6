# What the compiled apply lane (bridge/apply/lane/_lane.pyx) waits on (bridge/apply/lane/_io.pyx):
# the ring's doorbell (rdma: the queue pair's sleeper) while its next frame is not there, and the
# replica server's answers to one round trip on the connection's raw socket; both serve
# meanwhile the tcp data connection the lane holds (bridge/transport/_receiver.pxd). The twin is bridge.apply.lane.
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from bridge.transport._receiver cimport Placements
from bridge.transport.verbs_c cimport bv_sleeper


cdef enum:
    OK_BYTES_MIN = 11  # bridge.apply.connection.OK_BYTES_MIN: the smallest OK packet
    ANSWERS_WAIT_MS = 10  # bridge.apply.connection.ANSWERS_WAIT_MS
    FAILED_ANSWER = -1  # round_trip: an ERR packet came back
    LOST_CONNECTION = -2  # round_trip: the connection broke, or answered nonsense


cdef enum:
    # sleep_on: how the sleep ended
    SLEEP_CANNOT = 0  # rdma: the queue pair cannot sleep (closed, failed): the caller polls
    SLEEP_WOKEN = 1  # a frame, placements on the held connection, or the time was up
    SLEEP_RUNG = 2  # the doorbell (shm, tcp) or the interrupt fd (rdma) was readable: a frame, or an interrupt


cdef int sleep_on(uint8_t *b, int doorbell, Py_ssize_t tail, uint64_t expected_seq, uint32_t epoch, int wait_ms,
                  Placements *pl, bv_sleeper *verbs, int interrupt) noexcept nogil
cdef int round_trip(int fd, bint tcp, const char *packet, Py_ssize_t n, int answers, int *oks, uint8_t **error,
                    Py_ssize_t *error_len, Placements *pl) noexcept nogil
