# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A run's placement over rdma, timed in C (bench.rdma_lat): the compiled ship lane's own
calls for one ring (bridge/source/rings_c.pxd), and beneath them one bare signaled write
on the same queue pair. A measuring tool, not a path a transaction takes: it has no twin."""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset

from bridge.source.ship import PLACE_TIMEOUT_S

from bridge.source.rings_c cimport Ring, ring_advance, ring_copy, rings_publish
from bridge.transport.verbs_c cimport BV_WRITE, bv_path, bv_post, bv_queue, bv_wait, verbs_error
from bridge.wire.layouts cimport DATA_OFFSET
from bridge.wire.native_c cimport CLOCK_MONOTONIC, now_ns


def timed_placements(remote, int n, Py_ssize_t length, bint bare=False, double timeout_s=PLACE_TIMEOUT_S):
    """A run's placement over rdma, timed (bench.rdma_lat): ``n`` frames of ``length`` bytes
    (a multiple of 8) stored into a mirror, each copied into ``remote``'s registered mirror,
    its write queued and published with the calls a run makes (``ring_copy``,
    ``rings_publish``: the post, the completion polled, the wakeup); each placement's ns,
    from the copy to the completion. ``bare``: the floor beneath it, one signaled RDMA
    WRITE of the same bytes posted and its completion polled, nothing else. Nobody
    consumes: the ring's space is not counted."""
    target = remote.lane_target()
    cdef Py_buffer shared
    cdef Ring ring
    cdef uint8_t *mirror
    cdef uint64_t *took
    cdef uint64_t started, timeout_ns = <uint64_t>(timeout_s * 1e9)
    cdef int i, done = 0, err = 0
    if target.verbs is None or target.verbs.lane_path is None:
        raise ValueError("timed placements: an rdma remote ring with the compiled queue pair")
    PyObject_GetBuffer(target.remote, &shared, PyBUF_WRITABLE)
    mirror, took = <uint8_t *>calloc(shared.len, 1), <uint64_t *>calloc(max(n, 1), sizeof(uint64_t))
    try:
        if mirror == NULL or took == NULL:
            raise MemoryError()
        memset(&ring, 0, sizeof(ring))
        ring.mirror, ring.shared, ring.size = mirror, <uint8_t *>shared.buf, shared.len - DATA_OFFSET
        ring.verbs, ring.seq, ring.bell = <bv_path *><uintptr_t>target.verbs.lane_path, 1, -1
        if length <= 0 or length % 8 or length > ring.size // 2:
            raise ValueError(f"timed placements: {length} bytes in a {ring.size}-byte ring")
        with nogil:
            while done < n:
                if ring.head + length > ring.size:
                    ring.head = 0
                memset(mirror + ring.head, done & 0xFF, length)  # the frame, as a run stores it
                started = now_ns(CLOCK_MONOTONIC)
                if bare:
                    err = bv_queue(ring.verbs, BV_WRITE, DATA_OFFSET + ring.head, <uint32_t>length,
                                   DATA_OFFSET + ring.head)
                    if err == 0:
                        err = bv_post(ring.verbs, 1)
                    if err == 0:
                        err = bv_wait(ring.verbs, timeout_ns)
                    ring.head += length
                else:
                    err = ring_copy(&ring, length, False)
                    if err == 0:
                        ring_advance(&ring, length)
                        ring.room = ring.size
                        err = rings_publish(&ring, 1, 1, timeout_ns)
                if err:
                    break
                took[done] = now_ns(CLOCK_MONOTONIC) - started
                done += 1
        if err:
            raise verbs_error(ring.verbs, err, timeout_s)
        return [took[i] for i in range(done)]
    finally:
        free(mirror)
        free(took)
        PyBuffer_Release(&shared)
