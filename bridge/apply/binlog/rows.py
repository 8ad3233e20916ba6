"""Row events into one replica connection through BINLOG statements (binlog apply mode).

The connection must have run the stream's FORMAT_DESCRIPTION through BINLOG before
any row event (once per connection, again when it changes); then the row events go
in as few round trips as the replica's max_allowed_packet allows, followed by the
caller's tail (COMMIT) in the same round trip where the server goes on after a
BINLOG. Whether it does is probed once per server (bridge.apply.binlog.build). The
channel's position rides in the last BINLOG statement as one more row event where
the replica takes it (MariaDB, bridge_meta as the bridge created it; probed once),
else as an SQL statement before the tail.
"""

from __future__ import annotations

import logging
import time

import pymysql

from bridge.apply import sql
from bridge.apply.binlog import build, mismatch
from bridge.apply.connection import GTID_AUTOMATIC, ServerInfo, apply_error, rollback, run_query, run_script
from bridge.config import MysqlUrl
from bridge.errors import ApplyError, RemoteProtocolError, TargetConnectionLost
from bridge.model import GtidSet, RowEvents
from bridge.server import catalog, dbconn
from bridge.wire import binlog, tablemap
from bridge.wire.native import hot

log = logging.getLogger(__name__)
PACKET_MARGIN = 4096  # room next to the BINLOG statements for the heartbeats and COMMIT
PROBE_TIMEOUT_S = 5.0
DENIED = (1227, 1044, 1045, 1142)
POSITION_COLUMNS_SELECT = ("SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_OCTET_LENGTH, DATETIME_PRECISION, "
                           "CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA='rdma_bridge' "
                           "AND TABLE_NAME='bridge_meta' ORDER BY ORDINAL_POSITION")


UNKNOWN_ERROR = 1105  # ER_UNKNOWN_ERROR: what BINLOG says for a row event its table cannot take
COLUMNS_SELECT = ("SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_OCTET_LENGTH, CHARACTER_SET_NAME FROM "
                  "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION")


def _table_maps(rows: list[RowEvents]) -> list[bytes]:
    """Each distinct TABLE_MAP event of the row events."""
    seen: dict[bytes, None] = {}
    for change in rows:
        for event in binlog.split_events(change.data):
            if binlog.event_type(event) == binlog.TABLE_MAP:
                seen[event] = None
    return list(seen)


def _tables_of(rows: list[RowEvents]) -> str:
    """The tables of a failed BINLOG statement, for its error message."""
    tables = sorted({f"{s}.{t}" for c in rows for s, t in c.tables})
    return f" (row events on {', '.join(tables[:5])}{' ...' if len(tables) > 5 else ''})"


class BinlogRows:
    def __init__(self, url: MysqlUrl, channel: str) -> None:
        self.url, self.channel = url, channel
        self.goes_on: bool | None = None  # the server runs statements after a BINLOG (probed once)
        self.position_table: build.PositionTable | None = None  # the position as a row event (probed once)
        self.conn: pymysql.Connection | None = None
        self.server: ServerInfo | None = None
        self._format = b""  # the FORMAT_DESCRIPTION this connection's BINLOG statements use
        self._fmt: binlog.FormatDescription | None = None
        self._position_map = b""  # the TABLE_MAP of bridge_meta, in that format

    def attach(self, conn: pymysql.Connection, server: ServerInfo) -> None:
        """A new connection: it has not seen any FORMAT_DESCRIPTION yet."""
        self.conn, self.server, self._format, self._fmt = conn, server, b"", None

    def run(self, context: str, changes, tail: list[bytes], fmt: binlog.FormatDescription | None,
            position: tuple[int, GtidSet] | None = None, head: list[bytes] = ()) -> None:
        """``head`` (GTID_NEXT), the row events, the channel's ``position`` (seq, GTID set)
        if given, then ``tail``. The caller rolls back on failure."""
        rows = [c for c in changes if isinstance(c, RowEvents)]
        if len(rows) != len(changes):
            raise RemoteProtocolError(f"{context}: decoded rows in a binlog-mode session")
        self.prepare(fmt, context)
        limit = self.server.max_allowed_packet - PACKET_MARGIN
        datas = [c.data for c in rows]
        if position is not None:
            if self.position_table is not None:
                datas.append(self._position_events(*position))
            else:
                tail = [sql.position_write(self.conn.escape, self.channel, *position)] + tail
        query = hot.one_trip(datas, tail, limit - sum(len(h) + 1 for h in head)) if self.goes_on else None
        try:
            if query is not None:  # the common case: one statement, one round trip
                run_query(self.conn, context, b";".join([*head, query]), len(head) + 1 + len(tail),
                          lambda i: _tables_of(rows) if i == len(head) else "")
                return
            for trip in self._trips([*head, *self._statements(context, datas, limit), *tail], limit):
                run_script(self.conn, context, trip,
                           lambda i, trip=trip: _tables_of(rows) if trip[i].startswith(b"BINLOG") else "")
        except ApplyError as exc:
            if exc.code != UNKNOWN_ERROR:
                raise
            raise ApplyError(f"{exc}{self._unknown_error(rows)}", exc.code) from exc

    def _unknown_error(self, rows: list[RowEvents]) -> str:
        """What makes the replica's tables refuse these row events (bridge.apply.binlog.mismatch),
        for a BINLOG that failed as 1105 "Unknown error"; '' when nothing is found."""
        found: list[str] = []
        try:
            with self.conn.cursor() as cur:
                charsets = {i: charset.lower() for i, (_, charset) in catalog.read_collations(cur).items()}
                for event in _table_maps(rows):
                    table = tablemap.parse_table_map(event, self._fmt.checksum_bytes)
                    cur.execute(COLUMNS_SELECT, (table.schema, table.table))
                    found += mismatch.explain(table, list(cur.fetchall()), charsets)
        except (pymysql.MySQLError, RemoteProtocolError) as exc:
            return f" (what differs could not be read: {exc})"
        if not found:
            return ""
        return (": the row events do not fit the replica's tables, which must be as on the primary (native "
                "replication refuses them too): " + "; ".join(dict.fromkeys(found)))

    def prepare(self, fmt: binlog.FormatDescription | None, context: str) -> None:
        """This connection ready for row events in ``fmt`` (probes on first use, so
        call it outside any replica transaction the first time)."""
        if fmt is None:
            raise RemoteProtocolError(f"{context}: raw binlog events before any FORMAT_DESCRIPTION event")
        self._use_format(fmt, context)

    def ready_for(self, fmt: binlog.FormatDescription) -> bool:
        """This connection has run ``fmt`` and takes COMMIT and the position as a row
        event in the BINLOG statement's round trip (what bridge.apply.lane writes)."""
        return self._format == fmt.event and bool(self.goes_on) and self.position_table is not None

    @property
    def position_map(self) -> bytes:
        """The TABLE_MAP of bridge_meta in this connection's format."""
        return self._position_map

    def _position_events(self, seq: int, gtids: GtidSet) -> bytes:
        return self._position_map + self.position_table.update(self.channel.encode(), seq, str(gtids).encode(),
                                                               time.time_ns() // 1000, self._fmt)

    def _statements(self, context: str, datas: list[bytes], limit: int) -> list[bytes]:
        out = []
        for batch in build.batches(datas, limit):
            size = binlog.statement_bytes(len(batch))
            if size <= limit:
                out.append(binlog.binlog_statement(batch))
            elif size // 2 <= limit:
                out += build.fragment_statements(batch)
            else:
                raise ApplyError(f"{context}: a binlog event of {len(batch)} bytes does not fit the replica's "
                                 f"max_allowed_packet ({self.server.max_allowed_packet}); raise it to at least "
                                 f"{size // 2 + PACKET_MARGIN}")
        return out

    def _trips(self, statements: list[bytes], limit: int) -> list[list[bytes]]:
        """Statements packed into round trips of at most ``limit`` bytes; on a server
        that stops after a BINLOG, each BINLOG ends its round trip."""
        trips: list[list[bytes]] = []
        size = 0
        for statement in statements:
            if trips and size + len(statement) < limit and \
                    (self.goes_on or not trips[-1][-1].startswith(b"BINLOG")):
                trips[-1].append(statement)
                size += len(statement) + 1
            else:
                trips.append([statement])
                size = len(statement)
        return trips

    def _use_format(self, fmt: binlog.FormatDescription, context: str) -> None:
        if self._format == fmt.event:
            return
        try:
            run_script(self.conn, "apply the primary's FORMAT_DESCRIPTION event", self._format_script(fmt))
        except ApplyError as exc:
            if exc.code in DENIED:
                raise ApplyError(f"{context}: {self.url.user} may not run BINLOG on the replica ({exc}): "
                                 f"GRANT BINLOG REPLAY ON *.* TO '{self.url.user}'@'<host>' (MariaDB; MySQL: "
                                 "REPLICATION_APPLIER), or start-replica --apply-mode sql", exc.code) from exc
            raise
        self._format, self._fmt = fmt.event, fmt
        if self.goes_on is None:
            self.goes_on = self._probe(fmt)
            self.position_table = self._probe_position(fmt)
        if self.position_table is not None:
            self._position_map = self.position_table.table_map(fmt)

    def _format_script(self, fmt: binlog.FormatDescription) -> list[bytes]:
        """The FORMAT_DESCRIPTION through BINLOG. On MySQL with GTIDs the event leaves
        GTID_NEXT 'NOT_YET_DETERMINED' (every later statement is then anonymous, which
        gtid_mode=ON refuses) unless a transaction is open (it may not change it then):
        run between transactions (a new format only comes between them; a read may have
        left a snapshot open, ended first), and the session's own setting put back."""
        if not self.server.takes_gtid_next:
            return [binlog.binlog_statement(fmt.event)]
        return [b"COMMIT", binlog.binlog_statement(fmt.event), GTID_AUTOMATIC]

    def _probe(self, fmt: binlog.FormatDescription) -> bool:
        """Does this server run the statements after a BINLOG of row events? One row
        into rdma_bridge.bridge_probe and a DO 1, rolled back. If the DO's answer
        never comes, the connection is lost (the caller reconnects and retries) and
        BINLOG ends every round trip from then on."""
        dbconn.raw_socket(self.conn).settimeout(PROBE_TIMEOUT_S)
        try:
            run_script(self.conn, "probe BINLOG", [binlog.binlog_statement(build.probe_events(fmt)),
                                                   b"DO 1"])
        except TargetConnectionLost:
            log.warning("replica %s stops after a BINLOG statement: COMMIT takes a round trip of its own", self.url)
            self.goes_on = False
            raise
        finally:
            sock = dbconn.raw_socket(self.conn)
            if sock is not None:
                sock.settimeout(None)
        rollback(self.conn, self.url)
        return True

    def _probe_position(self, fmt: binlog.FormatDescription) -> build.PositionTable | None:
        """Does this replica take the channel's position as a row event? MariaDB only
        (the event is MariaDB's v1 UPDATE_ROWS), and rdma_bridge.bridge_meta's leading
        columns as the bridge creates them: the update is tried, and rolled back."""
        if not self.channel.isascii():
            return None
        try:
            with self.conn.cursor() as cur:
                cur.execute(POSITION_COLUMNS_SELECT)
                table = build.position_table(list(cur.fetchall()))
        except pymysql.MySQLError as exc:
            raise apply_error(f"read the columns of rdma_bridge.bridge_meta on replica {self.url}", exc) from exc
        if table is None:
            log.warning("replica %s: rdma_bridge.bridge_meta is not as the bridge creates it: the position is "
                        "written with an SQL statement", self.url)
            return None
        events = table.table_map(fmt) + table.update(self.channel.encode(), 0, b"", 0, fmt)
        try:
            run_script(self.conn, "probe the position as a row event", [binlog.binlog_statement(events)])
        except ApplyError as exc:
            if isinstance(exc, TargetConnectionLost):
                raise
            log.warning("replica %s does not take the position as a row event (%s): it is written with an SQL "
                        "statement", self.url, exc)
            table = None
        rollback(self.conn, self.url)
        return table
