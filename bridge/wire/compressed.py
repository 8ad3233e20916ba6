"""MySQL's compressed transactions (``binlog_transaction_compression=ON``, 8.0.20+): a
TRANSACTION_PAYLOAD event holds the transaction's events after its GTID event (BEGIN,
TABLE_MAP, row events, XID), compressed with zstd. ``expand`` gives them back as the
stream carries an uncompressed transaction, so the rest of the bridge never sees the
difference.

The event's body: fields, each a type, a length and a value (MySQL's length-encoded
integers): 1 the payload's size, 2 the compression (0 zstd, 255 none), 3 the size once
uncompressed; a type 0 ends them, the payload follows. The events inside carry no
checksum and no position (log_pos 0): each gets the payload event's position (where the
transaction ends in the binlog, what a commit's position and a semi-sync ACK name) and,
where the payload event ends with a checksum (what follows its payload size says), a
CRC32 of its own.
"""

from __future__ import annotations

import struct
import zlib

from bridge.errors import RemoteProtocolError
from bridge.wire import binlog
from bridge.wire.tablemap import packed_int

_PAYLOAD_SIZE, _COMPRESSION, _UNCOMPRESSED_SIZE, _END = 1, 2, 3, 0
ZSTD, NONE = 0, 255
# a transaction larger than this once uncompressed is refused rather than held in memory
MAX_UNCOMPRESSED = 1 << 30


def expand(event: bytes) -> list[bytes]:
    """The events inside a TRANSACTION_PAYLOAD ``event`` (common header first), each
    ending with a checksum when the event does (what follows its payload says so)."""
    position = binlog.read_header(event).log_pos
    fields: dict[int, int] = {}
    try:
        pos = binlog.HEADER_BYTES
        while True:
            kind, pos = packed_int(event, pos)
            if kind == _END:
                break
            length, pos = packed_int(event, pos)
            fields[kind], _ = packed_int(event, pos)
            pos += length
    except IndexError as exc:
        raise RemoteProtocolError("transaction payload event: truncated header") from exc
    end = pos + fields.get(_PAYLOAD_SIZE, -1)
    checksum_bytes = len(event) - end
    if checksum_bytes not in (0, 4):
        raise RemoteProtocolError(f"transaction payload event: {len(event)} bytes, its payload ends at "
                                  f"{end if end >= pos else '(no payload size)'}")
    compression = fields.get(_COMPRESSION, NONE)
    size = fields.get(_UNCOMPRESSED_SIZE, end - pos)
    if size > MAX_UNCOMPRESSED:
        raise RemoteProtocolError(f"transaction payload event: {size} bytes once uncompressed, more than the "
                                  f"{MAX_UNCOMPRESSED} the bridge holds in memory for one transaction")
    payload = event[pos:end]
    if compression == ZSTD:
        payload = _zstd(payload, size)
    elif compression != NONE:
        raise RemoteProtocolError(f"transaction payload event: compression type {compression} is not known "
                                  "(zstd 0, none 255)")
    return list(_events(payload, position, checksum_bytes))


def _zstd(data: bytes, size: int) -> bytes:
    import zstandard  # only a primary with compressed transactions needs it

    try:
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=max(size, 1))
    except zstandard.ZstdError as exc:
        raise RemoteProtocolError(f"transaction payload event: zstd: {exc}") from exc


def _events(payload: bytes, position: int, checksum_bytes: int):
    at = 0
    while at < len(payload):
        if len(payload) - at < binlog.HEADER_BYTES:
            raise RemoteProtocolError("transaction payload event: an event cut short inside it")
        size = binlog.event_size(payload, at)
        if size < binlog.HEADER_BYTES or at + size > len(payload):
            raise RemoteProtocolError(f"transaction payload event: an event of {size} bytes at {at} of "
                                      f"{len(payload)}")
        event = bytearray(payload[at:at + size])
        struct.pack_into("<II", event, 9, size + checksum_bytes, position)
        if checksum_bytes:
            event += struct.pack("<I", zlib.crc32(event))
        yield bytes(event)
        at += size
