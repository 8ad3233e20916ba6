# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``bridge.source.dumpreader.DumpReader`` (read its docstring): the dump
connection's reads once the binlog dump runs, ``read`` and ``peek`` as PyMySQL's buffered
socket file answers them, over a buffer the compiled ship lane scans in place.
"""

import os

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport EAGAIN, EINTR, EINVAL, errno
from libc.stdint cimport uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove

from bridge.source import dumpreader as _twin

from bridge.transport.posix_io cimport MSG_DONTWAIT, MSG_NOSIGNAL, recv, send
from bridge.wire.native_c cimport CLOCK_MONOTONIC, now_ns, wr64

DUMP_BUFFER, PEEK_BYTES = _twin.DUMP_BUFFER, _twin.PEEK_BYTES


cdef class DumpReader:
    def __cinit__(self, sock, Py_ssize_t capacity=DUMP_BUFFER):
        self.sock, self.fd, self.cap = sock, sock.fileno(), capacity
        self.buf = <uint8_t *>malloc(capacity)
        if self.buf is NULL:
            raise MemoryError()
        self.start = self.end = 0
        self.data_ns = now_ns(CLOCK_MONOTONIC)

    def __dealloc__(self):
        free(self.buf)

    @property
    def buffered(self):
        return self.end - self.start

    cdef void make_room(self) noexcept nogil:
        """The unread bytes moved to the front once they start past the middle (none: all of it free)."""
        if self.start == self.end:
            self.start = self.end = 0
        elif self.start > self.cap // 2:
            memmove(self.buf, self.buf + self.start, self.end - self.start)
            self.end -= self.start
            self.start = 0

    cpdef object fill(self):
        """One receive into the free end of the buffer: the bytes received, 0 at the end of
        the stream, None when the receive timeout passed (or the buffer is full and empty)."""
        cdef ssize_t got
        cdef int err
        self.make_room()
        if self.end == self.cap:
            return None if self.start == self.end else self.cap
        while True:
            with nogil:
                got = recv(self.fd, self.buf + self.end, self.cap - self.end, 0)
                err = errno
            if got >= 0:
                self.end += got
                if got:
                    self.data_ns = now_ns(CLOCK_MONOTONIC)
                return got
            if err == EINTR:
                PyErr_CheckSignals()
                continue
            if err == EAGAIN:  # EWOULDBLOCK too (the same on Linux)
                return None
            raise OSError(err, os.strerror(err))

    cdef int receive(self) noexcept nogil:
        """What the socket holds into the free end of the buffer, without waiting: 1 when
        bytes came, 0 when none were there, -1 at the end of the stream or on an error."""
        cdef ssize_t got = recv(self.fd, self.buf + self.end, self.cap - self.end, MSG_DONTWAIT)
        if got > 0:
            self.end += got
            self.data_ns = now_ns(CLOCK_MONOTONIC)
            return 1
        return 0 if got < 0 and (errno == EAGAIN or errno == EINTR) else -1

    cdef int send_ack(self, uint64_t position, const char *log_file, Py_ssize_t n) noexcept nogil:
        """The semi-sync ACK on the dump connection (bridge.source.reader.BinlogReader.send_ack):
        0 or an errno."""
        cdef uint8_t packet[4 + 9 + 512]
        cdef Py_ssize_t size = 9 + n, at = 0
        cdef ssize_t sent
        if n > 512:
            return EINVAL
        packet[0], packet[1], packet[2], packet[3] = size & 0xFF, (size >> 8) & 0xFF, size >> 16, 0
        packet[4] = 0xEF
        wr64(packet + 5, position)
        memcpy(packet + 13, log_file, n)
        while at < 4 + size:
            sent = send(self.fd, packet + at, 4 + size - at, MSG_NOSIGNAL)
            if sent < 0:
                if errno == EINTR:
                    continue
                return errno
            at += sent
        return 0

    def read(self, Py_ssize_t n):
        cdef Py_ssize_t have = 0, take
        out = PyBytes_FromStringAndSize(NULL, n)
        cdef char *o = PyBytes_AS_STRING(out)
        while have < n:
            if self.start == self.end:
                got = self.fill()
                if got is None:
                    return out[:have] if have else None
                if got == 0:
                    return out[:have]
            take = min(n - have, self.end - self.start)
            memcpy(o + have, self.buf + self.start, take)
            self.start += take
            have += take
        return out

    def peek(self, Py_ssize_t n=1):
        if self.start == self.end and not self.fill():
            return b""
        return PyBytes_FromStringAndSize(<char *>self.buf + self.start, min(self.end - self.start, PEEK_BYTES))

    def close(self):
        pass
