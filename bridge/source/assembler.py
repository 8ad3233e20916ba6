"""Transaction assembler (pure): binlog events in, committed transactions out.

A transaction whose changes grow past ``chunk_bytes`` is not held whole: it is
emitted as ``Chunk``s while it is read (0, 1, ... and one marked last at commit).

Boundaries, per the MariaDB and MySQL binlog formats:
- InnoDB: GTID → (BEGIN query on MySQL) → rows → Xid.
- Aria/MyISAM: GTID → rows → ``COMMIT`` query.
- DDL: GTID (MariaDB FL_STANDALONE, or MySQL without BEGIN) → one query, no Xid.
Events outside a GTID (e.g. the stream's first events) are ignored.
"""

from __future__ import annotations

from bridge.errors import RemoteProtocolError
from bridge.model import Chunk, RowChange, Statement, Transaction
from bridge.source.events import CommitRead, GtidStart, QueryRead, RowsRead, SourceEvent


DEFAULT_CHUNK_BYTES = 1 << 20


class TransactionAssembler:
    def __init__(self, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self._gtid: str | None = None
        self._standalone = False
        self._begun = False
        self._changes: list = []
        self._bytes = 0
        self._chunks = 0  # chunks already emitted for the open transaction
        self._has_statement = False

    @property
    def in_transaction(self) -> bool:
        return self._gtid is not None

    def feed(self, event: SourceEvent) -> Transaction | Chunk | None:
        if isinstance(event, RowsRead) and self._gtid is not None:  # the common case first
            self._changes.extend(_row_changes(event))
            self._bytes += encoded_bytes_bound(event)
            full = self._bytes >= self.chunk_bytes and not self._has_statement  # DDL stays whole
            return self._chunk(last=False) if full else None
        if isinstance(event, GtidStart):
            if self._gtid is not None:
                raise RemoteProtocolError(f"assemble: gtid {event.gtid} began before {self._gtid} committed")
            self._gtid, self._standalone, self._changes = event.gtid, event.standalone, []
            self._begun, self._bytes, self._chunks, self._has_statement = False, 0, 0, False
            return None
        if self._gtid is None:
            return None
        if isinstance(event, QueryRead):
            return self._query(event)
        if isinstance(event, CommitRead):
            return self._finish()
        return None

    def _chunk(self, last: bool) -> Chunk:
        chunk = Chunk(self._gtid, self._chunks, last, tuple(self._changes))
        self._chunks += 1
        self._changes, self._bytes = [], 0
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
        self._changes.append(Statement(schema=event.schema, sql=event.sql))
        self._has_statement = True
        mysql_ddl = ":" in self._gtid and not self._begun  # MySQL: no BEGIN means standalone
        return self._finish() if self._standalone or mysql_ddl else None

    def _finish(self) -> Transaction | Chunk:
        if self._chunks:
            return self._chunk(last=True)
        txn = Transaction(gtid=self._gtid, changes=tuple(self._changes))
        self._gtid, self._changes = None, []
        return txn


def encoded_bytes_bound(ev: RowsRead) -> int:
    """An upper bound of the wire size of an event's changes: the codec widens a
    binlog value at most 4x (latin1 text to utf-8, 4-byte ints to tagged 8), and
    repeats the column names per row."""
    return 4 * ev.size + len(ev.rows) * (64 + 8 * sum(len(c) for c in ev.columns))


def _row_changes(ev: RowsRead):
    for before, after in ev.rows:
        yield RowChange(ev.kind, ev.schema, ev.table, ev.columns, ev.key, before, after)
