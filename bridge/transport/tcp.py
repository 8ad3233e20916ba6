"""TCP transport for hosts without RDMA: placement messages (wire/placement.py)
carried out on the replica's ring by a receiver thread. The baseline the RDMA
path is compared with. Writes are buffered until publish/flush/read, so a
transaction costs one send.

A sent placement is only in this host's socket buffers: the replica side holds it
once its receiver answers (ANSWER: placed and applied seq, read from its ring after
everything before it was carried out). ``held`` and ``last_ack`` read the answers
that have arrived without waiting (the primary side waits for them beside the
binlog, on ``answers_fd``); ``flush`` and ``read_ack`` wait for a fresh one.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl

from bridge.errors import BridgeError, TransportError
from bridge.ring.layout import init_region, region_bytes
from bridge.transport import receiver
from bridge.transport.base import DoorbellSleep, LaneTarget
from bridge.transport.doorbell import Doorbell
from bridge.transport.sockets import ControlConnection, connect
from bridge.wire import control, placement

log = logging.getLogger(__name__)


class TcpRingHost(DoorbellSleep):
    def __init__(self, ring_bytes: int) -> None:
        self.ring_bytes = ring_bytes
        self.doorbell = Doorbell.eventfd()  # rung by our own receiver thread
        self._sockets: set[socket.socket] = set()  # data connections being served
        self._lent = None  # the newest data connection's compiled receiver (bridge.transport.receiver)
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
        self._sockets.add(sock)
        mine = []

        def lend(serving) -> None:
            if serving is not None:
                mine.append(serving)
                self._lent = serving
            elif mine and self._lent is mine[0]:
                self._lent = None

        try:
            receiver.serve(sock, self.region, self.doorbell, lend)
        except (BridgeError, OSError) as exc:
            log.info("tcp transport: data connection ended: %s", exc)
        finally:
            self._sockets.discard(sock)
            sock.close()

    def lane_receiver(self, region):
        """The compiled receiver of the data connection that writes into ``region`` (the
        session's ring), for the apply lane to read the connection itself while it runs;
        None when there is none (the pure-Python twin, TLS, no connection)."""
        lent = self._lent
        return lent if lent is not None and lent.region is region and not lent.ended else None

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
        self._replies = bytearray()  # answer bytes received, not yet a whole reply
        self._asked = 0  # answers asked for and not yet read
        self._asked_through = 0  # the seq published when the last answer was asked for
        self._published = 0
        self.placed = 0  # the replica side's last answer: its ring holds every frame up to this seq
        self.applied = 0  # ... and the replica committed every frame up to this one

    @property
    def answers_fd(self) -> int:
        """Readable when an answer arrives (the primary side waits on it beside the binlog)."""
        return self._sock.fileno()

    def write(self, offset: int, data) -> None:
        self._out += placement.encode_write(offset, data)

    def publish(self, write_seq: int, head: int, confirm: bool = False) -> None:
        """Send what was written and the new write_seq; ``confirm``: ask in the same send
        for the answer that tells once the replica side holds it."""
        self._out += placement.encode_publish(write_seq, head, answer=confirm)
        self._published = write_seq
        if confirm:
            self._asked += 1
            self._asked_through = write_seq
        self._send()

    def producer_region(self) -> None:
        """None: the producer frames into memory of its own (its frames are copied or sent)."""
        return None

    def lane_target(self) -> LaneTarget | None:
        """What a ship lane (bridge.source.ship) sends its WRITE and PUBLISH messages on:
        the data socket; None over TLS (the lane writes the plain socket). The lane may
        ask for answers itself (semi-sync `received`); those asked for here are handed to
        it while it runs (``answers_to_lane``, ``answers_from_lane``)."""
        if isinstance(self._sock, ssl.SSLSocket) or self._out:
            return None
        return LaneTarget(sock=self._sock, confirms=True)

    def lane_published(self, write_seq: int) -> None:
        """A ship lane sent a PUBLISH of ``write_seq`` on the data socket."""
        self._published = write_seq

    def answers_to_lane(self) -> tuple[int, bytes, int]:
        """The answers asked for here and not read yet (after taking those that arrived),
        handed to a ship lane that reads them from now on: (how many, the next one's bytes
        read so far, the seq published when the last was asked for)."""
        self._read_replies(wait=False)
        out = (self._asked, bytes(self._replies), self._asked_through)
        self._asked = 0
        self._replies.clear()
        return out

    def answers_from_lane(self, asked: int, partial: bytes, asked_seq: int, placed: int, applied: int) -> None:
        """What a ship lane hands back after a run (``ShipLane.answers_out``): the answers
        it asked for (or was handed) and did not read, read here from now on, and the
        replica side's last answer it read."""
        self.placed, self.applied = max(self.placed, placed), max(self.applied, applied)
        if asked:
            self._asked += asked
            self._asked_through = max(self._asked_through, asked_seq)
            self._replies[:0] = partial

    def held(self, wanted: int) -> int:
        """The highest seq the replica side said its ring holds, from the answers already
        here (no wait); asks for one covering ``wanted`` unless one is on its way."""
        self._read_replies(wait=False)
        if self.placed < wanted and self._asked_through < min(wanted, self._published):
            self._ask()
            self._send()
        return self.placed

    def last_ack(self) -> int:
        """The replica's applied seq from the answers already here (no wait); asks for a
        fresh one when none is on its way."""
        self._read_replies(wait=False)
        if not self._asked:
            self._ask()
            self._send()
        return self.applied

    def flush(self) -> None:
        """Wait until the replica side holds everything sent so far."""
        self._ask()
        self._send()
        self._read_replies(wait=True)

    def read_ack(self) -> int:
        self.flush()
        return self.applied

    def _ask(self) -> None:
        self._out += placement.ANSWER
        self._asked += 1
        self._asked_through = self._published

    def _read_replies(self, wait: bool) -> None:
        """Take the answers that arrived (``wait``: until every one asked for is here)."""
        sock = self._sock
        while self._asked:
            if not wait and not _readable(sock):
                return
            try:
                data = sock.recv(placement.REPLY.size * self._asked - len(self._replies))
            except OSError as exc:
                raise TransportError(f"tcp transport: recv: {exc.strerror or exc}") from exc
            if not data:
                raise TransportError(f"tcp transport: the replica side closed the data connection with "
                                     f"{self._asked} answers outstanding")
            self._replies += data
            whole = len(self._replies) // placement.REPLY.size
            for placed, applied in placement.REPLY.iter_unpack(self._replies[:whole * placement.REPLY.size]):
                self.placed, self.applied = max(self.placed, placed), max(self.applied, applied)
            del self._replies[:whole * placement.REPLY.size]
            self._asked -= whole

    def _send(self) -> None:
        try:
            self._sock.sendall(self._out)
        except OSError as exc:
            raise TransportError(f"tcp transport: send: {exc.strerror or exc}") from exc
        self._out.clear()

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def _readable(sock: socket.socket) -> bool:
    """Bytes to read now: decrypted ones TLS holds, or any in the kernel."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    return bool(select.select([sock], [], [], 0)[0])
