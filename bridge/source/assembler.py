"""Transaction assembler (pure): binlog events in, committed transactions out.

A transaction whose changes grow past ``chunk_bytes`` is not held whole: it is
emitted as ``Chunk``s while it is read (0, 1, ... and one marked last at commit).

Boundaries, per the MariaDB and MySQL binlog formats:
- InnoDB: GTID → (BEGIN query on MySQL) → rows → Xid.
- Aria/MyISAM: GTID → rows → ``COMMIT`` query.
- DDL: GTID (MariaDB FL_STANDALONE, or MySQL without BEGIN) → one query, no Xid.
Events outside a GTID (e.g. the stream's first events) are ignored.

Row events come either decoded (SQL apply mode: ``RowChange`` per row) or whole
(binlog apply mode: consecutive TABLE_MAP and row events gathered into one
``RowEvents``). A chunk boundary may fall inside a statement (a large UPDATE is many
row events under one TABLE_MAP): the next chunk then starts with that statement's
TABLE_MAP events again, since the replica's server forgets them at the end of each
``BINLOG`` statement. INTVAR/RAND/USER_VAR events travel with the QUERY they precede.
"""

from __future__ import annotations

from bridge.errors import RemoteProtocolError
from bridge.model import Chunk, RowChange, RowEvents, Statement, Transaction
from bridge.source.events import CommitRead, ContextRead, GtidStart, QueryRead, RawRowEvent, RowsRead, SourceEvent

DEFAULT_CHUNK_BYTES = 1 << 20


class _RowEventsBuilder:
    """Consecutive TABLE_MAP + row events, and the TABLE_MAPs of the statement in progress."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.tables: list[tuple[str, str]] = []
        self.events = 0
        self.statement_maps: list[RawRowEvent] = []

    def add(self, ev: RawRowEvent) -> None:
        self.data += ev.event
        if ev.table is not None:
            self.tables.append(ev.table)
            self.statement_maps.append(ev)
            return
        self.events += 1
        if ev.statement_end:
            self.statement_maps = []

    def take(self) -> RowEvents | None:
        """The gathered events; what follows starts with the open statement's TABLE_MAPs."""
        if not self.events:
            return None
        out = RowEvents(self.data, tuple(self.tables), self.events)  # handed over, not copied (chunks are large)
        self.data, self.tables, self.events = bytearray(), [], 0
        for m in self.statement_maps:
            self.data += m.event
            self.tables.append(m.table)
        return out


class TransactionAssembler:
    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self._gtid: str | None = None
        self._standalone = False
        self._begun = False
        self._changes: list = []
        self._rows = _RowEventsBuilder()
        self._context = bytearray()  # INTVAR/RAND/USER_VAR events before the next QUERY
        self._bytes = 0
        self._chunks = 0  # chunks already emitted for the open transaction
        self._has_statement = False

    @property
    def in_transaction(self) -> bool:
        return self._gtid is not None

    def feed(self, event: SourceEvent) -> Transaction | Chunk | None:
        if isinstance(event, RawRowEvent) and self._gtid is not None:  # the common cases first
            self._rows.add(event)
            self._bytes += len(event.event)
            return self._chunk(last=False) if self._chunk_due(event.table is None) else None
        if isinstance(event, RowsRead) and self._gtid is not None:
            self._changes.extend(_row_changes(event))
            self._bytes += encoded_bytes_bound(event)
            return self._chunk(last=False) if self._chunk_due(True) else None
        if isinstance(event, GtidStart):
            if self._gtid is not None:
                raise RemoteProtocolError(f"assemble: gtid {event.gtid} began before {self._gtid} committed")
            self._gtid, self._standalone, self._changes = event.gtid, event.standalone, []
            self._rows, self._context = _RowEventsBuilder(), bytearray()
            self._begun, self._bytes, self._chunks, self._has_statement = False, 0, 0, False
            return None
        if self._gtid is None:
            return None
        if isinstance(event, QueryRead):
            return self._query(event)
        if isinstance(event, ContextRead):
            self._context += event.event
            return None
        if isinstance(event, CommitRead):
            return self._finish()
        return None

    def _chunk_due(self, after_rows: bool) -> bool:
        # DDL stays whole; a cut only after row data (never between a TABLE_MAP and its rows)
        return after_rows and self._bytes >= self.chunk_bytes and not self._has_statement

    def _take_changes(self) -> tuple:
        rows = self._rows.take()
        if rows is not None:
            self._changes.append(rows)
        changes, self._changes = tuple(self._changes), []
        return changes

    def _chunk(self, last: bool) -> Chunk:
        chunk = Chunk(self._gtid, self._chunks, last, self._take_changes())
        self._chunks += 1
        self._bytes = len(self._rows.data)
        if last:
            self._gtid = None
        return chunk

    def _query(self, event: QueryRead) -> Transaction | Chunk | None:
        verb = event.sql.strip().upper()
        if verb == "BEGIN":
            self._begun = True
            return None
        if verb == "COMMIT":
            return self._finish()
        rows = self._rows.take()
        if rows is not None:
            self._changes.append(rows)
        raw = bytes(self._context) + event.raw if event.raw else b""
        self._context = bytearray()
        self._changes.append(Statement(schema=event.schema, sql=event.sql, raw=raw))
        self._has_statement = True
        mysql_ddl = ":" in self._gtid and not self._begun  # MySQL: no BEGIN means standalone
        return self._finish() if self._standalone or mysql_ddl else None

    def _finish(self) -> Transaction | Chunk:
        if self._chunks:
            return self._chunk(last=True)
        txn = Transaction(gtid=self._gtid, changes=self._take_changes())
        self._gtid = None
        return txn


def encoded_bytes_bound(ev: RowsRead) -> int:
    """An upper bound of the wire size of an event's changes: the codec widens a
    binlog value at most 4x (latin1 text to utf-8, 4-byte ints to tagged 8), and
    repeats the column names per row."""
    return 4 * ev.size + len(ev.rows) * (64 + 8 * sum(len(c) for c in ev.columns))


def _row_changes(ev: RowsRead):
    for before, after in ev.rows:
        yield RowChange(ev.kind, ev.schema, ev.table, ev.columns, ev.key, before, after, ev.flags)
