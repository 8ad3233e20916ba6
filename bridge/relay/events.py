"""The events a source writes itself rather than takes from its binlog (pure): the
artificial Rotate that opens a dump and the heartbeats of an idle one, with the crc32 a
replica that asked for checksums checks. Reading events is bridge.wire.binlog's."""

from __future__ import annotations

import struct
import zlib

from bridge.wire import binlog

LOG_EVENT_ARTIFICIAL_F = 0x20


def made_event(kind: int, body: bytes, server_id: int, next_position: int, checksum: bool,
               flags: int = LOG_EVENT_ARTIFICIAL_F) -> bytes:
    """An event the source makes (timestamp 0) as it sends it: ``checksum``: with its crc32."""
    size = binlog.HEADER_BYTES + len(body) + (4 if checksum else 0)
    event = binlog.made_header(kind, server_id, size, next_position, flags) + body
    return event + struct.pack("<I", zlib.crc32(event)) if checksum else event


def rotate(file: str, position: int, server_id: int, checksum: bool) -> bytes:
    """The dump's first event: where the stream is, in the primary's binlog coordinates."""
    return made_event(binlog.ROTATE, struct.pack("<Q", position) + file.encode(), server_id, 0, checksum)


def heartbeat(file: str, position: int, server_id: int, checksum: bool) -> bytes:
    """Sent when nothing was sent for the replica's heartbeat period: the file and the
    position of the last event sent (the replica's Read_Master_Log_Pos stays true)."""
    return made_event(binlog.HEARTBEAT, file.encode(), server_id, position, checksum, flags=0)  # as both servers


def with_next_position(event: bytes, position: int) -> bytes:
    """``event`` with its header's next position set; a FORMAT_DESCRIPTION that carries
    the crc32 algorithm (its byte before the last four is 1) gets its crc32 made again."""
    out = bytearray(event)
    struct.pack_into("<I", out, 13, position)
    if binlog.event_type(event) == binlog.FORMAT_DESCRIPTION and len(out) > 5 and out[-5] == 1:
        struct.pack_into("<I", out, len(out) - 4, zlib.crc32(out[:-4]))
    return bytes(out)
