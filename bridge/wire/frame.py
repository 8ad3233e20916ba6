"""Frame header and crc32c (pure).

Layout (little-endian): a 24-byte header, the payload padded to 8, an 8-byte trailer:

    kind u8 | flags u8 | reserved u16 | length u32 | seq u64 | crc u32 | epoch u32
    payload ... padding | commit: seq u32 (its low 32 bits) | epoch u32

The crc32c covers the header (crc field zero) and the payload, so a torn or
stale frame never validates. The trailer (the commit word) is written last and looked
at first: a frame still being placed in order (its header in, its payload not yet) has
the stale bytes of an earlier lap where its commit word goes, so a look at it never
reaches the crc (docs/architecture.md, "The ring"). ``epoch`` names the session that wrote the frame (its
low 32 bits): the replica takes frames of its current session only, so a primary
side fenced off by a newer one can never have a frame applied.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from bridge.errors import LocalProtocolError

HEADER = struct.Struct("<BBHIQII")
HEADER_BYTES = HEADER.size
TRAILER = struct.Struct("<II")  # the commit word: the seq's low 32 bits, the epoch
TRAILER_BYTES = TRAILER.size
MIN_FRAME_BYTES = HEADER_BYTES + TRAILER_BYTES  # a PAD of no payload; a shorter gap at the end is an implicit wrap
ALIGN = 8
MAX_PAYLOAD_BYTES = 1 << 30


class FrameKind(enum.IntEnum):
    TXN = 1
    CHUNK = 2
    HEARTBEAT = 3
    PAD = 4


@dataclass(frozen=True, slots=True)
class Frame:
    kind: FrameKind
    seq: int
    payload: bytes
    flags: int = 0
    epoch: int = 0


def aligned(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def frame_bytes(payload_len: int) -> int:
    """Bytes a frame with this payload occupies in the ring, its trailer included."""
    return aligned(HEADER_BYTES + payload_len) + TRAILER_BYTES


def trailer_at(payload_len: int) -> int:
    """Where a frame's commit word starts, counted from the frame's start."""
    return aligned(HEADER_BYTES + payload_len)


def commit_word(seq: int, epoch: int) -> bytes:
    return TRAILER.pack(seq & 0xFFFFFFFF, epoch & EPOCH_MASK)


EPOCH_MASK = 0xFFFFFFFF


def frame_crc(kind: int, flags: int, length: int, seq: int, payload, epoch: int = 0) -> int:
    head = HEADER.pack(kind, flags, 0, length, seq, 0, epoch & EPOCH_MASK)
    return crc32c.crc32c(payload, crc32c.crc32c(head))


def encode_header(frame: Frame) -> bytes:
    """The frame's header, crc included; the payload and padding follow it."""
    n = len(frame.payload)
    if n > MAX_PAYLOAD_BYTES:
        raise LocalProtocolError(f"encode frame: seq {frame.seq} payload {n} bytes over {MAX_PAYLOAD_BYTES}")
    crc = frame_crc(frame.kind, frame.flags, n, frame.seq, frame.payload, frame.epoch)
    return HEADER.pack(frame.kind, frame.flags, 0, n, frame.seq, crc, frame.epoch & EPOCH_MASK)


def encode_frame(frame: Frame) -> bytes:
    n = len(frame.payload)
    return encode_header(frame) + frame.payload + bytes(trailer_at(n) - HEADER_BYTES - n) + \
        commit_word(frame.seq, frame.epoch)
