"""Socket helpers shared by the control channel and the tcp transport."""

from __future__ import annotations

import socket
import ssl
import struct

from bridge.errors import RemoteProtocolError, TransportError
from bridge.transport.tls import certificate_refusal, wrap_client
from bridge.wire.control import MessageDecoder, encode_message

RECV_BYTES = 65536


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    recv_into_exact(sock, memoryview(buf))
    return bytes(buf)


def recv_into_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise TransportError(f"recv from {peer_name(sock)}: connection closed after {got} of {len(view)} bytes")
        got += n


class BufferedReceiver:
    """Reads a stream of small messages with as few recv calls as there are batches:
    ``unpack`` takes a fixed-size head from a buffer filled by one recv of whatever has
    arrived; ``read_into`` copies what is buffered and receives the rest straight into
    the target (a placement of a megabyte is not copied twice)."""

    def __init__(self, sock: socket.socket, size: int = RECV_BYTES) -> None:
        self.sock = sock
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = self._end = 0

    def unpack(self, fmt: struct.Struct) -> tuple:
        if self._end - self._start < fmt.size:
            self._fill(fmt.size)
        values = fmt.unpack_from(self._buf, self._start)
        self._start += fmt.size
        return values

    def read_into(self, target: memoryview) -> None:
        have = min(self._end - self._start, len(target))
        target[:have] = self._view[self._start:self._start + have]
        self._start += have
        if have < len(target):
            recv_into_exact(self.sock, target[have:])

    def _fill(self, need: int) -> None:
        """At least ``need`` bytes buffered (what is there moved to the front first)."""
        kept = self._end - self._start
        self._view[:kept] = self._view[self._start:self._end]
        self._start, self._end = 0, kept
        while self._end < need:
            n = self.sock.recv_into(self._view[self._end:])
            if n == 0:
                raise TransportError(f"recv from {peer_name(self.sock)}: connection closed after {self._end} of "
                                     f"{need} bytes")
            self._end += n


def peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "peer"


def connect(addr: tuple[str, int], timeout_s: float, tls: ssl.SSLContext | None = None) -> socket.socket:
    """A connection to the replica side, through TLS when ``tls`` is given (its
    handshake bounded by the same timeout)."""
    try:
        sock = socket.create_connection(addr, timeout=timeout_s)
    except OSError as exc:
        raise TransportError(f"connect to replica {addr[0]}:{addr[1]}: {exc.strerror or exc}") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is not None:
        return wrap_client(tls, sock, *addr)
    return sock


class ControlConnection:
    """Length-prefixed JSON messages over one socket (wire/control.py)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.peer = peer_name(sock)
        self._decoder = MessageDecoder()
        self._pending: list[dict] = []

    def send(self, msg: dict) -> None:
        try:
            self.sock.sendall(encode_message(msg))
        except ssl.SSLError as exc:
            raise certificate_refusal(exc, f"control send to {self.peer}") or \
                TransportError(f"control send to {self.peer}: {exc}") from exc
        except OSError as exc:
            raise TransportError(f"control send to {self.peer}: {exc.strerror or exc}") from exc

    def recv(self) -> dict:
        while not self._pending:
            try:
                data = self.sock.recv(RECV_BYTES)
            except TimeoutError as exc:
                raise TransportError(f"control recv from {self.peer}: timed out") from exc
            except ssl.SSLError as exc:
                raise certificate_refusal(exc, f"control recv from {self.peer}") or \
                    TransportError(f"control recv from {self.peer}: {exc}") from exc
            except OSError as exc:
                raise TransportError(f"control recv from {self.peer}: {exc.strerror or exc}") from exc
            if not data:
                raise TransportError(f"control recv from {self.peer}: connection closed")
            self._pending.extend(self._decoder.feed(data))
        return self._pending.pop(0)

    def close(self) -> None:
        """Shut down first: a close() alone neither wakes a thread blocked in recv() on
        this socket nor sends the peer its end while that thread holds it."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected (any more)
        try:
            self.sock.close()
        except OSError:
            pass


__all__ = ["BufferedReceiver", "ControlConnection", "connect", "recv_exact", "recv_into_exact", "RemoteProtocolError"]
