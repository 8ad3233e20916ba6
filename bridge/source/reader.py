"""Binlog reader adapter: the only module that imports pymysqlreplication.

The library keeps the dump connection (registration, checksum and heartbeat
settings, COM_BINLOG_DUMP_GTID, rotation); its packets are read by ``stream.py``
once the dump runs, a common transaction whole where it can, and each other event
packet passes our hook first (``_fast_event``): GTID, XID, QUERY with its context
events and the FORMAT_DESCRIPTION are read here (bridge.wire.binlog); in binlog apply mode TABLE_MAP
and row events are kept whole, unread. In sql apply mode rows are decoded (our
decoder for the common types, the library for the rest) into exact values, working
around the library's traps measured on MariaDB 10.11:
- zero/invalid dates decode to None → kept as ``InvalidTemporal`` text (the
  library's private date readers are replaced, in ``_compat`` only);
- BINARY(n) arrives with trailing zero bytes stripped → padded back to n;
- BIT(n) arrives as a '0101' string → ``BitValue``; SET as a set (empty: None);
- TIMESTAMP arrives as naive UTC (the applier runs with time_zone '+00:00'),
  and a zero TIMESTAMP as the epoch → ``InvalidTemporal``;
- the primary key is '', a str or a tuple.
The library's own reconnect replays from its original position and delivers
duplicates, so a lost stream raises ``SourceConnectionLost`` instead: the bridge
owns reconnection. What reaches into the library's private parts (its date
readers, charsets, the TableMap cache, mangled state) is in ``_compat``, which
checks the installed version first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from bridge.config import MysqlUrl
from bridge.errors import SourceConnectionLost, SourceError
from bridge.model import RowEvents, Transaction, Verbatim
from bridge.server import dbconn, errorcodes
from bridge.server.flavor import Flavor
from bridge.source import _compat, libraryvalues, rowimage
from bridge.source.events import (
    CommitRead,
    ContextRead,
    GtidStart,
    HeartbeatRead,
    QueryRead,
    RawRowEvent,
    RowsRead,
    SourceEvent,
    VerbatimRead,
)
from bridge.source.stream import LIBRARY, Handled, StreamConnection
from bridge.wire import binlog
from bridge.wire.native import hot

log = logging.getLogger(__name__)


class Taken(Protocol):
    """What a ``take_run`` placer used of the packets it was given."""
    taken: int  # bytes
    seq_id: int  # the next packet's number
    ack: int  # the binlog position an event asked a semi-sync ACK for, or -1
    commit_position: int  # the last transaction's XID's next-event position


MARIADB_FL_STANDALONE = 0x01
_ROW_KINDS = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}


class BinlogReader:
    """Streams events from ``gtid_set`` (exclusive) onwards. ``next_event`` blocks
    until an event or a heartbeat arrives."""

    def __init__(self, url: MysqlUrl, server_id: int, gtid_set: str, heartbeat_s: float = 0.5,
                 flavor: Flavor | None = None, report_as: str = "rdma-bridge", fast_rows: bool = True,
                 semi_sync: bool = False, raw_rows: bool = False, verbatim: bool = False) -> None:
        """``flavor``: the primary's (bridge.server.flavor), read here when not given;
        ``verbatim`` (relay apply mode): every event handed on whole (``VerbatimRead``),
        none decoded, a MySQL compressed transaction still compressed."""
        self.url = url
        self._heartbeat_s = heartbeat_s
        flavor = flavor or _read_flavor(url)
        wrapper = type("_Stream", (StreamConnection,), {"semi_sync": semi_sync,
                                                         "semi_sync_variable": flavor.dump_semi_sync_variable,
                                                         "verbatim": verbatim,
                                                         "fast_path": staticmethod(self._fast_event)})
        position = {"auto_position": gtid_set} if gtid_set else {}
        self._stream = BinLogStreamReader(
            # heartbeats arrive every heartbeat_s, so silence past a few of them is a stalled link
            connection_settings={**url.connect_args(), "connect_timeout": 10,
                                 "read_timeout": max(2.0, 4 * heartbeat_s)},  # read_timeout_s
            server_id=server_id, blocking=True, is_mariadb=not flavor.is_mysql, slave_heartbeat=heartbeat_s,
            only_events=[MariadbGtidEvent, GtidEvent, XidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent,
                         HeartbeatLogEvent],
            pymysql_wrapper=wrapper, enable_logging=False,
            report_slave=report_as,  # shown by SHOW REPLICAS / SHOW SLAVE HOSTS, which the server_id check reads
            **position)
        self._converters: dict[int, tuple] = {}
        self.fast_rows = fast_rows  # our row-image decoder where it covers the table (tests compare both)
        self.raw_rows = raw_rows  # binlog apply mode: TABLE_MAP and row events kept whole, not decoded
        self.verbatim = verbatim
        self._verbatim_file = ""  # verbatim: the file the last ROTATE named
        self.format: binlog.FormatDescription | None = None  # the stream's FORMAT_DESCRIPTION event
        self.commit_pos = 0  # the binlog offset after the last commit (XID or QUERY event) read
        self._tables: dict[int, tuple] = {}  # id(library Table) -> (table, readers, key, column names)

    def next_event(self) -> SourceEvent | None:
        conn = _compat.stream_connection(self._stream)
        if conn is not None and conn.dumping and self.fast_rows:
            # once the dump runs, packets are read here and only the rare ones go
            # through the library's fetchone (it reads the packet left in ``stashed``)
            try:
                data = conn.read_stream_packet()
            except pymysql.MySQLError as exc:
                raise self._stream_error(exc) from exc
            event = self._fast_event(data)
            if event is not LIBRARY:
                return event
            conn.stashed = data
        try:
            event = self._stream.fetchone()
        except Handled as handled:
            return handled.event
        except pymysql.MySQLError as exc:
            raise self._stream_error(exc) from exc
        if event is None:
            raise SourceConnectionLost(f"binlog stream from {self.url}: server ended the stream")
        return self._translate(event)

    def _stream_error(self, exc: pymysql.MySQLError) -> SourceError:
        error = SourceConnectionLost if errorcodes.code_of(exc) in errorcodes.CONNECTION_LOST else SourceError
        out = error(f"binlog stream from {self.url}: {exc}")
        out.server_error = (errorcodes.code_of(exc), str(exc.args[-1]) if exc.args else str(exc))  # as the server said
        return out

    def rest_of_transaction(self, gtid: str, max_bytes: int) -> Transaction | None:
        """Binlog apply mode, right after the GTID event of ``gtid`` (not a standalone
        one): the whole transaction in one call when its packets are all buffered
        already and it is the common kind (TABLE_MAP and row events, then XID, under
        ``max_bytes``), instead of a step per event; else None, and ``next_event``
        reads it event by event. Peeking waits like a read when nothing is buffered."""
        return self._take_whole(max_bytes, gtid)

    def next_transaction(self, max_bytes: int) -> Transaction | None:
        """Binlog apply mode, between transactions: the next transaction in one call
        when its packets are all buffered and it is the common kind (a MariaDB GTID, or
        MySQL's GTID and BEGIN; TABLE_MAP and row events, XID, under ``max_bytes``); else None and nothing is
        read (``next_event`` goes on). Waits like a read when nothing is buffered."""
        return self._take_whole(max_bytes, None)

    def next_verbatim(self, max_bytes: int) -> Transaction | None:
        """Relay apply mode, between transactions: the next transaction whole, its events
        as the primary wrote them, in one call when its packets are all buffered and it
        is the common kind (``next_transaction``'s); else None and nothing is read."""
        conn = _compat.stream_connection(self._stream)
        if not self.verbatim or conn is None:
            return None
        scanned = conn.take_verbatim(max_bytes)
        if scanned is None:
            return None
        gtid, data, events, self.commit_pos = scanned
        return Transaction(gtid, (Verbatim(self._verbatim_file, data, events),))

    def take_run(self, place: Callable[[bytes, int, bool], Taken | None]) -> Taken | None:
        """Binlog and relay apply modes, between transactions: ``place(packets, next packet's
        number, semi-sync headers)`` is given the buffered packets (waiting like a read
        when none are) and returns what it used of them (a run of whole transactions,
        ``RingProducer.place_run``) or None; what it used is taken off the stream."""
        conn = _compat.stream_connection(self._stream)
        if not (self.raw_rows or self.verbatim) or conn is None:
            return None
        run = conn.place_buffered(place)
        if run is not None:
            self.commit_pos = run.commit_position
        return run

    @property
    def dump_reader(self):
        """The dump's reader a ship lane shares, or None (see ``StreamConnection.dump_reader``)."""
        conn = _compat.stream_connection(self._stream)
        return conn.dump_reader if (self.raw_rows or self.verbatim) and conn is not None and conn.stashed is None \
            else None

    @property
    def frame_file(self) -> bytes | None:
        """Relay apply mode: the binlog file being read, which a run's verbatim frames name
        (``RingProducer.place_run``, the ship lane); None in the other modes (compact frames)."""
        return self._verbatim_file.encode() if self.verbatim else None

    def run_lane(self, lane, wait_ms: int, ack_file: bytes | None = None, ack_wait_us: int = 0) -> int:
        """The ship lane over this stream (bridge.source.ship): transactions placed and
        published; ``lane.why`` says why it returned; ``ack_file``, ``ack_wait_us``: see
        ``ShipLane.run`` (its ``file``: ``frame_file``)."""
        try:
            return _compat.stream_connection(self._stream).run_lane(lane, wait_ms, ack_file, ack_wait_us,
                                                                    self.frame_file)
        finally:
            if lane.frames:
                self.commit_pos = lane.commit_position

    @property
    def read_timeout_s(self) -> float:
        """How long the dump may send nothing (not even a heartbeat) before it counts as lost."""
        conn = _compat.stream_connection(self._stream)
        return conn._stall_s if conn is not None and conn._stall_s else max(2.0, 4 * self._heartbeat_s)

    def stalled(self) -> SourceConnectionLost:
        """The error of a dump that sent nothing for the read timeout (its connection closed),
        as a read that waited so long raises it."""
        return _compat.stream_connection(self._stream).stalled()

    def _take_whole(self, max_bytes: int, gtid: str | None) -> Transaction | None:
        conn = _compat.stream_connection(self._stream)
        if not self.raw_rows or conn is None:
            return None
        scanned = conn.take_transaction(max_bytes, gtid is None)
        if scanned is None:
            return None
        scanned_gtid, data, tables, events, self.commit_pos = scanned
        return Transaction(gtid or scanned_gtid, (RowEvents(data, tables, events),))

    @property
    def _checksum_bytes(self) -> int:
        if self.format is not None:
            return self.format.checksum_bytes
        return 4 if _compat.use_checksum(self._stream) else 0

    def _fast_event(self, data: bytes):
        """Events straight from the packet (byte 0 is the OK marker, the event follows),
        without the library's wrapper: GTID, XID, QUERY and its context events, the
        FORMAT_DESCRIPTION (noted, then left to the library too); in binlog apply mode
        TABLE_MAP and row events whole; else a TableMap seen before (same bytes) and
        rows of tables our decoder covers. Anything else: ``LIBRARY``."""
        if len(data) < 20 or data[0] != 0:
            return LIBRARY
        etype = data[5]
        if self.verbatim:
            return self._verbatim_event(etype, data)
        if etype == _XID_EVENT:
            self.commit_pos = int.from_bytes(data[14:18], "little")  # the event header's next position
            return _COMMIT
        if etype in _GTID_EVENTS:
            return GtidStart(*hot.parse_gtid(data[1:]))
        if etype in _WHOLE_EVENTS or (self.raw_rows and etype in _RAW_ROW_EVENTS):
            return self._whole_event(etype, bytes(data[1:1 + binlog.event_size(data, 1)]))
        if etype in _UNSUPPORTED:
            raise SourceError(f"binlog stream from {self.url}: {_UNSUPPORTED[etype]}")
        if not self.fast_rows:
            return LIBRARY
        stream = self._stream
        body_end = 20 + int.from_bytes(data[10:14], "little") - 19 - self._checksum_bytes
        if etype == _TABLE_MAP_EVENT:
            hit = _compat.TABLE_MAP_CACHE.get(bytes(data[20:body_end]))
            if hit is None:
                return LIBRARY
            stream.table_map[hit.table_id] = hit.get_table()
            return None
        kind = _FAST_ROW_KINDS.get(etype)
        if kind is None or _post_header_len(stream, etype) != _ROWS_POST_HEADER[etype]:
            return LIBRARY
        return self._fast_rows(data, 20, body_end, kind, etype >= _ROWS_V2_FIRST)

    def _fast_rows(self, data: bytes, pos: int, end: int, kind: str, v2: bool):
        table = self._stream.table_map.get(int.from_bytes(data[pos:pos + 6], "little"))
        if table is None:
            return LIBRARY
        compiled = self._tables.get(id(table))
        if compiled is None or compiled[0] is not table:
            names = tuple(c.name for c in table.columns)
            readers = rowimage.compile_table(table.columns, _compat.charset_to_encoding) if all(names) else None
            compiled = (table, readers, _table_key(table), names)
            self._tables[id(table)] = compiled
        _, readers, key, columns = compiled
        if readers is None:
            return LIBRARY
        pos += 8
        if v2:
            pos += int.from_bytes(data[pos:pos + 2], "little")  # extra data, its length field included
        ncols, pos = _length_coded(data, pos)
        if ncols != len(columns):
            return LIBRARY
        full, width = (1 << ncols) - 1, (ncols + 7) // 8
        for _ in range(2 if kind == "update" else 1):
            if int.from_bytes(data[pos:pos + width], "little") & full != full:
                return LIBRARY  # not a FULL row image
            pos += width
        images = rowimage.decode_images(readers, bytes(data[pos:end]), 2 if kind == "update" else 1)
        rows = tuple((r[0], r[1]) if kind == "update" else (None, r[0]) if kind == "insert" else (r[0], None)
                     for r in images)
        return RowsRead(kind, table.schema, table.table, columns, key, rows, end - 20,
                        int.from_bytes(data[26:28], "little"))

    def _verbatim_event(self, etype: int, data: bytes):
        """Relay apply mode: the event whole; the FORMAT_DESCRIPTION noted (the checksum's
        length), a commit's position noted, a heartbeat told apart (nothing to ship)."""
        if etype == binlog.HEARTBEAT:
            return _HEARTBEAT
        event = bytes(data[1:1 + binlog.event_size(data, 1)])
        if etype == binlog.FORMAT_DESCRIPTION:
            self.format = binlog.parse_format_description(event)
        elif etype == binlog.ROTATE:  # the library sees none of these events: the file is followed here
            self._verbatim_file = binlog.rotate_target(event, self._checksum_bytes)[0]
        elif etype in (_XID_EVENT, binlog.QUERY, binlog.TRANSACTION_PAYLOAD):
            self.commit_pos = binlog.next_position(event)
        return VerbatimRead(event)

    def _whole_event(self, etype: int, event: bytes):
        if etype == binlog.QUERY:
            self.commit_pos = int.from_bytes(event[13:17], "little")
            query = binlog.parse_query(event, self._checksum_bytes)
            return QueryRead(query.schema, query.text, event)
        if etype in binlog.CONTEXT_EVENTS:
            return ContextRead(event)
        if etype == binlog.FORMAT_DESCRIPTION:
            self.format = binlog.parse_format_description(event)
            return LIBRARY  # the library reads it too (post-header lengths)
        if etype == binlog.TABLE_MAP:
            return RawRowEvent(event, hot.table_map_names(event))
        return RawRowEvent(event, None, bool(binlog.rows_flags(event) & binlog.STMT_END_F))

    @property
    def log_file(self) -> str:
        """The binlog file being read (the library follows ROTATE events; in relay mode, this reader)."""
        return self._verbatim_file if self.verbatim else self._stream.log_file or ""

    def readable_now(self) -> bool:
        """The next read finds bytes without waiting (or fails at once)."""
        conn = _compat.stream_connection(self._stream)
        return conn is None or conn.readable_now()

    def fileno(self) -> int | None:
        """The dump connection's socket, to wait on beside others; None before it opens."""
        conn = _compat.stream_connection(self._stream)
        sock = dbconn.raw_socket(conn) if conn is not None else None
        return sock.fileno() if sock is not None else None

    @property
    def ack_wanted(self) -> bool:
        """The primary asked for a semi-sync ACK that ``take_ack_request`` has not taken."""
        conn = _compat.stream_connection(self._stream)
        return conn is not None and conn.ack_wanted is not None

    def take_ack_request(self) -> tuple[int, str] | None:
        """(next-event position, binlog file) of the last event the primary asked a
        semi-sync ACK for, once; None when none is pending."""
        conn = _compat.stream_connection(self._stream)
        if conn is None or conn.ack_wanted is None:
            return None
        position, conn.ack_wanted = conn.ack_wanted, None
        return position, self.log_file

    def send_ack(self, position: int, log_file: str) -> None:
        """The semi-sync ACK (``binlog.semi_sync_ack``)."""
        conn = _compat.stream_connection(self._stream)
        try:
            dbconn.send_raw(conn, binlog.semi_sync_ack(position, log_file.encode()))
        except pymysql.MySQLError as exc:
            raise SourceConnectionLost(f"binlog stream from {self.url}: semi-sync ACK: {exc}") from exc

    def close(self) -> None:
        self._stream.close()

    def _translate(self, ev) -> SourceEvent | None:
        translate = _TRANSLATE.get(type(ev))
        return translate(self, ev) if translate is not None else None

    def _rows(self, ev) -> RowsRead:
        columns = tuple(c.name for c in ev.columns)
        convert = self._column_converters(ev)
        kind = _ROW_KINDS[type(ev)]
        pk = ev.primary_key
        key = (pk,) if isinstance(pk, str) and pk else tuple(pk or ())
        rows = []
        for row in ev.rows:
            if kind == "update":
                rows.append((libraryvalues.image(row["before_values"], row["before_none_sources"], columns, convert),
                             libraryvalues.image(row["after_values"], row["after_none_sources"], columns, convert)))
            else:
                image = libraryvalues.image(row["values"], row["none_sources"], columns, convert)
                rows.append((None, image) if kind == "insert" else (image, None))
        return RowsRead(kind, ev.schema, ev.table, columns, key, tuple(rows), ev.event_size, ev.flags)

    def _column_converters(self, ev) -> tuple:
        table = ev.table_map[ev.table_id]
        cached = self._converters.get(ev.table_id)
        if cached is None or cached[0] is not table:
            cached = (table, tuple(libraryvalues.converter(c) for c in ev.columns))
            self._converters[ev.table_id] = cached
        return cached[1]


_XID_EVENT, _TABLE_MAP_EVENT = BINLOG.XID_EVENT, BINLOG.TABLE_MAP_EVENT
_GTID_EVENTS = (binlog.MARIADB_GTID, binlog.MYSQL_GTID, binlog.MYSQL_GTID_TAGGED)
_WHOLE_EVENTS = frozenset({binlog.QUERY, binlog.FORMAT_DESCRIPTION, *binlog.CONTEXT_EVENTS})
_RAW_ROW_EVENTS = frozenset({binlog.TABLE_MAP, *binlog.ROW_EVENTS})  # kept whole in binlog apply mode
_UNSUPPORTED = {t: "compressed binlog events (log_bin_compress=ON) are not supported; set it OFF"
                for t in (binlog.QUERY_COMPRESSED, *binlog.ROWS_COMPRESSED)}
_FAST_ROW_KINDS = {BINLOG.WRITE_ROWS_EVENT_V1: "insert", BINLOG.UPDATE_ROWS_EVENT_V1: "update",
                   BINLOG.DELETE_ROWS_EVENT_V1: "delete", BINLOG.WRITE_ROWS_EVENT_V2: "insert",
                   BINLOG.UPDATE_ROWS_EVENT_V2: "update", BINLOG.DELETE_ROWS_EVENT_V2: "delete"}
_ROWS_V2_FIRST = BINLOG.WRITE_ROWS_EVENT_V2
_ROWS_POST_HEADER = {t: (10 if t >= _ROWS_V2_FIRST else 8) for t in _FAST_ROW_KINDS}


def _post_header_len(stream, etype: int) -> int:
    """The row event post-header length the server declared (FORMAT_DESCRIPTION)."""
    lengths = _compat.post_header_lengths(stream)
    if not lengths or etype - 1 >= len(lengths):
        return _ROWS_POST_HEADER[etype]
    return lengths[etype - 1]


def _length_coded(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 251:
        return first, pos + 1
    size = {252: 2, 253: 3, 254: 8}[first]
    return int.from_bytes(data[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def _table_key(table) -> tuple[str, ...]:
    pk = table.data["primary_key"]
    return (pk,) if isinstance(pk, str) and pk else tuple(pk or ())


_COMMIT, _HEARTBEAT = CommitRead(), HeartbeatRead()
# One dict lookup per event instead of an isinstance chain (decode is the hot path).
_TRANSLATE = {
    MariadbGtidEvent: lambda _r, ev: GtidStart(ev.gtid, standalone=bool(ev.flags & MARIADB_FL_STANDALONE)),
    GtidEvent: lambda _r, ev: GtidStart(ev.gtid, standalone=False),
    XidEvent: lambda _r, ev: _COMMIT,
    HeartbeatLogEvent: lambda _r, ev: _HEARTBEAT,
    WriteRowsEvent: BinlogReader._rows,
    UpdateRowsEvent: BinlogReader._rows,
    DeleteRowsEvent: BinlogReader._rows,
}


def _read_flavor(url: MysqlUrl) -> Flavor:
    try:
        conn = dbconn.connect(url, read_timeout=30)
    except pymysql.MySQLError as exc:
        raise SourceError(f"connect to primary {url}: {exc.args[-1] if exc.args else exc}") from exc
    try:
        return Flavor.of(conn)
    finally:
        conn.close()


def dump_refusal(url: MysqlUrl, server_id: int, gtid_set: str, flavor: Flavor) -> tuple[int, str] | None:
    """What the primary answers a dump from ``gtid_set`` with, when it refuses it (its
    error code and text, error 1236 where it purged what the position lacks); None when it
    serves it."""
    reader = BinlogReader(url, server_id, gtid_set, flavor=flavor, verbatim=True)
    try:
        reader.next_event()
    except SourceError as exc:
        return getattr(exc, "server_error", None)
    finally:
        reader.close()
    return None
