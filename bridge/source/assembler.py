"""Transaction assembler (pure): binlog events in, committed transactions out.

Boundaries, per the MariaDB and MySQL binlog formats:
- InnoDB: GTID → (BEGIN query on MySQL) → rows → Xid.
- Aria/MyISAM: GTID → rows → ``COMMIT`` query.
- DDL: GTID (MariaDB FL_STANDALONE, or MySQL without BEGIN) → one query, no Xid.
Events outside a GTID (e.g. the stream's first events) are ignored.
"""

from __future__ import annotations

from bridge.errors import RemoteProtocolError
from bridge.model import RowChange, Statement, Transaction
from bridge.source.events import CommitRead, GtidStart, QueryRead, RowsRead, SourceEvent


class TransactionAssembler:
    def __init__(self) -> None:
        self._gtid: str | None = None
        self._standalone = False
        self._begun = False
        self._changes: list = []

    @property
    def in_transaction(self) -> bool:
        return self._gtid is not None

    def feed(self, event: SourceEvent) -> Transaction | None:
        if isinstance(event, GtidStart):
            if self._gtid is not None:
                raise RemoteProtocolError(f"assemble: gtid {event.gtid} began before {self._gtid} committed")
            self._gtid, self._standalone, self._changes = event.gtid, event.standalone, []
            self._begun = False
            return None
        if self._gtid is None:
            return None
        if isinstance(event, RowsRead):
            self._changes.extend(_row_changes(event))
            return None
        if isinstance(event, QueryRead):
            return self._query(event)
        if isinstance(event, CommitRead):
            return self._finish()
        return None

    def _query(self, event: QueryRead) -> Transaction | None:
        verb = event.sql.strip().upper()
        if verb == "BEGIN":
            self._begun = True
            return None
        if verb == "COMMIT":
            return self._finish()
        self._changes.append(Statement(schema=event.schema, sql=event.sql))
        mysql_ddl = ":" in self._gtid and not self._begun  # MySQL: no BEGIN means standalone
        return self._finish() if self._standalone or mysql_ddl else None

    def _finish(self) -> Transaction:
        txn = Transaction(gtid=self._gtid, changes=tuple(self._changes))
        self._gtid, self._changes = None, []
        return txn


def _row_changes(ev: RowsRead):
    for before, after in ev.rows:
        yield RowChange(ev.kind, ev.schema, ev.table, ev.columns, ev.key, before, after)
