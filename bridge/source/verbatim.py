"""A binlog dump's events grouped into transactions whole, as the primary wrote them
(relay apply mode; pure): each transaction's events from its GTID event to its commit,
every event between kept byte for byte (row events, QUERY and its context events,
ANNOTATE_ROWS, ROWS_QUERY, a MySQL TRANSACTION_PAYLOAD still compressed). The replica
server's own IO thread receives them; nothing here decodes a row.

Boundaries: a GTID event opens a transaction; an XID event, a ``COMMIT`` (or
``ROLLBACK``) QUERY, an XA_PREPARE event or MySQL's TRANSACTION_PAYLOAD closes it, and
so does the QUERY of a standalone GTID (MariaDB's FL_STANDALONE, or MySQL's GTID
followed by anything but ``BEGIN``: DDL). A transaction past ``chunk_bytes`` leaves in
chunks while it is read. Events between transactions
(ROTATE, FORMAT_DESCRIPTION, GTID_LIST, BINLOG_CHECKPOINT, PREVIOUS_GTIDS) are not
shipped: a ROTATE names the file the next transaction's positions are in, and the
relay writes its own ROTATE and FORMAT_DESCRIPTION for the replica."""

from __future__ import annotations

import struct

from bridge.errors import RemoteProtocolError
from bridge.model import Chunk, Transaction, Verbatim
from bridge.wire import binlog

XA_PREPARE = 38
GTID_EVENTS = frozenset({binlog.MARIADB_GTID, binlog.MYSQL_GTID, binlog.MYSQL_GTID_TAGGED})
# an XID (InnoDB's commit), an XA PREPARE, or MySQL's compressed transaction (the whole of it, BEGIN to XID)
_CLOSING = frozenset({binlog.XID, XA_PREPARE, binlog.TRANSACTION_PAYLOAD})
DEFAULT_CHUNK_BYTES = 1 << 20
_QUERY_TEXT_AT = binlog.HEADER_BYTES + 13  # thread id, exec time, schema length, error code, status length


class VerbatimGrouper:
    """Feed each event of the dump (bytes, checksum included where the stream has one);
    a finished transaction (or a chunk of a long one) comes back."""

    def __init__(self, checksum_bytes: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES, file: str = "") -> None:
        self.checksum_bytes, self.chunk_bytes = checksum_bytes, chunk_bytes
        self.file = file  # the binlog file the stream is in (each ROTATE names the next)
        self._gtid: str | None = None
        self._standalone = self._begun = False
        self._data = bytearray()
        self._events = self._chunks = 0
        self._file_at_start = file

    @property
    def in_transaction(self) -> bool:
        return self._gtid is not None

    def feed(self, event: bytes) -> Transaction | Chunk | None:
        kind = event[4]
        if kind in GTID_EVENTS:
            if self._gtid is not None:
                raise RemoteProtocolError(f"relay: gtid {binlog.parse_gtid(event)[0]} began before {self._gtid} "
                                          "committed")
            self._gtid, self._standalone = binlog.parse_gtid(event)
            self._begun, self._events, self._chunks, self._file_at_start = False, 0, 0, self.file
            self._data = bytearray()
            return self._add(event)
        if self._gtid is None:
            if kind == binlog.ROTATE:
                self.file = binlog.rotate_target(event, self.checksum_bytes)[0]
            elif kind == binlog.MYSQL_ANONYMOUS_GTID:
                raise RemoteProtocolError("relay: the primary wrote a transaction without a GTID (gtid_mode is not ON)")
            return None  # between transactions: not shipped
        self._add(event)
        if kind in _CLOSING:
            return self._finish()
        if kind == binlog.QUERY:
            verb = self._verb(event)
            if verb == b"BEGIN":
                self._begun = True
                return None
            if verb in (b"COMMIT", b"ROLLBACK") or self._standalone or not self._begun and ":" in self._gtid:
                return self._finish()  # MySQL: a GTID without BEGIN is one statement's (DDL)
        if len(self._data) >= self.chunk_bytes:
            return self._chunk(last=False)
        return None

    def _add(self, event: bytes) -> None:
        self._data += event
        self._events += 1

    def _verb(self, event: bytes) -> bytes:
        """BEGIN, COMMIT or ROLLBACK as a QUERY event's whole text, else b"" (a statement)."""
        try:
            schema_len = event[binlog.HEADER_BYTES + 8]
            status_len = struct.unpack_from("<H", event, _QUERY_TEXT_AT - 2)[0]
        except (IndexError, struct.error) as exc:
            raise RemoteProtocolError(f"relay: a QUERY event of {len(event)} bytes is cut short") from exc
        start, end = _QUERY_TEXT_AT + status_len + schema_len + 1, len(event) - self.checksum_bytes
        return bytes(event[start:end]).strip().upper() if end - start <= 32 else b""

    def _taken(self) -> Verbatim:
        taken = Verbatim(self._file_at_start, bytes(self._data), self._events)
        self._data, self._events, self._file_at_start = bytearray(), 0, self.file
        return taken

    def _chunk(self, last: bool) -> Chunk:
        chunk = Chunk(self._gtid, self._chunks, last, (self._taken(),))
        self._chunks += 1
        if last:
            self._gtid = None
        return chunk

    def _finish(self) -> Transaction | Chunk:
        if self._chunks:
            return self._chunk(last=True)
        txn = Transaction(self._gtid, (self._taken(),))
        self._gtid = None
        return txn

