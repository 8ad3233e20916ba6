"""MySQL 8.4+'s GTID forms that the binlog library does not know: the tagged GTID event
(a message of MySQL's serialization library) and GTID sets with tags as a dump asks for
them (the form the server writes its Previous_gtids event in)."""

from __future__ import annotations

import struct

from bridge.errors import RemoteProtocolError


def uuid_text(sid: bytes) -> str:
    sid = sid.hex()
    return f"{sid[:8]}-{sid[8:12]}-{sid[12:16]}-{sid[16:20]}-{sid[20:]}"


# MySQL 8.4+'s tagged GTID event is a message of MySQL's serialization library: a format
# version, the message's size and its last non-ignorable field id, then (field id, value)
# pairs in id order, every number in the library's variable-length form (below); the
# transaction's source uuid is field 1 (16 numbers), its gno field 2 (signed), its tag
# field 3 (a length, then the text).
_TAGGED_SID, _TAGGED_GNO, _TAGGED_TAG = 1, 2, 3


def varlen(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of an unsigned integer in MySQL's serialization library
    form: the count of low one-bits of the first byte says how many bytes follow (8: a
    whole little-endian u64); the first byte's remaining high bits are the value's lowest."""
    first = data[pos]
    follow = 0
    while follow < 8 and first >> follow & 1:
        follow += 1
    if follow == 8:
        return int.from_bytes(data[pos + 1:pos + 9], "little"), pos + 9
    if pos + 1 + follow > len(data):
        raise IndexError("variable-length integer past the end")
    rest = int.from_bytes(data[pos + 1:pos + 1 + follow], "little")
    return first >> (follow + 1) | rest << (7 - follow), pos + 1 + follow


def write_varlen(value: int) -> bytes:
    """``varlen``'s inverse: the fewest bytes that hold ``value`` (u64)."""
    for follow in range(8):
        if value < 1 << (7 * (follow + 1)):
            low = (1 << follow) - 1 | (value << (follow + 1)) & 0xFF
            return bytes([low]) + (value >> (7 - follow)).to_bytes(follow, "little")
    return b"\xff" + value.to_bytes(8, "little")


def tagged_gtid(body: bytes) -> str:
    """'uuid:tag:gno' of a tagged GTID event's body (after the common header)."""
    _, pos = varlen(body, 0)  # the serialization format's version
    size, pos = varlen(body, pos)  # the whole message, its version and size fields included
    _, pos = varlen(body, pos)  # the last field a reader may not skip
    sid = gno = tag = None
    while pos < min(size, len(body)) and tag is None:
        field, pos = varlen(body, pos)
        if field == _TAGGED_SID:
            raw = []
            for _ in range(16):
                byte, pos = varlen(body, pos)
                raw.append(byte)
            sid = bytes(raw)
        elif field == _TAGGED_GNO:
            zigzag, pos = varlen(body, pos)
            gno = -(zigzag >> 1) - 1 if zigzag & 1 else zigzag >> 1
        elif field == _TAGGED_TAG:
            length, pos = varlen(body, pos)
            tag = body[pos:pos + length].decode("ascii")
        elif field < _TAGGED_TAG:
            _, pos = varlen(body, pos)  # the flags (field 0): one number
        else:
            break
    if sid is None or gno is None or not tag or gno <= 0:
        raise RemoteProtocolError(f"tagged gtid event: no uuid, tag or gno in {body[:64].hex()}")
    return f"{uuid_text(sid)}:{tag}:{gno}"


def encode_gtid_set(parts: list[tuple[str, list[tuple[int, int]]]]) -> bytes:
    """A MySQL GTID set as COM_BINLOG_DUMP_GTID (and Previous_gtids) carry it: ``parts``
    are (uuid or uuid:tag, [(first, last), ...]) in the server's order (by uuid, untagged
    first). Without tags: the count, then each uuid's 16 bytes and intervals (u64, the
    end exclusive). With any tag (MySQL 8.4+): the count shifted one byte up between two
    format bytes (1), and each uuid followed by its tag (a length, then the text)."""
    tagged = any(":" in key for key, _ in parts)
    out = bytearray()
    for key, intervals in parts:
        uuid, _, tag = key.partition(":")
        out += bytes.fromhex(uuid.replace("-", ""))
        if tagged:
            out += write_varlen(len(tag)) + tag.encode("ascii")
        out += struct.pack("<Q", len(intervals))
        for first, last in intervals:
            out += struct.pack("<QQ", first, last + 1)
    count = 1 << 56 | len(parts) << 8 | 1 if tagged else len(parts)
    return struct.pack("<Q", count) + bytes(out)


def decode_gtid_set(data: bytes) -> list[tuple[str, list[tuple[int, int]]]]:
    """``encode_gtid_set``'s inverse: the parts of a GTID set as a replica's
    COM_BINLOG_DUMP_GTID carries it (closed intervals); malformed bytes are the peer's error."""
    try:
        (count,) = struct.unpack_from("<Q", data, 0)
        tagged = count >> 56 == 1 and count & 0xFF == 1
        pos, parts = 8, []
        for _ in range((count >> 8) & 0xFFFF_FFFF_FFFF if tagged else count):
            if pos + 16 > len(data):
                raise IndexError("a uuid past the end")
            key = uuid_text(data[pos:pos + 16])
            pos += 16
            if tagged:
                length, pos = varlen(data, pos)
                tag = data[pos:pos + length].decode("ascii")
                pos += length
                key = f"{key}:{tag}" if tag else key
            (n,) = struct.unpack_from("<Q", data, pos)
            pos += 8
            intervals = []
            for _ in range(n):
                first, end = struct.unpack_from("<QQ", data, pos)
                pos += 16
                if not 0 < first < end:
                    raise ValueError(f"interval [{first}, {end})")
                intervals.append((first, end - 1))
            parts.append((key, intervals))
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"a GTID set of {len(data)} bytes that does not parse: {exc}") from None
    if pos != len(data):
        raise RemoteProtocolError(f"a GTID set with {len(data) - pos} bytes after its end")
    return parts
