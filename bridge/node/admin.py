"""The operator's commands to a running replica side (`rdma-bridge resume`, `rdma-bridge
skip --gtid G`): one authenticated request on the replica side's control address (the
shared secret proven both ways, as the primary side does; without a secret the replica
side listens on loopback only), one answer once the outcome is known."""

from __future__ import annotations

from collections.abc import Callable

from bridge.node.halt import Halt
from bridge.transport.sockets import ControlConnection, connect
from bridge.wire import control

OUTCOME_WAIT_S = 10.0  # how long resume waits to say whether the transaction went through


def request(address: tuple[str, int], secret: str, command: dict, timeout_s: float = 30.0) -> str:
    """Send ``command`` ({"type": "resume"} or {"type": "skip", "gtid": ...}); the
    replica side's answer, or the error it refused the command with."""
    conn = ControlConnection(connect(address, timeout_s))
    try:
        control.check_hello(control.client_handshake(conn, secret, "admin"), expect_type="welcome")
        conn.send(command)
        answer = conn.recv()
        if answer.get("type") == "error":
            control.raise_refusal(answer)
        return str(answer.get("message", ""))
    finally:
        conn.close()


def outcome(resumed: Halt, wait_past: Callable[[int, float], Halt | None]) -> str:
    """What became of the transaction a resume retried."""
    again = wait_past(resumed.seq, OUTCOME_WAIT_S)
    if again is not None:
        return f"applying stopped again at seq {again.seq} ({again.gtid}): {again.error}"
    return f"applying again from seq {resumed.seq} ({resumed.gtid})"
