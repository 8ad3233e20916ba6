"""MySQL's compressed transactions (TRANSACTION_PAYLOAD) given back as the events the
stream carries for an uncompressed one."""

import struct
import zlib

import pytest
import zstandard

from bridge.errors import RemoteProtocolError
from bridge.wire import binlog, compressed

# Written by MySQL 9.7.4 (binlog_checksum CRC32) for BEGIN; two single-row INSERTs; COMMIT
# with binlog_transaction_compression=ON, ending at binlog position 496
PAYLOAD_EVENT = bytes.fromhex(
    "72c3116b2801000000a9000000f001000000000201000303fc0e010101860028b52ffd600e00e50300320616229029e9ffff7fe9ffb7ff6138"
    "49a96c88f96b0d222afad4c2f0f7bfa9306991902d53ffbf610078fcecd8738528509a2e629134e7f64d7f1df2f24a3e21680a3a4783b114"
    "1f03c7c3dec42cabf2a1134ea3177fb329e8020f00a00484838cc516a6095a80ddafb2019a03178cb02ab79c656920302864005ed0076c88")


def test_a_compressed_transaction_gives_back_its_events_with_position_and_checksum():
    events = compressed.expand(PAYLOAD_EVENT)
    kinds = [binlog.event_type(e) for e in events]
    assert kinds == [binlog.QUERY, binlog.TABLE_MAP, binlog.WRITE_ROWS_V2, binlog.TABLE_MAP, binlog.WRITE_ROWS_V2,
                     binlog.XID]
    for event in events:
        header = binlog.read_header(event)
        assert header.size == len(event) and header.log_pos == 496  # where the transaction ends in the binlog
        assert struct.unpack("<I", event[-4:])[0] == zlib.crc32(event[:-4])
    assert binlog.parse_query(events[0], 4).sql == b"BEGIN"
    assert binlog.table_map_names(events[1]) == ("tg", "t")
    unchecked = PAYLOAD_EVENT[:-4]  # a stream without checksums: neither the event nor those inside carry one
    assert [len(e) for e in compressed.expand(unchecked)] == [len(e) - 4 for e in events]


def _payload_event(inner: bytes, compression: int, stored: bytes) -> bytes:
    fields = bytes([compressed._COMPRESSION, 1, compression]) if compression < 251 else \
        bytes([compressed._COMPRESSION, 3, 0xFC]) + compression.to_bytes(2, "little")
    fields += bytes([compressed._UNCOMPRESSED_SIZE, 1, len(inner), compressed._PAYLOAD_SIZE, 1, len(stored), compressed._END])
    body = fields + stored
    size = binlog.HEADER_BYTES + len(body)
    return bytes(4) + bytes([binlog.TRANSACTION_PAYLOAD]) + (1).to_bytes(4, "little") + \
        struct.pack("<II", size, 1000) + bytes(2) + body


def test_an_uncompressed_payload_and_the_errors():
    xid = bytes(4) + bytes([binlog.XID]) + (1).to_bytes(4, "little") + struct.pack("<II", 27, 0) + bytes(2) + bytes(8)
    assert compressed.expand(_payload_event(xid, compressed.NONE, xid)) == [xid[:13] + struct.pack("<I", 1000) + xid[17:]]
    zstd = zstandard.ZstdCompressor().compress(xid)
    assert compressed.expand(_payload_event(xid, compressed.ZSTD, zstd))[0][19:] == bytes(8)
    with pytest.raises(RemoteProtocolError, match="compression type 7 is not known"):
        compressed.expand(_payload_event(xid, 7, xid))
    with pytest.raises(RemoteProtocolError, match="zstd"):
        compressed.expand(_payload_event(xid, compressed.ZSTD, zstd[:-3]))
    with pytest.raises(RemoteProtocolError, match="an event of 27 bytes at 0 of 20"):
        compressed.expand(_payload_event(xid, compressed.NONE, xid[:20]))
