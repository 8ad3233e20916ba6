"""What the applier applies alone (mixed into bridge.apply.applier's Applier): DDL (a
barrier: marked pending, run, then the position), a `rdma-bridge repair` (its marker and
copy, then the range replaced in the same transaction as the position), and the chunks of
a large transaction (one replica transaction across them, committed with the last).
The Applier owns the state this works on: the connection, the position and format, the
open chunked transaction, the row and statement appliers.
"""

from __future__ import annotations

import logging

from bridge.apply import repairs, sql
from bridge.apply.channel import Position
from bridge.apply.connection import run_script
from bridge.errors import ApplyError
from bridge.model import Chunk, GtidSet, RowEvents, Statement, Transaction

log = logging.getLogger(__name__)


class Barriers:
    """The applier's methods for DDL, repairs and chunked transactions."""

    def _apply_repair(self, seq: int, txn: Transaction) -> None:
        """A `rdma-bridge repair` transaction: its rows (the marker, and the primary's
        rows of the range copied into ``rdma_bridge.<copy_table>``) land as usual, then,
        in the same replica transaction as the position, the replica's rows of the
        range are replaced by that copy: missing, extra, changed and duplicated rows
        all end as the primary had them at this point of the stream."""
        fmt = self.format_for(txn)
        fields = self._marker_fields(txn.changes[0], fmt)
        context = f"apply seq {seq} ({txn.gtid}): repair of {fields['db']}.{fields['tbl']}"
        gtids = self.position.gtid_set.add_text(txn.gtid)
        self._replace_range(context, fields, txn.changes, seq, gtids, fmt, self.gtid_script(txn.gtid))
        self.position, self.format = Position(seq, gtids), fmt

    def _replace_range(self, context: str, fields: dict, changes, seq: int, gtids: GtidSet, fmt,
                       gtid_script: tuple[list[bytes], list[bytes]] = ([], [])) -> None:
        """The last rows of a repair (the copy), then the replica's rows of the range
        replaced by the copy, the position and COMMIT; all rolled back on failure.
        ``gtid_script``: before the first rows and after the COMMIT (``gtid_script``;
        a repair cut in chunks set its GTID with its first chunk)."""
        head, after = gtid_script
        replace = repairs.replace_range(context, self.rules.target(fields["db"]), fields,
                                        self._position_statement(seq, gtids), self.mode == "sql")
        try:
            self._apply_rows(context, 0, changes, None, fmt, (head, []))
            run_script(self.conn, context, replace + after, lambda i: " (replacing the range)" if i < 3 else "")
        except BaseException:
            self.rollback()
            raise
        log.warning("%s: replaced the rows of %s with the primary's", context, fields["where_sql"][:200])

    def _marker_fields(self, first, fmt) -> dict:
        return repairs.marker_fields(first, self._checksum_bytes(fmt, "repair marker"))

    def apply_chunk(self, seq: int, chunk: Chunk) -> None:
        """Chunks of one transaction share one replica transaction; the last commits
        it with the position, so a crash in between leaves no trace of it."""
        expected = (self._open[1] if self._open else self.position.applied_seq) + 1
        starts = chunk.index == 0
        if seq != expected or starts != (self._open is None) or (self._open and self._open[0] != chunk.gtid):
            raise ApplyError(f"apply chunk {chunk.index} of {chunk.gtid} at seq {seq}: out of order "
                             f"(expected seq {expected}, open transaction {self._open})")
        if any(isinstance(c, Statement) for c in chunk.changes):
            raise ApplyError(f"apply chunk {chunk.index} of {chunk.gtid}: a chunked transaction holds DDL")
        fmt = self.format_for(chunk)
        gtids = self.position.gtid_set.add_text(chunk.gtid) if chunk.last else None
        if starts:  # a repair whose copy is too large for one frame: the range is replaced at its last chunk
            self._open_repair = self._marker_fields(chunk.changes[0], fmt) if chunk.is_repair else None
        self._open = (chunk.gtid, seq - 1)
        context = f"apply chunk {chunk.index} of {chunk.gtid} at seq {seq}"
        head, after = self.gtid_script(chunk.gtid)  # set with the first chunk, given back after the last
        script = (head if starts else [], after if chunk.last else [])
        try:
            # rolls the whole transaction back on failure
            if chunk.last and self._open_repair is not None:
                self._replace_range(context, self._open_repair, chunk.changes, seq, gtids, fmt, script)
            else:
                self._apply_rows(context, seq, chunk.changes, gtids, fmt, script)
        except BaseException:
            self._open = None
            raise
        if chunk.last:
            self.position, self.format = Position(seq, gtids), fmt
            self._open = None
        else:
            self._open, self._open_format = (chunk.gtid, seq), fmt

    @property
    def in_transaction(self) -> bool:
        return self._open is not None

    def abort_open(self) -> None:
        """Roll back a chunked transaction whose remaining chunks will not come."""
        if self._open is not None:
            log.warning("rolling back the partly applied transaction %s (chunks through seq %d)", *self._open)
            self._open = None
            self.rollback()

    # --- statements (DDL) ------------------------------------------------------------

    def _apply_ddl(self, seq: int, txn: Transaction, gtids: GtidSet, fmt) -> None:
        try:
            self._run_ddl(seq, txn, gtids, fmt)
        except BaseException:
            self.rollback()
            raise

    def _run_ddl(self, seq: int, txn: Transaction, gtids: GtidSet, fmt) -> None:
        after_crash = self.position.pending_ddl_seq == seq
        context = f"apply seq {seq} ({txn.gtid})"
        if self.mode == "binlog" and any(isinstance(c, RowEvents) for c in txn.changes):
            self._binlog.prepare(fmt, context)  # its first use probes and rolls back: not inside this transaction
        with self.conn.cursor() as cur:
            cur.execute(sql.DDL_PENDING, (seq, self.channel))
            self.conn.commit()
        # the GTID (where kept) is set before the first statement or rows that run: a DDL's own
        # commit takes it; statement-format DML (and MySQL's CREATE ... SELECT) stays in the
        # transaction that the position's COMMIT ends, as does a statement not replayed
        head, after = self.gtid_script(txn.gtid)
        for change in txn.changes:
            if isinstance(change, Statement):
                commits = sql.commits_implicitly(change.sql)
                if self._statements.run(context, change, fmt, self.mode, self.same_flavor, after_crash, head,
                                        after if commits else []):
                    head, after = [], [] if commits else after
            elif isinstance(change, RowEvents):
                self._binlog.run(context, [change], [], fmt, head=head)
                head = []
            else:
                self._sql.run(context, seq, [change], None, head=head)
                head = []
        run_script(self.conn, context, [*head, self._position_statement(seq, gtids), b"COMMIT", *after])
