"""The operator's commands to a running replica side (`rdma-bridge resume`, `rdma-bridge
skip --gtid G`): one authenticated request on the replica side's control address (the
shared secret proven both ways, as the primary side does; without a secret the replica
side listens on loopback only), one answer once the outcome is known."""

from __future__ import annotations

import time

from bridge.config import TlsFiles
from bridge.errors import RemoteProtocolError
from bridge.node.halt import Halt
from bridge.transport import tls as transport_tls
from bridge.transport.sockets import ControlConnection, connect
from bridge.wire import control

OUTCOME_WAIT_S = 10.0  # how long resume waits to say whether the transaction went through


def request(address: tuple[str, int], secret: str, command: dict, timeout_s: float = 30.0,
            tls: TlsFiles | None = None) -> str:
    """Send ``command`` ({"type": "resume"} or {"type": "skip", "gtid": ...}); the
    replica side's answer, or the error it refused the command with. ``tls``: a
    replica side that requires TLS (this host's certificate serves)."""
    conn = ControlConnection(connect(address, timeout_s, transport_tls.prepare(tls, server_side=False)))
    try:
        control.check_hello(control.client_handshake(conn, secret, "admin"), expect_type="welcome")
        conn.send(command)
        answer = conn.recv()
        if answer.get("type") == "error":
            control.raise_refusal(answer)
        return str(answer.get("message", ""))
    finally:
        conn.close()


def serve(node, conn: ControlConnection, proof: str) -> None:
    """The replica side's end: one command on an authenticated connection (``proof``
    answers the client's challenge), answered once the outcome is known."""
    conn.send(control.welcome(auth=proof))
    command = conn.recv()
    if command.get("type") == "resume":
        halt = node.resume()
        answer = outcome(node, halt) if halt else "applying was not stopped"
    elif command.get("type") == "skip":
        halt = node.skip(str(command.get("gtid", "")), f"{command.get('by', '?')} from {conn.peer}")
        answer = f"skipped seq {halt.seq} ({halt.gtid}), recorded in rdma_bridge.skipped; applying goes on"
    else:
        raise RemoteProtocolError(f"admin command {command.get('type')!r}: unknown")
    conn.send({"type": "done", "message": answer})
    conn.close()


def outcome(node, resumed: Halt) -> str:
    """What became of the transaction a resume retried: the position passed it, or
    applying stopped again (waits up to OUTCOME_WAIT_S)."""
    deadline = time.monotonic() + OUTCOME_WAIT_S
    while node.applier.position.applied_seq <= resumed.seq and node.halt is None and time.monotonic() < deadline:
        time.sleep(0.02)
    again = node.halt
    if again is not None:
        return f"applying stopped again at seq {again.seq} ({again.gtid}): {again.error}"
    return f"applying again from seq {resumed.seq} ({resumed.gtid})"
