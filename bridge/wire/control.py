"""Control channel messages (pure): length-prefixed JSON objects.

    length u32 (little-endian) | utf-8 JSON object with a "type" field

``MessageDecoder.feed(bytes)`` returns the complete messages received so far (the
h11 shape: no sockets here). Size limits are enforced before allocation.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import struct

from bridge import __version__
from bridge.errors import (
    AuthenticationError,
    ChannelBusy,
    EndCode,
    Fenced,
    RemoteProtocolError,
    StartRefused,
    VersionSkew,
)

PROTOCOL_MAGIC = "rdma-bridge"
PROTOCOL_VERSION = 8  # both ends speak exactly one version: a peer of another is refused, naming both
MAX_MESSAGE_BYTES = 1 << 20
_LEN = struct.Struct("<I")


def encode_message(msg: dict) -> bytes:
    body = json.dumps(msg, separators=(",", ":")).encode()
    return _LEN.pack(len(body)) + body


class MessageDecoder:
    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_bytes

    def feed(self, data: bytes) -> list[dict]:
        self._buf += data
        out = []
        while len(self._buf) >= _LEN.size:
            (n,) = _LEN.unpack_from(self._buf)
            if n > self._max:
                raise RemoteProtocolError(f"control message: {n} bytes over the {self._max}-byte limit")
            if len(self._buf) < _LEN.size + n:
                break
            body = bytes(self._buf[_LEN.size:_LEN.size + n])
            del self._buf[:_LEN.size + n]
            out.append(_parse(body))
        return out


def _parse(body: bytes) -> dict:
    try:
        msg = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RemoteProtocolError(f"control message: not JSON: {exc}") from exc
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise RemoteProtocolError("control message: not an object with a 'type'")
    return msg


def error(reason: str, code: EndCode = EndCode.ERROR) -> dict:
    """A refusal or the end of a session; ``code`` says which, so nobody reads the text."""
    return {"type": "error", "code": str(EndCode(code)), "reason": reason}


_REFUSALS = {cls.end_code: cls for cls in (ChannelBusy, Fenced, StartRefused)}


def raise_refusal(msg: dict) -> None:
    """Raise the error a control ``error`` message carries."""
    reason = f"refused by peer: {msg.get('reason', '?')}"
    raise _REFUSALS.get(EndCode.of(msg.get("code")), RemoteProtocolError)(reason)


def stamp() -> dict:
    """What every opening message carries: the magic, the wire protocol, the release."""
    return {"magic": PROTOCOL_MAGIC, "version": PROTOCOL_VERSION, "release": __version__}


def hello(role: str, **fields) -> dict:
    return {"type": "hello", **stamp(), "role": role, **fields}


def welcome(**fields) -> dict:
    return {"type": "welcome", **stamp(), **fields}


def check_hello(msg: dict, expect_type: str = "hello") -> dict:
    """Verify magic and version of a hello/welcome; raise VersionSkew naming both."""
    if msg.get("type") == "error":
        raise_refusal(msg)
    if msg.get("type") != expect_type or msg.get("magic") != PROTOCOL_MAGIC:
        raise RemoteProtocolError(f"handshake: expected {expect_type!r} with magic {PROTOCOL_MAGIC!r}, "
                                  f"got {msg.get('type')!r}")
    if msg.get("version") != PROTOCOL_VERSION:
        theirs = f"rdma-bridge {msg['release']}" if msg.get("release") else "an older rdma-bridge"
        raise VersionSkew(f"handshake: the peer runs {theirs} (wire protocol version {msg.get('version')}), this "
                          f"side rdma-bridge {__version__} (protocol version {PROTOCOL_VERSION}): both ends must run "
                          "the same release: upgrade both")
    return msg


# --- peer authentication (shared secret, challenge-response, both directions) ---
# The listener opens every connection with a challenge nonce; the connecting side
# answers with HMAC-SHA256(secret, role:nonce) and its own nonce, which the listener
# answers in turn. The secret itself never crosses the wire.

def challenge() -> dict:
    return {"type": "challenge", **stamp(), "nonce": secrets.token_hex(16)}


def new_nonce() -> str:
    return secrets.token_hex(16)


def proof(secret: str, role: str, nonce: str) -> str:
    return hmac.new(secret.encode(), f"{role}:{nonce}".encode(), hashlib.sha256).hexdigest()


def check_proof(secret: str, role: str, nonce: str, given, peer: str) -> None:
    """With a secret configured, the peer must prove it; without one, nothing is checked."""
    if not secret:
        return
    if not isinstance(given, str) or not hmac.compare_digest(proof(secret, role, nonce), given):
        raise AuthenticationError(f"authenticate {peer}: wrong or missing shared secret (role {role})")


def client_handshake(conn, secret: str, role: str, **fields) -> dict:
    """The connecting side: answer the challenge, then check the listener's reply and
    its proof. ``conn`` has send(dict)/recv() -> dict (no sockets here)."""
    ch = check_hello(conn.recv(), expect_type="challenge")
    mine = new_nonce()
    conn.send(hello(role, nonce=mine, auth=proof(secret, role, ch["nonce"]) if secret else "", **fields))
    reply = conn.recv()
    if reply.get("type") == "error":
        raise_refusal(reply)
    check_proof(secret, "replica", mine, reply.get("auth"), getattr(conn, "peer", "peer"))
    return reply
