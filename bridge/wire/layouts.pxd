# The fixed layouts the compiled core reads and writes, declared once for Cython: a ring
# frame's header and kinds (bridge.wire.frame), the compact payload's tag
# (bridge.wire.hotpath), the tcp transport's placement messages (bridge.wire.placement),
# the ring's header (bridge.ring.layout) and the binlog events it scans (bridge.wire.binlog).
# tests/unit/test_layouts.py checks every value against its Python source.

cdef enum:
    # a frame: kind u8 | flags u8 | reserved u16 | length u32 | seq u64 | crc u32 | epoch u32, then the payload
    # padded to 8, then the commit word: seq u32 (low 32 bits) | epoch u32
    HEADER_BYTES = 24
    TRAILER_BYTES = 8
    MIN_FRAME_BYTES = 32  # a PAD of no payload; a shorter gap at the ring's end is an implicit wrap
    KIND_TXN = 1
    KIND_CHUNK = 2
    KIND_HEARTBEAT = 3
    KIND_PAD = 4
    COMPACT = 0x45  # the first byte of a compact TXN payload ("E")
    VERBATIM = 0x56  # the first byte of a verbatim TXN payload ("V", relay apply mode)

    # the ring's header, little-endian; the data area starts at DATA_OFFSET
    WRITE_SEQ_AT = 8
    HEAD_AT = 16
    TAIL_AT = 20
    ACK_SEQ_AT = 24
    SIZE_AT = 32
    WAITING_AT = 36
    SCRATCH_AT = 40  # 8 bytes of the replica side's own: where its announce's flushing RDMA READ lands
    PUBLISH_BYTES = 12  # write_seq and head, side by side: what a publish writes
    DATA_OFFSET = 64

    # a placement message: op u8 | offset u32 | length u32 | body; a reply: placed u64 | applied u64
    OP_WRITE = 1
    OP_PUBLISH = 2
    OP_ANSWER = 5
    OP_PUBLISH_ANSWER = 6
    OP_HEAD_BYTES = 9
    OP_SEQ_BYTES = 8
    REPLY_BYTES = 16

    # binlog events: a 19-byte header (timestamp u32 | type u8 | server id u32 | size u32 | next position u32 |
    # flags u16), the types the compiled core reads
    BINLOG_HEADER = 19
    QUERY_EVENT = 2
    XID_EVENT = 16
    TABLE_MAP_EVENT = 19
    UPDATE_ROWS_V1 = 24
    MYSQL_GTID_EVENT = 33
    MARIADB_GTID_EVENT = 162
