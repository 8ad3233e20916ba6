"""Socket helpers shared by the control channel and the tcp transport."""

from __future__ import annotations

import socket
import ssl

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
            raise TransportError(f"recv from {_peer(sock)}: connection closed after {got} of {len(view)} bytes")
        got += n


def _peer(sock: socket.socket) -> str:
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
        self.peer = _peer(sock)
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


__all__ = ["ControlConnection", "connect", "recv_exact", "recv_into_exact", "RemoteProtocolError"]
