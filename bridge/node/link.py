"""The primary side's session with the replica side, in one place (the counterpart of
bridge.node.session on the replica side).

A handshake makes a ``Link``: the control connection (watched by a thread of its own
for what the replica side says: applying stopped or goes on, or an error with a code
that ends the session) and the remote ring once opened.
The link goes down when the replica side ends it, the control connection fails, or
this side cannot send its heartbeat; why, and with which code (``fenced``,
``bad_frame``...), stays readable after it is closed: the node decides from it whether
to resend from its ring, re-read the binlog, or stop. The next handshake makes a new
Link; a thread still watching an old one only ever touches that one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from bridge.errors import BridgeError, EndCode, Fenced, TransportError
from bridge.node.fencing import HEARTBEAT_S
from bridge.transport.sockets import ControlConnection


class Link:
    def __init__(self, control: ControlConnection, name: str, on_apply_state: Callable[[dict | None], None]) -> None:
        self.control: ControlConnection | None = control
        self.name = name  # host:port of the replica side, for messages
        self.remote = None  # the replica's ring, once opened (bridge.transport)
        self.reason, self.code = "", None  # why it went down; the replica side's EndCode, if it said one
        self._down = threading.Event()
        self._heard_at = time.monotonic()  # when this side last spoke on the control connection
        self._on_apply_state = on_apply_state
        # apply mode relay: the seqs the replica server has received (its semi-sync ACK) and
        # executed, as the replica side says them; readable on ``progress_fd`` each time they move
        self.relay_received = self.relay_applied = 0
        self.progress_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        control.sock.settimeout(None)
        threading.Thread(target=self._watch, args=(control,), name="primary-control", daemon=True).start()

    @property
    def down(self) -> bool:
        return self._down.is_set()

    @property
    def fenced(self) -> bool:
        """Another primary side took the channel (the replica side said so)."""
        return self.code == EndCode.FENCED

    def fail(self, reason: str, code: EndCode | None = None) -> None:
        self.reason, self.code = reason, code
        self._down.set()

    def raise_if_down(self) -> None:
        """Once per binlog event: one flag read while the link is up."""
        if not self._down.is_set():
            return
        if self.fenced:
            raise Fenced(f"link to replica {self.name}: {self.reason}")
        raise TransportError(f"link to replica {self.name}: {self.reason}")

    def say_alive(self) -> None:
        """A heartbeat on the control connection: the replica side holds the channel for
        this writer only while it hears from it (bridge.node.fencing)."""
        now = time.monotonic()
        if self.control is not None and now - self._heard_at >= HEARTBEAT_S:
            self._heard_at = now
            try:
                self.control.send({"type": "heartbeat"})
            except TransportError as exc:
                self.fail(str(exc))

    def say_last(self, msg: dict, timeout_s: float = 5.0) -> None:
        """``msg`` as this side's last word in the session, then a wait (``timeout_s`` at
        most) for the replica side to close its end once it has read it (the watcher sees
        that). Closing at once could reset the connection while the replica side's last
        bytes are still unread here, and a reset may drop ``msg`` before it is read."""
        self.control.send(msg)
        self._down.wait(timeout_s)

    def drain_progress(self) -> None:
        """Clear ``progress_fd`` once what it announced was looked at."""
        try:
            os.eventfd_read(self.progress_fd)
        except BlockingIOError:
            pass

    def close(self) -> None:
        """The remote ring and the control connection; why it went down stays."""
        parts, self.remote, self.control = (self.remote, self.control), None, None
        for part in parts:
            if part is not None:
                part.close()

    def _watch(self, conn: ControlConnection) -> None:
        """The replica speaks to say that applying stopped or goes on again, and to end a
        session (error, with a code) or by closing it."""
        code = None
        try:
            while True:
                msg = conn.recv()
                if msg.get("type") in ("apply_stopped", "apply_resumed"):
                    self._on_apply_state(msg if msg["type"] == "apply_stopped" else None)
                elif msg.get("type") == "relay_progress":
                    self.relay_applied = max(self.relay_applied, int(msg.get("applied", 0)))
                    self.relay_received = max(self.relay_received, int(msg.get("received", 0)), self.relay_applied)
                    os.eventfd_write(self.progress_fd, 1)
                elif msg.get("type") == "error":
                    code = EndCode.of(msg.get("code"))
                    raise TransportError(f"replica ended the session: {msg.get('reason')}")
        except BridgeError as exc:
            if not self.down:
                self.fail(str(exc), code)
