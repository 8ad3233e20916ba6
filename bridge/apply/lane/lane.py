"""The replica side's common case in one call per group (pure-Python twin of
bridge/apply/lane/_lane.pyx; bridge.apply.lane picks which runs).

The common case is a run of row-only transactions in the compact form (raw row
events, no FORMAT_DESCRIPTION of their own, no rdma_bridge table but the heartbeat)
applied in binlog mode through one replica connection. ``Lane.run`` takes the ones
already in the ring (up to the group bounds), writes them and the channel's position
as ONE ``BINLOG '...';COMMIT`` round trip on the connection's socket, reads the two
answers, and acknowledges the frames in the ring: ring -> BINLOG text -> socket ->
answers -> ack, with no Python object per transaction. A MySQL replica that keeps its
MySQL primary's GTIDs commits each transaction on its own with its GTID (``SET
GTID_NEXT``, as the general path does): the group is still one round trip, ``COMMIT``,
then per transaction ``SET GTID_NEXT='g';BINLOG '<its rows, the position>';COMMIT``,
then GTID_NEXT back to AUTOMATIC; the GTID set it writes grows one uuid's last interval
(``MysqlPosition``), and it takes only tables the applier knows are transactional. Anything else (the first
frame not of that kind, an error answer, a lost connection) is left to the general
path (bridge.node.replica), which applies the same frames again and names what
went wrong: the lane rewinds to the group's first frame and says so.

Results of ``run`` (the number of frames it applied, or one of the codes below) and
what it read are attributes (``seq``, ``tail``, ``expected_seq``, ``txns``,
``beats``, ``events``, ``last_gtid``, ``heartbeat``) and ``record_stages``.
"""

from __future__ import annotations

import binascii
import select
import socket
import struct
import time

from bridge.apply.binlog import build
from bridge.apply.connection import ANSWERS_WAIT_MS, GTID_AUTOMATIC, OK_BYTES_MIN
from bridge.apply.lane.mysqlpos import MysqlPosition, mysql_position
from bridge.model import HEARTBEAT_TABLE
from bridge.ring.consumer import frame_ready, next_frame
from bridge.ring.layout import ACK_SEQ_AT, SIZE_AT, TAIL_AT
from bridge.server import sqlnames
from bridge.transport.doorbell import sleep_on_queue_pair, wait_for_doorbell
from bridge.wire import hotpath
from bridge.wire.binlog import UPDATE_ROWS_V1
from bridge.wire.frame import FrameKind

NOTHING = 0  # nothing the lane can apply: the ring is empty, or its next frame is for the general path
FAILED = -1  # the replica answered an error: rolled back by the caller, the frames left in the ring
LOST = -2  # the connection broke: the frames left in the ring

TXN = int(FrameKind.TXN)
COMPACT = hotpath.COMPACT_TAG
BRIDGE_SCHEMA, HEARTBEAT = sqlnames.SCHEMA, HEARTBEAT_TABLE
MAX_DOMAINS = 64
MAX_QUERY = 0xFFFFFF - 1  # one protocol packet (the command byte included)
GTID_NEXT_HEAD = b"SET @@SESSION.GTID_NEXT='"  # bridge.apply.connection.gtid_next
MYSQL_TXN_BYTES = 1 + len(GTID_NEXT_HEAD) + 1 + 1 + 8 + 1 + 7  # ;SET..='g' ;BINLOG '..' ;COMMIT, but g and base64
MYSQL_GROUP_BYTES = 6 + 1 + len(GTID_AUTOMATIC)  # the COMMIT first, the GTID_NEXT put back last
_U64, _U32 = struct.Struct("<Q"), struct.Struct("<I")


class Lane:
    """One per replica connection and format: ``channel_key`` is the position event's
    fixed part (bridge.apply.binlog.build: table id, flags, columns, bitmaps, the
    channel), ``position_map`` its TABLE_MAP event, ``digits`` updated_at's fractional
    digits, ``checksum`` whether events carry a CRC32, ``server_id`` the primary's,
    ``engines`` and ``update_type`` as below."""

    def __init__(self, channel_key: bytes, position_map: bytes, digits: int, checksum: bool, server_id: int,
                 engines: dict | None = None, update_type: int = UPDATE_ROWS_V1) -> None:
        self.channel_key, self.position_map = bytes(channel_key), bytes(position_map)
        self.digits, self.checksum, self.server_id = digits, checksum, server_id
        self.update_type = update_type  # the position event's (build.update_type; its key made for it)
        # a MySQL replica keeping its MySQL primary's GTIDs: the applier's {(schema, table): non-transactional}
        # (what the general path learnt; the lane takes only tables known transactional); None elsewhere
        self.engines = engines
        self._domains: list[tuple[int, int, int]] = []  # (domain, server, seq), by domain
        self._mysql: MysqlPosition | None = None  # the MySQL set it carries instead
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
        lane unusable, when it is not a MariaDB set of at most MAX_DOMAINS domains or,
        where the lane keeps MySQL GTIDs (``engines``), a MySQL set of at most MYSQL_SET_MAX bytes."""
        self._mysql = mysql_position(gtids, self.engines is not None)
        parts = None if self._mysql is not None else mariadb_parts(gtids)
        self._domains = parts or []
        if parts is None and self._mysql is None:
            return False
        self.seq = seq
        return True

    def gtid_parts(self) -> list[tuple[int, int, int]]:
        """The set as (domain, server, seq), by domain (a MariaDB set)."""
        return list(self._domains)

    @property
    def mysql(self) -> bool:
        """It carries a MySQL GTID set (``gtids``), each transaction committed with its GTID."""
        return self._mysql is not None

    @property
    def gtids(self) -> str:
        if self._mysql is not None:
            return self._mysql.text().decode()
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

    def position_events(self, seq: int, now_us: int, gtids: bytes | None = None) -> bytes:
        """The position's TABLE_MAP and UPDATE_ROWS events (as build.PositionTable),
        with ``gtids`` (default: the set the lane carries)."""
        text = self.gtids.encode() if gtids is None else gtids
        body = build.position_update_body(self.channel_key, self.digits, seq, text, now_us)
        return self.position_map + build.event_bytes(self.update_type, body, self.server_id, self.checksum)

    def query(self, datas: list, seq: int, now_us: int) -> bytes:
        """``BINLOG '<the row events, then the position's>';COMMIT``."""
        events = b"".join(datas) + self.position_events(seq, now_us)
        return b"BINLOG '" + binascii.b2a_base64(events, newline=False) + b"';COMMIT"

    def mysql_query(self, gtids: list, datas: list, seq: int, hi: int, now_us: int) -> bytes:
        """MySQL: ``COMMIT``, then transaction i (GTID ``gtids[i]``, row events ``datas[i]``)
        as ``SET GTID_NEXT``, ``BINLOG '<its row events, the position: seq + i + 1, the
        carried interval up to hi + i + 1>'``, ``COMMIT``; then GTID_NEXT back to AUTOMATIC."""
        my = self._mysql
        parts = [b"COMMIT"]
        for i, (gtid, data) in enumerate(zip(gtids, datas)):
            events = data + self.position_events(seq + i + 1, now_us, my.text(hi + i + 1))
            parts += [GTID_NEXT_HEAD + gtid.encode() + b"'", b"BINLOG '" + binascii.b2a_base64(events, newline=False)
                      + b"'", b"COMMIT"]
        return b";".join([*parts, GTID_AUTOMATIC])

    # --- one group ------------------------------------------------------------------

    def run(self, region, tail: int, expected_seq: int, epoch: int, sock, max_txns: int, max_events: int,
            max_bytes: int, limit: int, doorbell: int = -1, wait_ms: int = 0, receiver=None, sleeper=None,
            spin_us: int = 0, busy_ms: int = 0, interrupt_fd: int | None = None) -> int:
        """Apply the frames ready in ``region`` from ``tail`` (seq ``expected_seq``), a
        group at a time (each one replica transaction on ``sock``), until the ring's next
        frame is not the lane's, or for ``wait_ms``: while the ring is empty it sleeps on
        the ``doorbell`` fd (-1: none, return at once). Returns the frames applied, or
        FAILED or LOST for the group it gave back (those applied before it stay applied:
        ``groups``, ``txns``, ``tail``, ``expected_seq`` and the position say so).
        ``receiver``: the compiled lane reads the tcp data connection itself while it runs
        (bridge/transport/_placements.pxi); this twin leaves it to the receiver thread,
        which rings the doorbell: the same frames, the same bytes, one wakeup more.
        ``sleeper``: rdma, the queue pair the run sleeps through instead (bridge.transport.doorbell).
        ``spin_us`` (start-replica --spin-us): after the last frame, the ring is polled this
        long, a zero sleep apart, before the run sleeps. ``busy_ms``: once a group is applied
        the run returns within this long (the node adds up its counters), while an idle run
        sleeps up to ``wait_ms``; a sleep that ends with nothing to take (the host's
        ``interrupt``: the doorbell rung with no frame, or ``interrupt_fd`` over rdma) returns."""
        deadline = time.monotonic() + wait_ms / 1000
        idle_since = None
        self.tail, self.expected_seq = tail, expected_seq
        self.groups = self.largest = self.txns = self.beats = self.events = self.given_back = 0
        self.heartbeat, self._stamps = None, []
        while True:
            got = self._group(region, epoch, sock, max_txns, max_events, max_bytes, limit)
            if got < 0:
                return got
            if got == NOTHING:
                if self._ready(region, epoch) or doorbell < 0 and sleeper is None:
                    return self.txns  # the next frame is the general path's, or nothing to wait on
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    return self.txns
                idle_since = idle_since or now
                if now - idle_since < spin_us / 1e6:
                    time.sleep(0)  # --spin-us: a zero sleep lasts Linux's timer slack, ~50-70 µs
                    continue
                if sleeper is None:
                    wait_for_doorbell(region, doorbell, lambda: self._ready(region, epoch), left)
                elif not sleep_on_queue_pair(sleeper, lambda: self._ready(region, epoch), left, interrupt_fd):
                    return self.txns  # the queue pair cannot sleep (closed, broken, pyverbs'): the caller polls
                if not self._ready(region, epoch):
                    return self.txns  # woken with nothing to take: interrupted (or its time is up)
            else:
                idle_since = None
                now = time.monotonic()
                if busy_ms:
                    deadline = min(deadline, now + busy_ms / 1000)
                if now >= deadline:
                    return self.txns

    def _ready(self, region, epoch: int) -> bool:
        return frame_ready(region, self.tail, self.expected_seq, epoch, hotpath.frame_at)

    def _group(self, region, epoch: int, sock, max_txns: int, max_events: int, max_bytes: int, limit: int) -> int:
        """One group from ``self.tail``: its frame count, NOTHING, FAILED or LOST."""
        size = _U32.unpack_from(region, SIZE_AT)[0]
        my = self._mysql
        saved = (self.seq, list(self._domains))
        datas, stamps, gtids, ends, n, events, total, beats, heartbeat = [], [], [], [], 0, 0, 0, 0, None
        room = min(limit, MAX_QUERY - 1) - (self.position_bytes_max if my is None else MYSQL_GROUP_BYTES)
        sent = 0  # MySQL: the query's bytes so far, at most (each transaction's position at its longest)
        at, expected = self.tail, self.expected_seq
        while n < max_txns and events < max_events and total < max_bytes:
            got, at = next_frame(region, size, at, expected, epoch, hotpath.frame_at)
            if got is None or got[0] != TXN or not got[2] or got[2][0] != COMPACT:
                break
            try:
                gtid, read_ns, ship_ns, fmt, count, tables, data = hotpath.decode_compact(got[2])
            except (IndexError, ValueError, struct.error, UnicodeDecodeError):  # malformed: the general path names it
                break
            if fmt or not data:
                break
            if my is None:
                parsed = _mariadb_gtid(gtid)
                if parsed is None or query_bytes(total + len(data)) > room:
                    break
            else:
                cost = mysql_txn_bytes(len(gtid.encode()), len(data)) + self.position_bytes_max
                if sent + cost > room or not my.next_of(gtid):
                    break
            beat = tables == (HEARTBEAT,)
            if not beat and any(schema == BRIDGE_SCHEMA for schema, _ in tables):
                break  # a repair, a checksum, another channel's table: the general path
            if my is not None:
                if not beat and not all(self.engines.get(t) is False for t in tables):
                    break  # a table the general path has not applied yet, or a non-transactional one
                my.hi, sent = my.hi + 1, sent + cost
            elif not self._add(parsed):
                break
            datas.append(data)
            gtids.append(gtid)
            stamps.append((read_ns, ship_ns))
            n, events, total = n + 1, events + count, total + len(data)
            if beat:
                beats, heartbeat = beats + 1, data
            at, expected = (at + got[3]) % size, expected + 1
            ends.append((at, expected, events, beats, heartbeat))
        if not n:
            return NOTHING
        self.picked_ns = time.time_ns()
        hi = my.hi - n if my is not None else 0  # the carried interval's end before the group (it may name it)
        if my is None:
            query, answers = self.query(datas, self.seq + n, self.picked_ns // 1000), 2
        else:
            query, answers = self.mysql_query(gtids, datas, self.seq, hi, self.picked_ns // 1000), 3 * n + 2
        status, oks = self._round_trip(sock, query, answers)
        done = n if not status else (max(0, (oks - 1) // 3) if my is not None and status == FAILED else 0)
        if done < n:  # given back: those after the last COMMIT answered OK (MySQL; else all)
            self.seq, self._domains = saved[0], saved[1]
            if my is not None:
                my.hi = hi + done
            self.given_back = n - done
        if done:
            at, expected, events, beats, heartbeat = ends[done - 1]
            self.seq = saved[0] + done
            region[ACK_SEQ_AT:ACK_SEQ_AT + 8] = _U64.pack(expected - 1)
            region[TAIL_AT:TAIL_AT + 4] = _U32.pack(at)
            self.tail, self.expected_seq = at, expected
            self.groups, self.largest = self.groups + 1, max(self.largest, done)
            self.txns, self.beats, self.events = self.txns + done, self.beats + beats, self.events + events
            self.last_gtid, finished = gtids[done - 1], time.time_ns()
            if heartbeat is not None:
                self.heartbeat, self.heartbeat_ns = heartbeat, finished
            self._stamps += [(self.picked_ns, finished, read_ns, ship_ns) for read_ns, ship_ns in stamps[:done]]
        return status or n

    def _round_trip(self, sock, query: bytes, answers: int) -> tuple[int, int]:
        """Send ``query`` (``answers`` statements), read their answers: (0, FAILED or LOST,
        the OK answers read before it)."""
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
            for oks in range(answers):
                header = _read(sock, 4)
                length = int.from_bytes(header[:3], "little")
                if header[3] != (oks + 1) % 256 or length == 0xFFFFFF or length == 0:
                    return LOST, oks
                body = _read(sock, length)
                if body[:1] == b"\xff":
                    self.error = header + body
                    return FAILED, oks
                if body[:1] != b"\x00":
                    return LOST, oks
        except OSError:
            return LOST, 0
        return 0, answers

    def record_stages(self, stages) -> None:
        """The stage times of the transactions the last run committed (as ReplicaNode._record_stages)."""
        for picked, done, read_ns, ship_ns in self._stamps:
            stages.record("apply", (done - picked) / 1000)
            if ship_ns:
                stages.record("deliver", (picked - ship_ns) / 1000)
                stages.record("bridge", (done - read_ns) / 1000)


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


def mysql_txn_bytes(gtid_bytes: int, data_bytes: int) -> int:
    """A MySQL transaction's statements in a group's query, but its position's events."""
    return MYSQL_TXN_BYTES + gtid_bytes + 4 * ((data_bytes + 2) // 3)


def _mariadb_gtid(text: str) -> tuple[int, int, int] | None:
    parts = text.split("-")
    if len(parts) != 3 or not text.isascii() or not all(p.isdigit() and len(p) <= 20 for p in parts):
        return None
    domain, server, seq = (int(p) for p in parts)
    if domain > 0xFFFFFFFF or server > 0xFFFFFFFF or seq > 0xFFFFFFFFFFFFFFFF:
        return None
    return domain, server, seq
