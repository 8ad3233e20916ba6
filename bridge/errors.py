"""The one error tree of rdma-bridge.

Foreign exceptions (pymysql, socket, mmap) are translated at the boundary with
``raise X(...) from exc``. Messages read ``operation: detail`` and name the seq,
GTID, table or address involved. Whose fault it is shows in the type: a
``RemoteProtocolError`` came from the peer, a ``LocalProtocolError`` from us.
"""

from __future__ import annotations

import os
from enum import StrEnum


class EndCode(StrEnum):
    """Why the replica side refused a primary side or ended its session, as the control
    channel's ``error`` message says it (so nobody reads the text)."""

    ERROR = "error"  # anything else: the reason's text says what
    BAD_FRAME = "bad_frame"  # a frame the replica side would not apply: resend from the binlog
    REFUSED = "refused"
    CHANNEL_BUSY = "channel_busy"
    FENCED = "fenced"  # another primary side took the channel over: stop writing
    START_POSITION = "start_position"
    TLS_REQUIRED = "tls_required"

    @classmethod
    def of(cls, value) -> EndCode:
        """The code a peer sent; one this side does not know is ERROR."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.ERROR


EXIT_ERROR = 1  # the process' exit status for an error
EXIT_CONFIG = 78  # sysexits' EX_CONFIG: a setting that cannot work until a person changes it


class BridgeError(Exception):
    """Base of every error rdma-bridge raises on purpose."""

    exit_status = EXIT_ERROR


class ConfigError(BridgeError):
    """Bad command line, URL or option value: starting again changes nothing, so the
    process exits EXIT_CONFIG (the systemd units do not restart on it)."""

    exit_status = EXIT_CONFIG


class SandboxError(BridgeError):
    """The local MariaDB sandbox could not be created, started or stopped."""


class ProtocolError(BridgeError):
    """Bytes that do not follow the wire or ring contract."""


class LocalProtocolError(ProtocolError):
    """We were asked to produce something the protocol cannot carry."""


class RemoteProtocolError(ProtocolError):
    """The peer (or the memory it wrote) broke the protocol."""


class CorruptFrame(RemoteProtocolError):
    """A published frame failed its seq or crc check: never apply, resync."""

    def __init__(self, message: str, seq: int) -> None:
        super().__init__(message)
        self.seq = seq


class AuthenticationError(RemoteProtocolError):
    """The peer could not prove the shared secret."""


class VersionSkew(RemoteProtocolError):
    """Both ends speak different protocol versions or ring layouts."""


class Refused(BridgeError):
    """The replica side refused this primary side for a reason retrying cannot fix;
    ``end_code`` travels in the control channel's error message."""

    end_code = EndCode.REFUSED


class ChannelBusy(Refused):
    """Another primary side feeds the channel (and this one did not ask to take over)."""

    end_code = EndCode.CHANNEL_BUSY


class Fenced(Refused):
    """A newer primary side took the channel over: this one must stop writing."""

    end_code = EndCode.FENCED


class ChannelLocked(ConfigError):
    """Another replica side applies this channel into the same replica (which may stop:
    an error, not a setting)."""

    exit_status = EXIT_ERROR


class StartRefused(Refused):
    """A new channel would replay the binlog into data the replica already holds."""

    end_code = EndCode.START_POSITION


class RingFull(BridgeError):
    """The ring has no room for the next frame until the replica acknowledges."""


class TransportError(BridgeError):
    """The link to the replica's ring failed (connection lost, refused, closed)."""


# enum ibv_wc_status (infiniband/verbs.h) as ibv_wc_status_str names each
WC_STATUS_NAMES = {
    0: "success", 1: "local length error", 2: "local QP operation error", 3: "local EE context operation error",
    4: "local protection error", 5: "Work Request Flushed Error", 6: "memory management operation error",
    7: "bad response error", 8: "local access error", 9: "remote invalid request error", 10: "remote access error",
    11: "remote operation error", 12: "transport retry counter exceeded", 13: "RNR retry counter exceeded",
    14: "local RDD violation error", 15: "remote invalid RD request", 16: "aborted error",
    17: "invalid EE context number", 18: "invalid EE context state", 19: "fatal error", 20: "response timeout error",
    21: "general error", 22: "TM error", 23: "TM software rendezvous",
}
_LOST = "the link or the peer's queue pair is gone (it resumes in a new session)"
_ACCESS = ("the peer refused the memory access: its region is gone or its key changed (a new session fenced "
           "this writer, or the replica side restarted)")
_LENGTH = "a request longer than the peer accepts (a bug: please report it with the log)"
WC_STATUS_MEANING = {
    1: _LENGTH, 4: "a local buffer outside its registered region (a bug: please report it with the log)",
    5: "an earlier error put the queue pair in the error state; its requests are flushed", 8: _ACCESS,
    9: _LENGTH, 10: _ACCESS, 11: "the peer could not carry out the request", 12: _LOST, 13: _LOST, 19: _LOST,
    20: _LOST,
}


class RdmaError(TransportError):
    """The rdma transport's work requests: a verbs call that failed, or an error completion."""

    @classmethod
    def completion(cls, status: int, opcode: int) -> "RdmaError":
        """An error completion, named as libibverbs' ``ibv_wc_status_str`` names it, with what
        it most likely means: a lost link or peer, memory the peer no longer offers (a new
        session fenced this writer), or a request the bridge got wrong."""
        name = WC_STATUS_NAMES.get(status, "unknown")
        return cls(f"rdma transport: work completion error: {name} (status {status}, opcode {opcode}): "
                   f"{WC_STATUS_MEANING.get(status, 'the queue pair is in the error state')}")

    @classmethod
    def timed_out(cls, timeout_s: float) -> "RdmaError":
        return cls.call("poll the completion queue", f"no completion within {timeout_s:.0f}s")

    @classmethod
    def call(cls, what: str, err: int | str) -> "RdmaError":
        """``err``: an errno, or words."""
        return cls(f"rdma transport: {what}: {os.strerror(err) if isinstance(err, int) else err}")


class SourceError(BridgeError):
    """The primary or its binlog stream failed or is unsuitable."""


class SourceConnectionLost(SourceError):
    """The binlog stream connection dropped; the bridge decides how to resume."""


class BinlogPurged(SourceError):
    """The primary no longer has the binlog for the replica's position."""


class PreflightError(SourceError):
    """A primary setting makes replication unsafe; the message names the fix."""


class ApplyError(BridgeError):
    """The replica refused a transaction. ``code``: the server's error number, 0 when none."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class TargetConnectionLost(ApplyError):
    """The connection to the replica server dropped; the transaction was rolled back
    by the server and is retried after a reconnect."""


class LockConflict(ApplyError):
    """A lock wait timeout or deadlock on the replica: the work was rolled back and may be retried."""


class ConsistencyError(BridgeError):
    """Both databases do not hold the same rows."""


class CheckError(BridgeError):
    """A comparison could not run: a server unreachable, a privilege missing, a schema
    unknown. Never reported as a difference or as a match."""


class BackpressureTimeout(BridgeError):
    """The ring stayed full past the backpressure timeout."""
