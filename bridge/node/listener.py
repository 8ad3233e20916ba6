"""The replica side's listening socket: an accept thread, and a thread per connection
that takes it through TLS (when required) and the shared-secret challenge, then hands
it by role to the node: ``control`` (a primary side's session), ``data`` (the tcp
transport's placements, the rdma transport's queue-pair exchange) or ``admin`` (the
operator's resume and skip). Refusals are answered with a code and closed here; what
a role does with its connection is the node's business."""

from __future__ import annotations

import errno
import logging
import socket
import ssl
import threading
from typing import Protocol

from bridge.errors import BridgeError, ConfigError, EndCode, Refused, TransportError
from bridge.transport import tls
from bridge.transport.sockets import ControlConnection
from bridge.wire import control

log = logging.getLogger(__name__)
HANDSHAKE_TIMEOUT_S = 10.0


class Roles(Protocol):
    """What the node does with an authenticated connection (``proof`` answers the
    peer's challenge and goes back with the first reply); each returns when it ends."""

    def serve_control(self, conn: ControlConnection, msg: dict, proof: str) -> None: ...
    def serve_data(self, conn: ControlConnection, msg: dict, proof: str) -> None: ...
    def serve_admin(self, conn: ControlConnection, msg: dict, proof: str) -> None: ...


class Listener:
    def __init__(self, address: tuple[str, int], secret: str, tls_context: ssl.SSLContext | None) -> None:
        self._sock = listen(address)
        self.address = self._sock.getsockname()[:2]
        self._secret, self._tls = secret, tls_context
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, roles: Roles) -> None:
        self._thread = threading.Thread(target=self._accept_loop, args=(roles,), name="replica-accept", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept loop (accept fails): an idle one never polls
        except OSError:
            pass  # not listening any more
        self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _accept_loop(self, roles: Roles) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._handle, args=(sock, roles), name="replica-conn", daemon=True).start()

    def _handle(self, sock: socket.socket, roles: Roles) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        conn = self._secure(ControlConnection(sock))
        if conn is None:
            return
        try:
            msg = self._authenticate(conn)
            serve = {"data": roles.serve_data, "admin": roles.serve_admin}.get(str(msg.get("role")),
                                                                              roles.serve_control)
            serve(conn, msg, self._proof_for(msg))
        except TransportError as exc:  # closed or timed out: nobody to answer
            log.info("connection from %s ended: %s", conn.peer, exc)
            conn.close()
        except BridgeError as exc:
            log.warning("connection from %s refused: %s", conn.peer, exc)
            try_send(conn, control.error(str(exc), exc.end_code if isinstance(exc, Refused) else EndCode.ERROR))
            conn.close()

    def _secure(self, conn: ControlConnection) -> ControlConnection | None:
        """The connection through TLS when this side requires it; None: refused (said)."""
        if self._tls is None:
            return conn
        try:
            return ControlConnection(tls.accept(self._tls, conn.sock, conn.peer))
        except tls.PlainClient as exc:  # told in plain text, the only language it speaks
            log.warning("%s: refused", exc)
            try_send(conn, control.error(tls.PLAIN_REFUSAL, EndCode.TLS_REQUIRED))
        except BridgeError as exc:  # the handshake failed: OpenSSL told the peer
            log.warning("connection from %s refused: %s", conn.peer, exc)
        conn.close()
        return None

    def _authenticate(self, conn: ControlConnection) -> dict:
        """Challenge first; the hello must carry the proof; ours goes back with the reply."""
        nonce = control.challenge()
        conn.send(nonce)
        msg = control.check_hello(conn.recv())
        control.check_proof(self._secret, str(msg.get("role")), nonce["nonce"], msg.get("auth"), conn.peer)
        return msg

    def _proof_for(self, msg: dict) -> str:
        return control.proof(self._secret, "replica", str(msg.get("nonce", ""))) if self._secret else ""


def listen(address: tuple[str, int]) -> socket.socket:
    try:
        sock = socket.create_server(address, reuse_port=False)
    except OSError as exc:
        where = f"{address[0]}:{address[1]}"
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"listen on {where}: the address is in use (another replica side, or another "
                              "program, listens there): stop it or choose another --listen") from exc
        raise ConfigError(f"listen on {where}: {exc.strerror}") from exc
    return sock


def try_send(conn: ControlConnection, msg: dict) -> None:
    try:
        conn.send(msg)
    except TransportError as exc:
        log.debug("could not tell %s: %s", conn.peer, exc)
