"""TCP transport for hosts without RDMA: placement messages (wire/placement.py)
carried out on the replica's ring by a receiver thread. The baseline the RDMA
path is compared with. Writes are buffered until publish/flush/read, so a
transaction costs one send."""

from __future__ import annotations

import logging
import socket
import ssl

from bridge.errors import BridgeError, TransportError
from bridge.ring.layout import ACK_SEQ_AT, init_region, region_bytes, write_publish
from bridge.transport.doorbell import Doorbell
from bridge.transport.sockets import ControlConnection, connect, recv_exact, recv_into_exact
from bridge.wire import control, placement
from bridge.wire.placement import Op

log = logging.getLogger(__name__)


class TcpRingHost:
    def __init__(self, ring_bytes: int) -> None:
        self.ring_bytes = ring_bytes
        self.doorbell = Doorbell.eventfd()  # rung by our own receiver thread
        self._sockets: set[socket.socket] = set()  # data connections being served
        self.fence()

    @property
    def doorbell_fd(self) -> int:
        return self.doorbell.fd

    def params(self) -> dict:
        return {}

    def fence(self) -> None:
        """Fresh memory for a new session, and every data connection of earlier sessions
        shut: a receiver thread still busy with one writes into the old buffer."""
        self.region = memoryview(bytearray(region_bytes(self.ring_bytes)))
        init_region(self.region, self.ring_bytes)
        for sock in list(self._sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def accept(self, conn: ControlConnection, auth: str = "", msg: dict | None = None) -> None:
        """Take over a data connection after its (authenticated) hello. The primary sends
        no placement before ``ready``, so nothing it sends is left in the reader's buffer."""
        conn.send({"type": "ready", "auth": auth})
        conn.sock.settimeout(None)
        self.serve(conn.sock)

    def serve(self, sock: socket.socket) -> None:
        """Carry out placements from one data connection until it closes (or a new
        session fences it off): into the ring of the session it belongs to."""
        region, size = self.region, len(self.region)
        self._sockets.add(sock)
        try:
            while True:
                op, offset, length, body = placement.parse_head(recv_exact(sock, placement.HEAD.size), size)
                if op == Op.WRITE:
                    recv_into_exact(sock, region[offset:offset + length])
                elif op == Op.PUBLISH:
                    write_publish(region, placement.SEQ.unpack(recv_exact(sock, body))[0], offset)
                    self.doorbell.ring(region)
                elif op == Op.READ:
                    sock.sendall(region[offset:offset + length])
                else:
                    sock.sendall(b"\x01")
        except (BridgeError, OSError) as exc:
            log.info("tcp transport: data connection ended: %s", exc)
        finally:
            self._sockets.discard(sock)
            sock.close()

    def close(self) -> None:
        self.fence()
        self.doorbell.close()


class TcpRemoteRing:
    def __init__(self, params: dict, replica_addr: tuple[str, int], ring_bytes: int,
                 secret: str = "", timeout_s: float = 10.0, tls: ssl.SSLContext | None = None) -> None:
        self._sock = connect(replica_addr, timeout_s, tls)
        reply = control.client_handshake(ControlConnection(self._sock), secret, "data",
                                         session=params.get("session", ""))
        if reply.get("type") != "ready":
            raise TransportError(f"tcp transport: replica {replica_addr[0]}:{replica_addr[1]} refused the data "
                                 f"connection: {reply.get('reason', reply.get('type'))}")
        self._out = bytearray()

    def write(self, offset: int, data) -> None:
        self._out += placement.encode_write(offset, data)

    def publish(self, write_seq: int, head: int) -> None:
        self._out += placement.encode_publish(write_seq, head)
        self._send()

    def flush(self) -> None:
        self._out += placement.encode_fence()
        self._send()
        self._recv(1)

    def read_ack(self) -> int:
        self._out += placement.encode_read(ACK_SEQ_AT, 8)
        self._send()
        return int.from_bytes(self._recv(8), "little")

    def _send(self) -> None:
        try:
            self._sock.sendall(self._out)
        except OSError as exc:
            raise TransportError(f"tcp transport: send: {exc.strerror or exc}") from exc
        self._out.clear()

    def _recv(self, n: int) -> bytes:
        try:
            return recv_exact(self._sock, n)
        except OSError as exc:
            raise TransportError(f"tcp transport: recv: {exc.strerror or exc}") from exc

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
