# The dump connection's reader, compiled (bridge/source/_dumpreader.pyx; its twin is
# bridge.source.dumpreader): the buffer the compiled ship lane (bridge/source/_ship.pyx)
# scans the dump's packets in, in place.
from libc.stdint cimport uint8_t, uint64_t


cdef class DumpReader:
    cdef readonly object sock
    cdef readonly int fd
    cdef uint8_t *buf
    cdef Py_ssize_t cap
    cdef public Py_ssize_t start, end  # the unread bytes are buf[start:end]
    cdef public long long data_ns  # when the socket last gave bytes (to this reader or its lane)

    cdef void make_room(self) noexcept nogil
    cpdef object fill(self)
    cdef int receive(self) noexcept nogil
    cdef int send_ack(self, uint64_t position, const char *log_file, Py_ssize_t n) noexcept nogil
