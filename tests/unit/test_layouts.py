"""The compiled core declares the fixed layouts once (bridge/wire/layouts.pxd): every value
there is the one its Python source says, so the compiled modules and their pure-Python
twins read and write the same bytes."""

import re
from pathlib import Path

from bridge.ring import layout
from bridge.wire import binlog, frame, hotpath, placement
from bridge.wire.frame import FrameKind
from bridge.wire.placement import Op

PXD = Path(__file__).resolve().parents[2] / "bridge" / "wire" / "layouts.pxd"
SOURCES = {
    "HEADER_BYTES": frame.HEADER_BYTES, "TRAILER_BYTES": frame.TRAILER_BYTES,
    "MIN_FRAME_BYTES": frame.MIN_FRAME_BYTES, "KIND_TXN": FrameKind.TXN, "KIND_CHUNK": FrameKind.CHUNK,
    "KIND_HEARTBEAT": FrameKind.HEARTBEAT, "KIND_PAD": FrameKind.PAD, "COMPACT": hotpath.COMPACT_TAG,
    "VERBATIM": hotpath.VERBATIM_TAG,
    "WRITE_SEQ_AT": layout.WRITE_SEQ_AT, "ACK_SEQ_AT": layout.ACK_SEQ_AT, "HEAD_AT": layout.HEAD_AT,
    "TAIL_AT": layout.TAIL_AT, "SIZE_AT": layout.SIZE_AT, "WAITING_AT": layout.WAITING_AT,
    "SCRATCH_AT": layout.SCRATCH_AT,
    "PUBLISH_BYTES": layout.PUBLISH_BYTES,
    "DATA_OFFSET": layout.DATA_OFFSET,
    "OP_WRITE": Op.WRITE, "OP_PUBLISH": Op.PUBLISH, "OP_ANSWER": Op.ANSWER, "OP_PUBLISH_ANSWER": Op.PUBLISH_ANSWER,
    "OP_HEAD_BYTES": placement.HEAD.size, "OP_SEQ_BYTES": placement.SEQ.size, "REPLY_BYTES": placement.REPLY.size,
    "BINLOG_HEADER": binlog.HEADER_BYTES, "QUERY_EVENT": binlog.QUERY, "XID_EVENT": binlog.XID,
    "TABLE_MAP_EVENT": binlog.TABLE_MAP, "UPDATE_ROWS_V1": binlog.UPDATE_ROWS_V1,
    "MYSQL_GTID_EVENT": binlog.MYSQL_GTID, "MARIADB_GTID_EVENT": binlog.MARIADB_GTID,
}


def declared() -> dict[str, int]:
    return {name: int(value, 0) for name, value in re.findall(r"^\s+([A-Z0-9_]+) = (\w+)", PXD.read_text(), re.M)}


def test_every_layout_value_is_its_python_source_s():
    assert declared() == {name: int(value) for name, value in SOURCES.items()}


def test_the_frame_header_and_ring_header_fields_are_where_their_structs_put_them():
    assert frame.HEADER.size == declared()["HEADER_BYTES"]
    assert layout.DATA_OFFSET >= layout.WAITING_AT + 4 and layout.DATA_OFFSET % 8 == 0
