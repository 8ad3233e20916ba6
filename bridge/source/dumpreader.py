"""The dump connection's reads once the binlog dump runs (pure-Python twin of the
``DumpReader`` in ``_ship.pyx``): PyMySQL's buffered socket file replaced by one whose
buffer the ship lane (bridge.source.ship) takes packets from directly."""

from __future__ import annotations

import socket
import time

DUMP_BUFFER = 1 << 18  # bytes the dump's reader holds; a transaction longer than this is never whole in it
PEEK_BYTES = 1 << 16  # a peek copies at most this much (the general path's one-call scan looks no further)
BLOCKED = (BlockingIOError, InterruptedError)


class DumpReader:
    """The dump connection's reads once the dump runs: ``read`` and ``peek`` as PyMySQL's
    buffered socket file answers them (``read`` returns None when the socket's receive
    timeout passed with nothing read, fewer bytes at the end of the stream), over a
    buffer of ``DUMP_BUFFER`` bytes the ship lane takes packets from directly."""

    def __init__(self, sock: socket.socket, capacity: int = DUMP_BUFFER) -> None:
        self.sock, self.fd = sock, sock.fileno()
        self.buf = bytearray(capacity)
        self.start = self.end = 0  # the unread bytes are buf[start:end]
        self.data_ns = time.monotonic_ns()  # when the socket last gave bytes (to this reader or its lane)

    @property
    def buffered(self) -> int:
        return self.end - self.start

    def fill(self, wait: bool = True) -> int | None:
        """One receive into the free end of the buffer (moved to the front first when
        it is past the middle): the bytes received, 0 at the end of the stream, None
        when the receive timeout passed (``wait=False``: when nothing was there). Other
        socket errors raise."""
        if self.start == self.end:
            self.start = self.end = 0
        elif self.start > len(self.buf) // 2:
            self.buf[:self.end - self.start] = self.buf[self.start:self.end]
            self.start, self.end = 0, self.end - self.start
        if self.end == len(self.buf):
            return None if not self.buffered else len(self.buf)  # full: nothing to add
        try:
            with memoryview(self.buf) as view:
                got = self.sock.recv_into(view[self.end:], 0, 0 if wait else socket.MSG_DONTWAIT)
        except BLOCKED:
            return None
        self.end += got
        if got:
            self.data_ns = time.monotonic_ns()
        return got

    def read(self, n: int) -> bytes | None:
        out = bytearray()
        while len(out) < n:
            if self.start == self.end:
                got = self.fill()
                if got is None:
                    return bytes(out) if out else None
                if got == 0:
                    return bytes(out)
            take = min(n - len(out), self.end - self.start)
            out += self.buf[self.start:self.start + take]
            self.start += take
        return bytes(out)

    def peek(self, n: int = 1) -> bytes:
        """The bytes buffered, up to ``PEEK_BYTES`` (receiving once when none are): b""
        after a timeout or at the end of the stream."""
        if self.start == self.end and not self.fill():
            return b""
        return bytes(self.buf[self.start:min(self.end, self.start + PEEK_BYTES)])

    def close(self) -> None:
        """PyMySQL closes its file so; the socket is PyMySQL's to close."""
