"""Ring header layout (both ends must agree; docs/architecture.md, "The ring").

Offset 0, little-endian: magic u64 | write_seq u64 | head u32 | tail u32 | ack_seq u64 |
size u32 | waiting u32. The data area starts at DATA_OFFSET and is ``size`` bytes, a
power of two. write_seq and head are side by side, so that a publish over rdma is one
write of both (layout version 2).

``waiting``: the consumer sets it to 1 while it sleeps on its transport's doorbell; a
producer that sees it after publishing rings the doorbell (transport/doorbell.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bridge.errors import ConfigError, VersionSkew

RING_LAYOUT_VERSION = 2
RING_MAGIC = int.from_bytes(b"RDMABRG", "little") << 8 | RING_LAYOUT_VERSION
HEADER = struct.Struct("<QQIIQII")
DATA_OFFSET = 64
WRITE_SEQ_AT, HEAD_AT, TAIL_AT, ACK_SEQ_AT, SIZE_AT, WAITING_AT = 8, 16, 20, 24, 32, 36
SCRATCH_AT = 40  # 8 bytes the replica side's rdma announce reads into (bridge/transport/_verbs.pyx), never read
PUBLISH_AT, PUBLISH_BYTES = WRITE_SEQ_AT, 12  # write_seq and head: what a publish writes
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
MIN_RING_BYTES = 4096
MAX_RING_BYTES = 1 << 31


@dataclass(frozen=True, slots=True)
class RingHeader:
    magic: int
    write_seq: int
    ack_seq: int
    head: int
    tail: int
    size: int


def check_ring_bytes(size: int) -> int:
    if size < MIN_RING_BYTES or size > MAX_RING_BYTES or size & (size - 1):
        raise ConfigError(f"ring bytes: {size} must be a power of two between {MIN_RING_BYTES} and {MAX_RING_BYTES}")
    return size


def region_bytes(size: int) -> int:
    return DATA_OFFSET + check_ring_bytes(size)


def init_region(region, size: int) -> None:
    """Zero the region and write a fresh header (replica side, once per session)."""
    region[:DATA_OFFSET + size] = bytes(DATA_OFFSET + size)
    HEADER.pack_into(region, 0, RING_MAGIC, 0, 0, 0, 0, size, 0)  # magic, write_seq, head, tail, ack_seq, ...


def read_ring_header(region) -> RingHeader:
    magic, write_seq, head, tail, ack_seq, size, _ = HEADER.unpack_from(region, 0)
    if magic != RING_MAGIC:
        raise VersionSkew(f"ring header: magic {magic:#x}, expected {RING_MAGIC:#x} "
                          f"(layout version {RING_LAYOUT_VERSION})")
    return RingHeader(magic, write_seq, ack_seq, head, tail, size)


def retire_region(region) -> None:
    """Zero the magic of a ring no session writes any more (the replica side's fence): a
    writer of an earlier session that still reaches it finds it retired, not holding."""
    _U64.pack_into(region, 0, 0)


def is_retired(region) -> bool:
    return _U64.unpack_from(region, 0)[0] != RING_MAGIC


def read_u64(region, at: int) -> int:
    return _U64.unpack_from(region, at)[0]


def read_u32(region, at: int) -> int:
    return _U32.unpack_from(region, at)[0]


def write_ack(region, ack_seq: int, tail: int) -> None:
    _U64.pack_into(region, ACK_SEQ_AT, ack_seq)
    _U32.pack_into(region, TAIL_AT, tail)


def consumer_waiting(region) -> bool:
    return _U32.unpack_from(region, WAITING_AT)[0] != 0


def set_waiting(region, waiting: bool) -> None:
    _U32.pack_into(region, WAITING_AT, int(waiting))


def write_publish(region, write_seq: int, head: int) -> None:
    _U32.pack_into(region, HEAD_AT, head)
    _U64.pack_into(region, WRITE_SEQ_AT, write_seq)
