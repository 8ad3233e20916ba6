"""Binlog events and dump packets built by hand, as a primary sends them to a replica
(the ship lane's tests and the transport conformance suite feed them to a DumpReader)."""

from __future__ import annotations

import struct
import zlib


def binlog_event(kind: int, body: bytes, next_position: int = 0, server: int = 1) -> bytes:
    head = struct.pack("<IBIIIH", 0, kind, server, 19 + len(body) + 4, next_position, 0)
    return head + body + struct.pack("<I", zlib.crc32(head + body))


MYSQL_UUID = "00010203-0405-0607-0809-0a0b0c0d0e0f"


def binlog_transaction(seq: int, table: bytes = b"t", rows: int = 1, flags: int = 0,
                       mysql: bool = False) -> list[bytes]:
    """A MariaDB transaction (``flags`` 1: a DDL's), or MySQL's: its GTID event, then BEGIN (or the DDL)."""
    if mysql:
        gtid = binlog_event(33, struct.pack("<B16sQ", 1, bytes(range(16)), seq) + bytes(24))
        begin = binlog_event(2, struct.pack("<IIBHH", 7, 0, 0, 0, 3) + b"\x01\x02\x03" + b"\0BEGIN")
    else:
        gtid, begin = binlog_event(162, struct.pack("<QIB", seq, 0, flags) + bytes(6)), None
    if flags & 1:  # a DDL's GTID (MariaDB: standalone), then its QUERY
        return [gtid, binlog_event(2, bytes(13) + b"\x00db\x00CREATE TABLE x (i INT)", 900 + seq)]
    if begin is not None:
        return [gtid, begin, *binlog_transaction(seq, table, rows)[1:]]
    schema = b"rdma_bridge" if table == b"heartbeat" else b"db"
    table_map = binlog_event(19, bytes(8) + bytes([len(schema)]) + schema + b"\0" + bytes([len(table)]) + table +
                             b"\0\x01\x03\x00\x00")
    return [gtid, table_map, *[binlog_event(30, bytes(8) + seq.to_bytes(4, "little")) for _ in range(rows)],
            binlog_event(16, bytes(8), 500 + seq)]


def dump_packets(txns: list[list[bytes]], number: int = 0) -> tuple[bytes, int]:
    """The events as the dump connection's packets from packet number ``number``: (the bytes, the next number)."""
    out = bytearray()
    for events in txns:
        for e in events:
            out += (len(e) + 1).to_bytes(3, "little") + bytes([number]) + b"\0" + e
            number = (number + 1) % 256
    return bytes(out), number
