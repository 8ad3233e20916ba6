"""A primary side's session on the replica side, in one place.

The states: no session (nothing is applied from the ring; the apply loop idles) ->
open (a hello was admitted: the welcome carries the session's id, epoch, ring
parameters and where to resume; the ring memory is fresh and its consumer expects
applied_seq + 1) -> ended (a bad frame, a chunked transaction cut short, or a
take-over: the primary side is told why, with a code, and its control connection
closed) -> the next hello opens a new one. Everything that starts afresh with a
session is a field of ``Session``; the node holds the current one (or None) and
replaces it whole, under its lock, so that no field of an old session survives into a
new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.errors import EndCode, RemoteProtocolError
from bridge.node.listener import try_send
from bridge.ring.consumer import RingConsumer
from bridge.transport.sockets import ControlConnection
from bridge.wire import control


@dataclass(eq=False)
class Session:
    id: str
    epoch: int
    control: ControlConnection
    consumer: RingConsumer
    apply_mode: str  # binlog | sql, chosen for this primary side's flavor
    has_format: bool  # a FORMAT_DESCRIPTION is known for the frames taken in it (binlog mode)

    def tell(self, msg: dict) -> None:
        """A control message to the primary side (apply_stopped, apply_resumed); lost if it is gone."""
        try_send(self.control, msg)

    def end(self, reason: str = "", code: EndCode = EndCode.ERROR) -> None:
        """Close its control connection, telling the primary side why where there is a reason."""
        if reason:
            try_send(self.control, control.error(reason, code))
        self.control.close()


class HostsRing:
    """A replica side's data connections, in either apply mode: one joins the ring host of
    the current session (tcp, rdma), or is refused. Mixed into ReplicaNode and RelayNode,
    which hold ``current`` and ``host``."""

    @property
    def session(self) -> str:
        """The current session's id; "" between sessions."""
        return self.current.id if self.current is not None else ""

    def serve_data(self, conn: ControlConnection, msg: dict, proof: str) -> None:
        session = self.current
        if session is None or msg.get("session") != session.id:
            raise RemoteProtocolError(f"data connection from {conn.peer}: no matching session")
        self.host.accept(conn, proof, msg)
