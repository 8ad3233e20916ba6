"""The per-transaction byte work of both sides, in pure Python (pure).

Each function here has a compiled twin in ``_hotpath.pyx`` (Cython) with the same
name, arguments, results and errors; ``bridge.wire.native`` picks the compiled one
when the install built it and this module otherwise. A test compares both on the
same inputs byte for byte (tests/unit/test_hotpath.py), and ``make test`` runs the
unit suite once more on these twins (``RDMA_BRIDGE_PURE_PYTHON=1``).

What is here, and why: the profile of both sides under 1,000 single-row
transactions/s (bench/flame.py) put these, and the Python calls around them, at most
of each process's Python time: a whole common transaction taken from the dump's
buffered packets in one call (``scan_transaction``: one primary step per transaction
instead of one per event), the compact payload (encoded on the primary side, decoded
on the replica side), a frame's header and crc32c (placed into the primary's mirror;
checked and taken at the replica's tail), the binlog parses of the event-by-event
path (GTID, TABLE_MAP names), and a group's round trip to the replica server as one
query text (``one_trip``). Pure: bytes in, values out; nothing here does I/O.
"""

from __future__ import annotations

import struct
import time

from bridge.errors import RemoteProtocolError
from bridge.wire import binlog
from bridge.wire.binlog import parse_gtid, table_map_names
from bridge.wire.frame import (
    EPOCH_MASK,
    HEADER,
    HEADER_BYTES,
    MIN_FRAME_BYTES,
    TRAILER,
    FrameKind,
    commit_word,
    frame_bytes,
    frame_crc,
    trailer_at,
)

__all__ = ["encode_compact", "decode_compact", "encode_verbatim", "place_frame", "frame_at", "parse_gtid",
           "table_map_names", "scan_transaction", "scan_verbatim", "scan_wants_more", "place_run", "one_trip"]

# Compact payload (tag b"E"; the tagged layout starts with b"l"), one RowEvents change:
#   E | gtid length u8 | gtid | read ns u64 | ship ns u64 | format length u32 | format |
#   row events u32 | table count u16 | (schema length u8, schema, table length u8, table)* | events
COMPACT_TAG = b"E"[0]
PAYLOAD_HEAD = struct.Struct("<QQI")  # after the GTID, in both payloads: read ns, ship ns, format length
_COMPACT_ROWS = struct.Struct("<IH")
# Verbatim payload (tag b"V"), one Verbatim change (relay apply mode), its events not parsed:
#   V | gtid length u8 | gtid | read ns u64 | ship ns u64 | format length u32 | format |
#   file length u8 | file | events u32 | the events
VERBATIM_TAG = b"V"[0]
FRAME_KINDS = frozenset({1, 2, 3, 4})  # bridge.wire.frame.FrameKind


def _payload_head(tag: bytes, gtid: str, read_ns: int, ship_ns: int, fmt: bytes) -> bytearray:
    """What the compact and verbatim payloads begin with: the tag, the GTID, the stamps and
    the format event."""
    text = gtid.encode()
    if len(text) > 255:
        raise ValueError(f"gtid {gtid[:40]!r}... over 255 bytes")
    out = bytearray(tag)
    out.append(len(text))
    out += text
    out += PAYLOAD_HEAD.pack(read_ns, ship_ns, len(fmt))
    out += fmt
    return out


def encode_compact(gtid: str, read_ns: int, ship_ns: int, fmt: bytes, events: int, tables, data) -> bytearray:
    """The compact payload. ValueError names a GTID or a table name over 255 bytes."""
    out = _payload_head(b"E", gtid, read_ns, ship_ns, fmt)
    out += _COMPACT_ROWS.pack(events, len(tables))
    for schema, table in tables:
        for name in (schema.encode(), table.encode()):
            if len(name) > 255:
                raise ValueError(f"name {name[:40]!r}... over 255 bytes")
            out.append(len(name))
            out += name
    out += data
    return out


def encode_verbatim(gtid: str, read_ns: int, ship_ns: int, fmt: bytes, file: bytes, events: int, data) -> bytearray:
    """The verbatim payload. ValueError names a GTID or a file name over 255 bytes."""
    if len(file) > 255:
        raise ValueError(f"file {bytes(file[:40])!r}... over 255 bytes")
    out = _payload_head(b"V", gtid, read_ns, ship_ns, fmt)
    out.append(len(file))
    out += file
    out += events.to_bytes(4, "little")
    out += data
    return out


def decode_compact(buf) -> tuple:
    """(gtid, read ns, ship ns, format event, row events, tables, events data) of a
    compact payload; ValueError (or IndexError, struct.error) when anything is out of
    bounds or not UTF-8."""
    n = buf[1]
    gtid = bytes(buf[2:2 + n]).decode()
    at = 2 + n
    read_ns, ship_ns, fmt_len = PAYLOAD_HEAD.unpack_from(buf, at)
    at += PAYLOAD_HEAD.size
    fmt = bytes(buf[at:at + fmt_len])
    at += fmt_len
    events, count = _COMPACT_ROWS.unpack_from(buf, at)
    at += _COMPACT_ROWS.size
    tables = []
    for _ in range(count):
        n = buf[at]
        schema = bytes(buf[at + 1:at + 1 + n]).decode()
        at += 1 + n
        n = buf[at]
        tables.append((schema, bytes(buf[at + 1:at + 1 + n]).decode()))
        at += 1 + n
    if at > len(buf) or len(fmt) != fmt_len:
        raise ValueError("truncated")
    return gtid, read_ns, ship_ns, fmt, events, tuple(tables), bytes(buf[at:])


def place_frame(region: bytearray, start: int, kind: int, flags: int, seq: int, epoch: int, payload) -> int:
    """Header (crc32c over header and payload), payload and, last, the commit word
    written into ``region`` at ``start``; the bytes the frame occupies (the padding
    before the commit word is left unwritten: the crc does not cover it). ValueError
    when the frame does not fit ``region`` there."""
    n = len(payload)
    if start < 0 or start + frame_bytes(n) > len(region):
        raise ValueError(f"place frame seq {seq}: {frame_bytes(n)} bytes at {start} outside a region of "
                         f"{len(region)}")
    epoch &= EPOCH_MASK
    crc = frame_crc(kind, flags, n, seq, payload, epoch)
    region[start:start + HEADER_BYTES] = HEADER.pack(kind, flags, 0, n, seq, crc, epoch)
    region[start + HEADER_BYTES:start + HEADER_BYTES + n] = payload
    end = start + trailer_at(n)
    region[end:end + TRAILER.size] = commit_word(seq, epoch)
    return frame_bytes(n)


def frame_at(region, at: int, room: int, expected_seq: int, epoch: int):
    """(kind, flags, payload, bytes occupied) of the frame at ``at`` when it is the
    one expected and whole: seq ``expected_seq`` of session ``epoch``, within the
    ``room`` bytes left before the ring's end, a known kind, its commit word there
    (looked at before the payload: written last), its crc32c right; else None.
    ValueError when ``room`` bytes from ``at`` are not all inside ``region``."""
    if at < 0 or room < 0 or at + room > len(region):
        raise ValueError(f"frame at {at}: {room} bytes of room outside a region of {len(region)}")
    if room < MIN_FRAME_BYTES:
        return None
    kind, flags, _, length, seq, crc, frame_epoch = HEADER.unpack_from(region, at)
    if seq != expected_seq or frame_epoch != epoch or length > room:
        return None
    n = frame_bytes(length)
    if n > room or kind not in FRAME_KINDS:
        return None
    if TRAILER.unpack_from(region, at + trailer_at(length)) != (seq & 0xFFFFFFFF, epoch):
        return None  # still being placed (or stale)
    payload = bytes(region[at + HEADER_BYTES:at + HEADER_BYTES + length])
    if frame_crc(kind, flags, length, seq, payload, frame_epoch) != crc:
        return None
    return kind, flags, payload, n



# --- the rest of a simple transaction, straight from the buffered packets ----------
RUN_EVENTS = 64  # a transaction of more events than this goes the per-transaction way (place_run)
MAX_PACKET = 0xFFFFFF  # a packet this long continues in the next one (the dump's reader shares these)
SEMI_SYNC_MAGIC, SEMI_SYNC_ACK_REQUESTED = 0xEF, 0x01  # after the OK marker: 0xEF, a flag byte, the event
SCANNED_ROW_EVENTS = frozenset({binlog.WRITE_ROWS_V1, binlog.UPDATE_ROWS_V1, binlog.DELETE_ROWS_V1,
                                binlog.WRITE_ROWS_V2, binlog.UPDATE_ROWS_V2, binlog.DELETE_ROWS_V2})


def is_begin(event) -> bool:
    """A QUERY event of the statement BEGIN (what MySQL logs after a transaction's GTID
    event; MariaDB's GTID event stands for it): after the header, thread id u32, exec
    time u32, schema length u8, error code u16, status length u16, the status
    variables, the schema and its NUL, then ``BEGIN`` and the checksum, if any."""
    h = binlog.HEADER_BYTES
    if len(event) < h + 13 or event[4] != binlog.QUERY:
        return False
    at = h + 13 + int.from_bytes(event[h + 11:h + 13], "little") + event[h + 8] + 1
    return len(event) - at in (5, 9) and event[at:at + 5] == b"BEGIN"


def scan_transaction(buf, seq_id: int, semi_sync: bool, max_bytes: int, gtid_first: bool = False):
    """A transaction whole from ``buf`` (the binlog dump's packets buffered), when it
    holds all of it and it is the common kind: (with ``gtid_first``, a MariaDB GTID
    event that is not standalone, or a MySQL GTID event (not a tagged one) and the BEGIN
    query after it; without, a BEGIN query may come first; then) TABLE_MAP and row events (v1, v2) in packets
    numbered from ``seq_id``, then the XID, under ``max_bytes`` of events. Returns
    (bytes of ``buf`` it takes, the next packet's seq id, the GTID or None, the
    TABLE_MAP and row events as the binlog holds them, (schema, table) of each
    TABLE_MAP, row events, the XID's next-event position, the position of the last
    event that asked for a semi-sync ACK or -1); None for anything else, which the
    per-event path then reads (nothing is taken)."""
    return _scan(buf, seq_id, semi_sync, max_bytes, gtid_first, False)[0]


def scan_verbatim(buf, seq_id: int, semi_sync: bool, max_bytes: int):
    """Relay apply mode: a transaction of the same common kind as ``scan_transaction``
    takes with ``gtid_first`` (its GTID event first), whole in ``buf``, its events kept
    as the primary wrote them, all of them: the GTID event, MySQL's BEGIN, the TABLE_MAP
    and row events, the XID, each with its checksum. Returns (bytes of ``buf`` it takes,
    the next packet's seq id, the GTID, the events, how many, the XID's next-event
    position, the ACK position or -1); None for anything else (nothing is taken)."""
    scanned = _scan(buf, seq_id, semi_sync, max_bytes, True, False, True)[0]
    if scanned is None:
        return None
    taken, next_id, gtid, data, _, events, position, ack = scanned
    return taken, next_id, gtid, data, events, position, ack


def scan_wants_more(buf, seq_id: int, semi_sync: bool, max_bytes: int) -> bool:
    """Whether ``buf`` ends inside a transaction ``place_run`` would take once the rest
    arrives: every packet so far whole and of that kind (a MariaDB GTID that is not
    standalone, or MySQL's GTID and BEGIN, first), the buffer ending before the XID's packet is whole. An empty
    buffer wants more too."""
    return _scan(buf, seq_id, semi_sync, max_bytes, True, True)[1]


_BEGIN_NONE, _BEGIN_MAY, _BEGIN_MUST = 0, 1, 2  # whether a BEGIN query comes next: no, may, must


def _scan(buf, seq_id: int, semi_sync: bool, max_bytes: int, gtid_first: bool, run_rules: bool,
          verbatim: bool = False):
    """(scan_transaction's answer, whether the buffer ran out before it could decide);
    ``run_rules``: names and event counts as ``place_run`` takes them; ``verbatim``: every
    event kept (``scan_verbatim``), the events counted in place of the row events."""
    at, end = 0, len(buf)
    data, tables, rows, ack, gtid, kept = bytearray(), [], 0, -1, None, 0
    begin = _BEGIN_NONE if gtid_first else _BEGIN_MAY  # whether a BEGIN query comes next (MySQL)
    while True:
        if end - at < 4:
            return None, True
        length = int.from_bytes(buf[at:at + 3], "little")
        if length >= MAX_PACKET or buf[at + 3] != seq_id:
            return None, False
        if end - at - 4 < length:
            return None, True
        p, stop = at + 4, at + 4 + length
        at, seq_id = stop, (seq_id + 1) % 256
        if length < 1 or buf[p] != 0:
            return None, False  # an error packet, or not an event
        p += 1
        ack_requested = False
        if semi_sync and stop - p >= 2 and buf[p] == SEMI_SYNC_MAGIC:
            ack_requested = bool(buf[p + 1] & SEMI_SYNC_ACK_REQUESTED)
            p += 2
        if stop - p < binlog.HEADER_BYTES:
            return None, False
        size = int.from_bytes(buf[p + 9:p + 13], "little")
        if size < binlog.HEADER_BYTES or p + size > stop:
            return None, False
        event, etype = bytes(buf[p:p + size]), buf[p + 4]
        next_position = int.from_bytes(event[13:17], "little")
        if ack_requested:
            ack, seq_id = next_position, 1  # the server numbers afresh after an event that wants an ACK
        if gtid_first:
            if etype != binlog.MARIADB_GTID and etype != binlog.MYSQL_GTID:
                return None, False
            try:
                gtid, standalone = parse_gtid(event)
            except RemoteProtocolError:
                return None, False
            if standalone:
                return None, False  # DDL: the event path
            gtid_first, begin = False, (_BEGIN_MUST if etype == binlog.MYSQL_GTID else _BEGIN_NONE)
            if verbatim:
                data += event
                kept += 1
            continue
        if begin != _BEGIN_NONE:
            if is_begin(event):
                begin = _BEGIN_NONE
                if verbatim:
                    data += event
                    kept += 1
                continue
            if begin == _BEGIN_MUST:
                return None, False  # MySQL's DDL (its QUERY after the GTID), or anything else
            begin = _BEGIN_NONE
        if etype == binlog.XID:
            if verbatim and rows:
                data += event
                rows = kept + 1
            return ((at, seq_id, gtid, bytes(data), tuple(tables), rows, next_position, ack) if rows else None), False
        if run_rules and len(tables) + rows >= RUN_EVENTS:
            return None, False
        if etype == binlog.TABLE_MAP:
            try:
                tables.append(table_map_names(event))
            except RemoteProtocolError:
                return None, False
            if run_rules and not all(name.isascii() for name in tables[-1]):
                return None, False
        elif etype in SCANNED_ROW_EVENTS:
            rows += 1
        else:
            return None, False
        data += event
        kept += 1
        if len(data) >= max_bytes:
            return None, False  # a transaction to chunk


# --- a run of common transactions, framed straight into the producer's mirror --------
_TXN_ENTRY = FrameKind.TXN  # the kind a placed frame's ring entry names


def place_run(buf, seq_id: int, semi_sync: bool, max_bytes: int, region: bytearray, base: int, head: int, free: int,
              next_seq: int, epoch: int, heartbeat: tuple[str, str], max_txns: int, file: bytes | None = None):
    """Common transactions whole in ``buf`` (``scan_transaction``'s kind, from their
    GTID event on) framed one after another into ``region``, a ring producer's mirror
    whose data area starts at ``base`` (a TXN frame of the compact payload each, no
    FORMAT_DESCRIPTION; a PAD frame, or an implicit wrap, where the ring's end comes
    first), from ``head`` with ``free`` bytes free, seqs from ``next_seq``. Stops
    before the first transaction that is not the common kind, does not fit the free
    space or half the ring, has a GTID or a table name over 255 bytes or a non-ASCII
    name, has more than ``RUN_EVENTS`` events, or is past ``max_txns``; and after one
    whose events asked for a semi-sync ACK. Returns None when it placed nothing, else
    (bytes of ``buf`` taken, the next packet's seq id, the ring entries of the placed
    frames as ``RingProducer`` keeps them: (seq, bytes incl. the gap before it,
    region offset, payload length, FrameKind.TXN, flags 0), the head after them, how
    many were writes of ``heartbeat`` (schema, table) alone, the last GTID, its
    XID's next-event position, the ACK position or -1). ``file`` (relay apply mode): each
    transaction whole as the primary wrote it (``scan_verbatim``), in the verbatim payload
    naming that binlog file."""
    size = len(region) - base
    view = memoryview(buf)
    at, entries, heartbeats, gtid, commit, ack = 0, [], 0, "", 0, -1
    while len(entries) < max_txns and ack < 0:
        scanned = _scan(view[at:], seq_id, semi_sync, max_bytes, True, True, file is not None)[0]
        if scanned is None:
            break
        taken, next_id, txn_gtid, data, tables, events, position, txn_ack = scanned
        payload = encode_compact(txn_gtid, time.time_ns(), time.time_ns(), b"", events, tables, data) \
            if file is None else encode_verbatim(txn_gtid, time.time_ns(), time.time_ns(), b"", file, events, data)
        need = frame_bytes(len(payload))
        gap = size - head if head + need > size else 0
        if need > size // 2 or gap + need > free:
            break
        seq = next_seq
        if gap >= MIN_FRAME_BYTES:  # the PAD carries the seq of the frame after it
            place_frame(region, base + head, FrameKind.PAD, 0, seq, epoch, bytes(gap - MIN_FRAME_BYTES))
        if gap:
            head = 0
        place_frame(region, base + head, FrameKind.TXN, 0, seq, epoch, payload)
        entries.append((seq, gap + need, base + head, len(payload), _TXN_ENTRY, 0))
        head, free, next_seq = (head + need) % size, free - gap - need, next_seq + 1
        at, seq_id, gtid, commit, ack = at + taken, next_id, txn_gtid, position, txn_ack
        heartbeats += tables == (heartbeat,)
    if not entries:
        return None
    return at, seq_id, entries, head, heartbeats, gtid, commit, ack


# --- a group's row events and the statements after them, as one COM_QUERY ---------

def one_trip(datas, tail, limit: int) -> bytes | None:
    """The text of one round trip: ``BINLOG '<base64 of all datas>'`` then the
    ``tail`` statements, joined by ";", when there are row events and it all takes at
    most ``limit`` bytes; else None (the caller splits it over several statements)."""
    total = 0
    for d in datas:
        total += len(d)
    size = binlog.statement_bytes(total)
    for t in tail:
        size += 1 + len(t)
    if not total or size > limit:
        return None
    return b";".join([binlog.binlog_statement(b"".join(datas)), *tail])
