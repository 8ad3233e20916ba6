"""Keeping a MySQL primary's GTIDs on a MySQL replica (mixed into bridge.apply.applier's
Applier): each replicated transaction commits with its primary's GTID (``SET GTID_NEXT``,
as mysqlbinlog output does), atomically with the channel's position, so the replica's
gtid_executed holds the primary's transactions, as a native replica's does; a
transaction it already holds is skipped by the server itself. MySQL allows GTID_NEXT
only outside a transaction, must have it set again after each COMMIT or ROLLBACK, and
commits the rows of a non-transactional table (MyISAM) statement by statement.
"""

from __future__ import annotations

from bridge.apply import sql
from bridge.apply.connection import GTID_AUTOMATIC, gtid_next
from bridge.model import RowEvents


class GtidKeeping:
    """The applier's GTID_NEXT decisions and scripts."""

    _gtid_next = False  # the replica can keep the primary's GTIDs (MySQL into MySQL: set_mode)

    @property
    def keeps_gtids(self) -> bool:
        """Each transaction commits with its primary's GTID: a MySQL replica with GTIDs fed
        by a MySQL primary, on a channel that replicates every table. A filtered channel
        does not (two channels may split one primary's transactions between them, and a
        GTID commits once: the channel that took it first would leave the other nothing)."""
        return self._gtid_next and self.rules.everything

    def gtid_script(self, gtid: str) -> tuple[list[bytes], list[bytes]]:
        """(before the transaction, after its COMMIT): where the replica keeps the
        primary's GTIDs, the transaction commits with ``gtid`` (a MySQL primary's, so
        gtid_executed on the replica holds the primary's transactions, and a transaction
        whose GTID it already holds is skipped by the server itself)."""
        if not self.keeps_gtids:
            return [], []
        # GTID_NEXT only outside a transaction; a read (information_schema under
        # autocommit=0) may have opened one, which holds no writes: ended first
        return [b"COMMIT", gtid_next(gtid)], [GTID_AUTOMATIC]

    @property
    def engines_known(self) -> dict[tuple[str, str], bool]:
        """{(schema, table): non-transactional} of the tables applied so far (the apply
        lane takes only those known transactional; emptied when the keys are forgotten)."""
        return self._non_transactional

    def _commits_alone(self, changes) -> bool:
        """Rows of a non-transactional table (MyISAM): MySQL commits them, and their GTID,
        at the end of their statement, so the position cannot share their transaction."""
        tables = {t for c in changes for t in (c.tables if isinstance(c, RowEvents) else ((c.schema, c.table),))}
        for table in tables:
            known = self._non_transactional.get(table)
            if known is None:
                rows = self._read(f"read the engine of {table[0]}.{table[1]}", sql.ENGINE_SELECT, table)
                known = self._non_transactional[table] = bool(rows and str(rows[0][0]).lower() in
                                                              sql.NON_TRANSACTIONAL)
            if known:
                return True
        return False
