"""Placement messages of the tcp transport (pure): what an RDMA NIC would do,
spelled as messages a receiver thread carries out on the replica's ring.

    op u8 | offset u32 | length u32 | body

WRITE (body: length bytes), PUBLISH (offset = head, body: write_seq u64),
READ (reply: length bytes), FENCE (reply: one byte once everything before it is placed).
"""

from __future__ import annotations

import enum
import struct

from bridge.errors import RemoteProtocolError

HEAD = struct.Struct("<BII")
SEQ = struct.Struct("<Q")


class Op(enum.IntEnum):
    WRITE = 1
    PUBLISH = 2
    READ = 3
    FENCE = 4


def encode_write(offset: int, data) -> bytes:
    return HEAD.pack(Op.WRITE, offset, len(data)) + bytes(data)


def encode_publish(write_seq: int, head: int) -> bytes:
    return HEAD.pack(Op.PUBLISH, head, SEQ.size) + SEQ.pack(write_seq)


def encode_read(offset: int, length: int) -> bytes:
    return HEAD.pack(Op.READ, offset, length)


def encode_fence() -> bytes:
    return HEAD.pack(Op.FENCE, 0, 0)


def parse_head(data: bytes, region_bytes: int) -> tuple[Op, int, int, int]:
    """(op, offset, length, body bytes to read next); bounds checked against the region."""
    op, offset, length = HEAD.unpack(data)
    if op not in Op.__members__.values():
        raise RemoteProtocolError(f"placement: unknown op {op}")
    op = Op(op)
    if op in (Op.WRITE, Op.READ) and offset + length > region_bytes:
        raise RemoteProtocolError(f"placement: {op.name} of {length} bytes at {offset} outside the "
                                  f"{region_bytes}-byte region")
    if op == Op.PUBLISH and length != SEQ.size:
        raise RemoteProtocolError(f"placement: PUBLISH carries {length} bytes, expected {SEQ.size}")
    body = length if op in (Op.WRITE, Op.PUBLISH) else 0
    return op, offset, length, body
