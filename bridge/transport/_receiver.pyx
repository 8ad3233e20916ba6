# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.transport.receiver.serve_twin``: the tcp receiver's whole
loop in C (bridge/transport/_placements.pxi), the interpreter lock released from the
first wait to the end of the connection, so an answer the primary side waits on
(semi-sync ``received``) never waits for the replica side's apply thread to give the lock
up. Same messages, same ring bytes, same answers as the twin; how it ended comes back as
numbers, and ``bridge.transport.receiver.serve`` raises from them exactly what the twin
raises. While the compiled apply lane runs it may hold the connection and carry out the
placements itself (``Receiver.address``, bridge/apply/_lane.pyx): one thread woken per
transaction instead of two. Built by the normal install (setup.py); missing, the twin runs.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc

include "_placements.pxi"

cdef extern from "sys/eventfd.h" nogil:
    int eventfd(unsigned int initval, int flags)
    int EFD_NONBLOCK, EFD_CLOEXEC

cdef extern from "unistd.h" nogil:
    int close(int fd)

ENDED_CLOSED, ENDED_OS_ERROR, ENDED_BAD_HEAD, ENDED_DOORBELL = PL_CLOSED, PL_OS_ERROR, PL_BAD_HEAD, PL_DOORBELL
_check_placement_constants("bridge.transport._receiver")


cdef class Receiver:
    """One data connection's placements into ``region`` (its session's ring), rung on
    ``bell``; with three eventfds of its own for handing the connection to an apply lane
    and back (see _placements.pxi), closed with it."""
    cdef Placements s
    cdef Py_buffer view
    cdef readonly object region  # the ring's region this connection writes into
    cdef bint viewing

    def __cinit__(self, int fd, region, int bell):
        self.s.buf = NULL
        self.s.wake_fd = self.s.taken_fd = self.s.give_fd = -1
        PyObject_GetBuffer(region, &self.view, PyBUF_WRITABLE)
        self.viewing = True
        self.region = region
        self.s.buf = <uint8_t *>malloc(PL_BUFFER_BYTES)
        if self.s.buf == NULL:
            raise MemoryError("tcp receiver: its 64 KiB buffer")
        self.s.fd, self.s.start, self.s.end = fd, 0, 0
        self.s.region, self.s.size, self.s.bell = <uint8_t *>self.view.buf, self.view.len, bell
        self.s.a = self.s.b = self.s.c = 0
        self.s.ended, self.s.owner = 0, PL_THREAD
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
    def address(self) -> int:
        """Where its state is, for the apply lane (which holds this object while it uses it)."""
        return <uintptr_t>&self.s

    @property
    def ended(self) -> bool:
        return pl_load_int(&self.s.ended) != 0

    def serve(self):
        """Carry out the placements until the connection ends; returns (ENDED_..., a, b, c)
        as described in _placements.pxi (never raises for them)."""
        with nogil:
            pl_serve(&self.s)
        code = self.s.c & 0xFF
        if code == PL_BAD_HEAD:
            return code, self.s.a, self.s.b, self.s.c >> 8
        return code, self.s.a, self.s.b, 0
