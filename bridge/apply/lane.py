"""The replica side's common case in one call per group (pure-Python twin of
bridge/apply/_lane.pyx; bridge.apply.lanes picks which runs).

The common case is a run of row-only transactions in the compact form (raw row
events, no FORMAT_DESCRIPTION of their own, no rdma_bridge table but the heartbeat)
applied in binlog mode through one replica connection. ``Lane.run`` takes the ones
already in the ring (up to the group bounds), writes them and the channel's position
as ONE ``BINLOG '...';COMMIT`` round trip on the connection's socket, reads the two
answers, and acknowledges the frames in the ring: ring -> BINLOG text -> socket ->
answers -> ack, with no Python object per transaction. Anything else (the first
frame not of that kind, an error answer, a lost connection) is left to the general
path (bridge.node.replica), which applies the same frames again and names what
went wrong: the lane rewinds to the group's first frame and says so.

Results of ``run`` (the number of frames it applied, or one of the codes below) and
what it read are attributes (``seq``, ``tail``, ``expected_seq``, ``txns``,
``beats``, ``events``, ``last_gtid``, ``heartbeat``) and ``record_stages``.
"""

from __future__ import annotations

import binascii
import os
import select
import socket
import struct
import time

from bridge import sqlnames
from bridge.apply import binlog_sql
from bridge.apply.connection import ANSWERS_WAIT_MS, OK_BYTES_MIN
from bridge.model import HEARTBEAT_TABLE
from bridge.ring.layout import ACK_SEQ_AT, DATA_OFFSET, SIZE_AT, TAIL_AT, WAITING_AT, WRITE_SEQ_AT
from bridge.wire import hotpath
from bridge.wire.binlog import UPDATE_ROWS_V1
from bridge.wire.frame import FrameKind

NOTHING = 0  # nothing the lane can apply: the ring is empty, or its next frame is for the general path
FAILED = -1  # the replica answered an error: rolled back by the caller, the frames left in the ring
LOST = -2  # the connection broke: the frames left in the ring

TXN, PAD = int(FrameKind.TXN), int(FrameKind.PAD)
COMPACT = hotpath.COMPACT_TAG
BRIDGE_SCHEMA, HEARTBEAT = sqlnames.SCHEMA, HEARTBEAT_TABLE
MAX_DOMAINS = 64
MAX_QUERY = 0xFFFFFF - 1  # one protocol packet (the command byte included)
_U64, _U32 = struct.Struct("<Q"), struct.Struct("<I")


class Lane:
    """One per replica connection and format: ``channel_key`` is the position event's
    fixed part (bridge.apply.binlog_sql: table id, flags, columns, bitmaps, the
    channel), ``position_map`` its TABLE_MAP event, ``digits`` updated_at's fractional
    digits, ``checksum`` whether events carry a CRC32, ``server_id`` the primary's."""

    def __init__(self, channel_key: bytes, position_map: bytes, digits: int, checksum: bool, server_id: int) -> None:
        self.channel_key, self.position_map = bytes(channel_key), bytes(position_map)
        self.digits, self.checksum, self.server_id = digits, checksum, server_id
        self._domains: list[tuple[int, int, int]] = []  # (domain, server, seq), by domain
        self.seq = 0
        self.tail = self.expected_seq = 0
        self.txns = self.beats = self.events = 0  # of the last run, over its groups
        self.groups = self.largest = self.given_back = 0  # groups applied, the largest, frames of the one given back
        self.last_gtid = ""
        self.heartbeat = None  # the row events of the run's last heartbeat
        self.heartbeat_ns = 0  # when its group committed
        self._stamps: list[tuple[int, int]] = []
        self.picked_ns = 0
        self.error = b""  # FAILED: the error packet
        # the most bytes the position's events add to a query's base64 (the GTID set at MAX_DOMAINS domains)
        self.position_bytes_max = query_bytes(len(self.position_map) + 19 + len(self.channel_key) + 1 + 8 + 2
                                              + MAX_DOMAINS * 63 + 8 + 4 + 3 + 4) - query_bytes(0)

    # --- the position the lane carries ----------------------------------------

    def set_position(self, seq: int, gtids) -> bool:
        """Start from this position (``gtids``: a bridge.model.GtidSet); False, and the
        lane unusable, when it is not a MariaDB set of at most MAX_DOMAINS domains."""
        parts = mariadb_parts(gtids)
        if parts is None:
            self._domains = []
            return False
        self.seq, self._domains = seq, parts
        return True

    def gtid_parts(self) -> list[tuple[int, int, int]]:
        """The set as (domain, server, seq), by domain."""
        return list(self._domains)

    @property
    def gtids(self) -> str:
        return ",".join(f"{d}-{s}-{n}" for d, s, n in self._domains)

    def _add(self, gtid: tuple[int, int, int]) -> bool:
        for i, (domain, _, _) in enumerate(self._domains):
            if domain == gtid[0]:
                self._domains[i] = gtid
                return True
            if domain > gtid[0]:
                if len(self._domains) >= MAX_DOMAINS:
                    return False
                self._domains.insert(i, gtid)
                return True
        if len(self._domains) >= MAX_DOMAINS:
            return False
        self._domains.append(gtid)
        return True

    # --- the round trip -------------------------------------------------------------

    def position_events(self, seq: int, now_us: int) -> bytes:
        """The position's TABLE_MAP and UPDATE_ROWS events (as binlog_sql.PositionTable)."""
        body = binlog_sql.position_update_body(self.channel_key, self.digits, seq, self.gtids.encode(), now_us)
        return self.position_map + binlog_sql.event_bytes(UPDATE_ROWS_V1, body, self.server_id, self.checksum)

    def query(self, datas: list, seq: int, now_us: int) -> bytes:
        """``BINLOG '<the row events, then the position's>';COMMIT``."""
        events = b"".join(datas) + self.position_events(seq, now_us)
        return b"BINLOG '" + binascii.b2a_base64(events, newline=False) + b"';COMMIT"

    # --- one group ------------------------------------------------------------------

    def run(self, region, tail: int, expected_seq: int, epoch: int, sock, max_txns: int, max_events: int,
            max_bytes: int, limit: int, doorbell: int = -1, wait_ms: int = 0, receiver=None) -> int:
        """Apply the frames ready in ``region`` from ``tail`` (seq ``expected_seq``), a
        group at a time (each one replica transaction on ``sock``), until the ring's next
        frame is not the lane's, or for ``wait_ms``: while the ring is empty it sleeps on
        the ``doorbell`` fd (-1: none, return at once). Returns the frames applied, or
        FAILED or LOST for the group it gave back (those applied before it stay applied:
        ``groups``, ``txns``, ``tail``, ``expected_seq`` and the position say so).
        ``receiver``: the compiled lane reads the tcp data connection itself while it runs
        (bridge/transport/_placements.pxi); this twin leaves it to the receiver thread,
        which rings the doorbell: the same frames, the same bytes, one wakeup more."""
        deadline = time.monotonic() + wait_ms / 1000
        self.tail, self.expected_seq = tail, expected_seq
        self.groups = self.largest = self.txns = self.beats = self.events = self.given_back = 0
        self.heartbeat, self._stamps = None, []
        while True:
            got = self._group(region, epoch, sock, max_txns, max_events, max_bytes, limit)
            if got < 0:
                return got
            if got == NOTHING:
                if _U64.unpack_from(region, WRITE_SEQ_AT)[0] >= self.expected_seq or doorbell < 0:
                    return self.txns  # the next frame is the general path's, or nothing to wait on
                left = deadline - time.monotonic()
                if left <= 0:
                    return self.txns
                _sleep(region, doorbell, self.expected_seq, int(left * 1000) + 1)
            elif time.monotonic() >= deadline:
                return self.txns

    def _group(self, region, epoch: int, sock, max_txns: int, max_events: int, max_bytes: int, limit: int) -> int:
        """One group from ``self.tail``: its frame count, NOTHING, FAILED or LOST."""
        size = _U32.unpack_from(region, SIZE_AT)[0]
        published = _U64.unpack_from(region, WRITE_SEQ_AT)[0]
        saved = (self.seq, list(self._domains))
        datas, stamps, n, events, total, beats, heartbeat, last_gtid = [], [], 0, 0, 0, 0, None, ""
        room = min(limit, MAX_QUERY - 1) - self.position_bytes_max
        at, expected = self.tail, self.expected_seq
        while n < max_txns and events < max_events and total < max_bytes and published >= expected:
            got = None
            for _ in range(2):  # at most one PAD before a frame
                if size - at < 24:
                    at = 0
                got = hotpath.frame_at(region, DATA_OFFSET + at, size - at, expected, epoch)
                if got is None or got[0] != PAD:
                    break
                at, got = 0, None
            if got is None or got[0] != TXN or not got[2] or got[2][0] != COMPACT:
                break
            try:
                gtid, read_ns, ship_ns, fmt, count, tables, data = hotpath.decode_compact(got[2])
            except (IndexError, ValueError, struct.error, UnicodeDecodeError):  # malformed: the general path names it
                break
            parsed = _mariadb_gtid(gtid)
            if fmt or parsed is None or not data or query_bytes(total + len(data)) > room:
                break
            beat = tables == (HEARTBEAT,)
            if not beat and any(schema == BRIDGE_SCHEMA for schema, _ in tables):
                break  # a repair, a checksum, another channel's table: the general path
            if not self._add(parsed):
                break
            datas.append(data)
            stamps.append((read_ns, ship_ns))
            n, events, total = n + 1, events + count, total + len(data)
            if beat:
                beats, heartbeat = beats + 1, data
            last_gtid = gtid
            at, expected = (at + got[3]) % size, expected + 1
        if not n:
            self.seq, self._domains = saved
            return NOTHING
        self.picked_ns = time.time_ns()
        status = self._round_trip(sock, self.query(datas, self.seq + n, self.picked_ns // 1000))
        if status:
            self.seq, self._domains = saved
            self.given_back = n
            return status
        self.seq += n
        region[ACK_SEQ_AT:ACK_SEQ_AT + 8] = _U64.pack(expected - 1)
        region[TAIL_AT:TAIL_AT + 4] = _U32.pack(at)
        self.tail, self.expected_seq = at, expected
        self.groups, self.largest = self.groups + 1, max(self.largest, n)
        self.txns, self.beats, self.events = self.txns + n, self.beats + beats, self.events + events
        self.last_gtid, done = last_gtid, time.time_ns()
        if heartbeat is not None:
            self.heartbeat, self.heartbeat_ns = heartbeat, done
        self._stamps += [(self.picked_ns, done, read_ns, ship_ns) for read_ns, ship_ns in stamps]
        return n

    def _round_trip(self, sock, query: bytes) -> int:
        """Send ``query`` (two statements), read both answers: 0, FAILED or LOST."""
        tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        try:
            if tcp:  # one wakeup for both answers (bridge.apply.connection)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 2 * OK_BYTES_MIN)
            sock.sendall((len(query) + 1).to_bytes(3, "little") + b"\x00\x03" + query)
            if tcp:
                waiter = select.poll()
                waiter.register(sock.fileno(), select.POLLIN)
                waiter.poll(ANSWERS_WAIT_MS)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            for seq_id in (1, 2):
                header = _read(sock, 4)
                length = int.from_bytes(header[:3], "little")
                if header[3] != seq_id or length == 0xFFFFFF:
                    return LOST
                body = _read(sock, length)
                if body[:1] == b"\xff":
                    self.error = header + body
                    return FAILED
                if body[:1] != b"\x00":
                    return LOST
        except OSError:
            return LOST
        return 0

    def record_stages(self, stages) -> None:
        """The stage times of the transactions the last run committed (as ReplicaNode._record_stages)."""
        for picked, done, read_ns, ship_ns in self._stamps:
            stages.record("apply", (done - picked) / 1000)
            if ship_ns:
                stages.record("deliver", (picked - ship_ns) / 1000)
                stages.record("bridge", (done - read_ns) / 1000)


def _sleep(region, doorbell: int, expected_seq: int, wait_ms: int) -> None:
    """Until the producer rings ``doorbell`` (bridge.transport.doorbell: the ring's waiting flag up meanwhile)."""
    region[WAITING_AT:WAITING_AT + 4] = _U32.pack(1)
    try:
        if _U64.unpack_from(region, WRITE_SEQ_AT)[0] < expected_seq:
            waiter = select.poll()
            waiter.register(doorbell, select.POLLIN)
            waiter.poll(wait_ms)
        try:
            os.read(doorbell, 4096)
        except BlockingIOError:
            pass
    finally:
        region[WAITING_AT:WAITING_AT + 4] = _U32.pack(0)


def query_bytes(events: int) -> int:
    """The length of ``BINLOG '<base64 of events bytes>';COMMIT``."""
    return 8 + 4 * ((events + 2) // 3) + 1 + 7


def _read(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise ConnectionResetError("the replica closed the connection")
        out += got
    return out


def mariadb_parts(gtids) -> list[tuple[int, int, int]] | None:
    """A GtidSet's (domain, server, seq) by domain, or None when the lane cannot carry it
    (MySQL's, more than MAX_DOMAINS domains, ids beyond their binlog widths)."""
    parts = sorted((int(g.domain), g.server, g.seq) for g in gtids.mariadb)
    if gtids.mysql or len(parts) > MAX_DOMAINS or \
            any(d > 0xFFFFFFFF or s > 0xFFFFFFFF or n > 0xFFFFFFFFFFFFFFFF for d, s, n in parts):
        return None
    return parts


def _mariadb_gtid(text: str) -> tuple[int, int, int] | None:
    parts = text.split("-")
    if len(parts) != 3 or not text.isascii() or not all(p.isdigit() and len(p) <= 20 for p in parts):
        return None
    domain, server, seq = (int(p) for p in parts)
    if domain > 0xFFFFFFFF or server > 0xFFFFFFFF or seq > 0xFFFFFFFFFFFFFFFF:
        return None
    return domain, server, seq
