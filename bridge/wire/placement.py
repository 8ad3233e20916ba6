"""Placement messages of the tcp transport (pure): what an RDMA NIC would do,
spelled as messages a receiver thread carries out on the replica's ring.

    op u8 | offset u32 | length u32 | body

WRITE (body: length bytes), PUBLISH (offset = head, body: write_seq u64), ANSWER
(no body), PUBLISH_ANSWER (a PUBLISH, then an ANSWER). The receiver carries the
messages out in order and replies to each ANSWER with what its ring holds once
everything sent before the ANSWER is carried out:

    placed u64 | applied u64

``placed``: the ring header's write_seq (every frame up to it is in the replica
host's memory); ``applied``: its ack_seq (every frame up to it is committed on the
replica). A reply is cumulative, so one answer covers every transaction before it.
PUBLISH_ANSWER lets the receiver reply before it wakes the replica's apply thread (which
would hold the interpreter while the reply waits).
"""

from __future__ import annotations

import enum
import struct

from bridge.errors import RemoteProtocolError

HEAD = struct.Struct("<BII")
SEQ = struct.Struct("<Q")
REPLY = struct.Struct("<QQ")


class Op(enum.IntEnum):
    WRITE = 1
    PUBLISH = 2
    ANSWER = 5  # 3 (READ) and 4 (FENCE) were protocol version 3's
    PUBLISH_ANSWER = 6


_OPS = {int(op): op for op in Op}


def encode_write(offset: int, data) -> bytes:
    return HEAD.pack(Op.WRITE, offset, len(data)) + bytes(data)


def encode_publish(write_seq: int, head: int, answer: bool = False) -> bytes:
    return HEAD.pack(Op.PUBLISH_ANSWER if answer else Op.PUBLISH, head, SEQ.size) + SEQ.pack(write_seq)


ANSWER = HEAD.pack(Op.ANSWER, 0, 0)


def encode_reply(placed: int, applied: int) -> bytes:
    return REPLY.pack(placed, applied)


def parse_head(data: bytes, region_bytes: int) -> tuple[Op, int, int, int]:
    """(op, offset, length, body bytes to read next); bounds checked against the region."""
    return check_head(*HEAD.unpack(data), region_bytes)


def check_head(op: int, offset: int, length: int, region_bytes: int) -> tuple[Op, int, int, int]:
    """``parse_head`` of a head already unpacked."""
    if op not in _OPS:
        raise RemoteProtocolError(f"placement: unknown op {op}")
    op = _OPS[op]
    if op == Op.WRITE and offset + length > region_bytes:
        raise RemoteProtocolError(f"placement: WRITE of {length} bytes at {offset} outside the "
                                  f"{region_bytes}-byte region")
    if op in (Op.PUBLISH, Op.PUBLISH_ANSWER) and length != SEQ.size:
        raise RemoteProtocolError(f"placement: {op.name} carries {length} bytes, expected {SEQ.size}")
    if op == Op.ANSWER and (offset or length):
        raise RemoteProtocolError(f"placement: ANSWER carries offset {offset} and length {length}, expected none")
    body = 0 if op == Op.ANSWER else length
    return op, offset, length, body
