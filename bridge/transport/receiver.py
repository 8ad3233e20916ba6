"""The tcp transport's receiver: carries out the placement messages of one data
connection on the replica's ring (bridge.wire.placement), answering ANSWERs with what
the ring holds, ringing the doorbell after each publish.

Two twins, one behaviour: ``serve_twin`` in Python, and the compiled loop of
``bridge.transport._receiver``, which runs with the interpreter lock released for the
whole connection, so an answer the primary side waits on (semi-sync ``received``) is
sent without waiting for the apply thread to let go of the lock; while the compiled apply
lane runs, it reads the connection itself (the thread parked), so that a transaction
wakes one thread, not two. ``serve`` picks the
compiled one where it is built (bridge.wire.native decides) and the socket is plain TCP
(TLS needs Python's ssl), and raises from its result what the twin raises.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from bridge.errors import RemoteProtocolError, TransportError
from bridge.ring.layout import ACK_SEQ_AT, WRITE_SEQ_AT, read_u64, write_publish
from bridge.transport.doorbell import Doorbell
from bridge.transport.sockets import BufferedReceiver, peer_name
from bridge.wire import native, placement
from bridge.wire.placement import Op

PART = "tcp receiver"
_compiled = native.pick(PART)
COMPILED = _compiled is not None
# how the compiled loop ended, with three numbers (bridge/transport/_receiver.pxd)
ENDED_CLOSED = 0  # the peer closed: (bytes it had, bytes it needed, 0)
ENDED_OS_ERROR = 1  # recv or send failed: (errno, 0, 0)
ENDED_BAD_HEAD = 2  # a head the twin refuses: (op, offset, length)
ENDED_DOORBELL = 3  # writing the doorbell failed: (errno, 0, 0)


def serve(sock: socket.socket, region, doorbell: Doorbell, lend: Callable[[object], None] | None = None) -> None:
    """Until the connection ends; raises why (TransportError, OSError, RemoteProtocolError).
    ``lend``: told the compiled loop's Receiver while it serves (None after), which the
    compiled apply lane may hold the connection through (bridge/transport/_receiver.pxd)."""
    if _compiled is None or type(sock) is not socket.socket:
        serve_twin(sock, region, doorbell)
        return
    serving = _compiled.Receiver(sock.fileno(), region, doorbell.fd)
    if lend is not None:
        lend(serving)
    try:
        code, a, b, c = serving.serve()
    finally:
        if lend is not None:
            lend(None)
    raise ended(code, a, b, c, sock, len(region))


def ended(code: int, a: int, b: int, c: int, sock: socket.socket, size: int) -> Exception:
    """The error the twin raises where the compiled loop ended with (code, a, b, c)."""
    if code == ENDED_CLOSED:
        return TransportError(f"recv from {peer_name(sock)}: connection closed after {a} of {b} bytes")
    if code == ENDED_OS_ERROR:
        return OSError(a, os.strerror(a))
    if code == ENDED_DOORBELL:
        return TransportError(f"ring the replica's doorbell: {os.strerror(a)}")
    try:
        placement.check_head(a, b, c, size)
    except RemoteProtocolError as exc:  # the twin's refusal of this head, word for word
        return exc
    return AssertionError(f"tcp receiver: the compiled loop refused a head the twin takes: {(a, b, c)}")


def serve_twin(sock: socket.socket, region, doorbell: Doorbell) -> None:
    incoming = BufferedReceiver(sock)  # one recv for a transaction's messages, not one per message
    size = len(region)
    while True:
        op, offset, length, _ = placement.check_head(*incoming.unpack(placement.HEAD), size)
        if op == Op.WRITE:
            incoming.read_into(region[offset:offset + length])
        elif op == Op.ANSWER:  # what the ring holds now that everything before it is carried out
            _answer(sock, region)
        else:
            write_publish(region, incoming.unpack(placement.SEQ)[0], offset)
            if op == Op.PUBLISH_ANSWER:
                _answer(sock, region)  # before the doorbell wakes the apply thread
            doorbell.ring(region)


def _answer(sock: socket.socket, region) -> None:
    sock.sendall(placement.encode_reply(read_u64(region, WRITE_SEQ_AT), read_u64(region, ACK_SEQ_AT)))
