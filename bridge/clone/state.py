"""``rdma_bridge.clone_state`` on the replica: per table of a channel's clone, the GTID
position its copy is of and whether it is complete; one row per schema (table ``''``)
for its routines, views, triggers and events, which are created after the rows.

A clone that stopped (killed, an error) leaves its rows with finished=0. The next clone
of the channel resumes: what was copied stays, as of its own position; the rest is
copied from a new snapshot, a later position. When the clone finishes, the channel
starts at the earliest position of any row, and the replica side, while the stream
is between that and a table's own position, leaves that table's changes out (the
replica already holds them: ``load_catch_up`` in bridge.apply.channel,
``Filter.copied_later``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from bridge.apply import channel as channel_rows
from bridge.apply.connection import apply_error
from bridge.config import MysqlUrl
from bridge.errors import ConfigError
from bridge.filter import Filter
from bridge.model import GtidSet
from bridge.server.sqlnames import CHANNEL_FILTER, CLONE_STATE


@dataclass(frozen=True, slots=True)
class Entry:
    gtid: GtidSet  # the position its copy is (or will be) of
    copied: bool


Key = tuple[str, str]  # (the replica's schema, table); table "": the schema's objects


class CloneState:
    def __init__(self, conn: pymysql.Connection, channel: str, url: MysqlUrl) -> None:
        self.conn, self.channel, self.url = conn, channel, url

    def unfinished(self) -> dict[Key, Entry]:
        """The rows of a clone of this channel that stopped before it finished."""
        rows = self._query(f"SELECT db, tbl, gtid_set, copied FROM {CLONE_STATE} WHERE channel=%s AND finished=0",
                           (self.channel,))
        return {(db, tbl): Entry(GtidSet.parse(gtid), bool(copied)) for db, tbl, gtid, copied in rows}

    def pending(self) -> Filter | None:
        """The filter the unfinished clone will give the channel."""
        rows = self._query(f"SELECT pending FROM {CHANNEL_FILTER} WHERE channel=%s", (self.channel,))
        return Filter.from_json(rows[0][0]) if rows and rows[0][0] else None

    def forget(self) -> None:
        """The unfinished clone's rows (a finished earlier clone's stay: the channel may
        still be catching up with them)."""
        self._run([(f"DELETE FROM {CLONE_STATE} WHERE channel=%s AND finished=0", (self.channel,)),
                   (f"UPDATE {CHANNEL_FILTER} SET pending=NULL WHERE channel=%s", (self.channel,))])

    def begin(self, rules: Filter, gtid: GtidSet, entries: list[Key], gone: list[Key]) -> None:
        """Before anything is created: the filter the channel will have, and every table,
        view and schema (its objects: table '') this run copies, at ``gtid``; tables a
        stopped run listed that are gone from the primary now are marked as of ``gtid``
        too (absent)."""
        text = str(gtid)
        statements = [(f"INSERT INTO {CLONE_STATE} (channel, db, tbl, gtid_set) VALUES (%s, %s, %s, %s) ON DUPLICATE "
                       "KEY UPDATE gtid_set=VALUES(gtid_set), rows_copied=0, bytes_copied=0, copied=0, finished=0",
                       (self.channel, db, tbl, text)) for db, tbl in entries]
        statements += [(f"UPDATE {CLONE_STATE} SET gtid_set=%s, copied=1 WHERE channel=%s AND db=%s AND tbl=%s",
                        (text, self.channel, db, tbl)) for db, tbl in gone]
        statements.append((f"INSERT INTO {CHANNEL_FILTER} (channel, pending) VALUES (%s, %s) ON DUPLICATE KEY UPDATE "
                           "pending=VALUES(pending)", (self.channel, rules.to_json())))
        self._run(statements)

    def progress(self, conn: pymysql.Connection, key: Key, rows: int, nbytes: int, done: bool = False) -> None:
        """On a worker's connection: how far the copy of one table got."""
        self._run([(f"UPDATE {CLONE_STATE} SET rows_copied=%s, bytes_copied=%s, copied=%s WHERE channel=%s AND "
                    "db=%s AND tbl=%s", (rows, nbytes, int(done), self.channel, *key))], conn)

    def finish(self, objects_gtid: GtidSet, new_channel: bool) -> GtidSet:
        """In one replica transaction: the objects (views, and the schemas' routines,
        triggers and events) as of ``objects_gtid``, the clone finished, its filter the
        channel's, and a ``new_channel``'s start at the earliest position of any of its
        rows: `start-primary` streams from exactly there. Returns the start (or, adding
        tables to a channel, the channel's position, unchanged)."""
        self._run([(f"UPDATE {CLONE_STATE} SET gtid_set=%s, copied=1 WHERE channel=%s AND finished=0 AND copied=0",
                    (str(objects_gtid), self.channel)),
                   (f"UPDATE {CHANNEL_FILTER} SET rules=pending, pending=NULL WHERE channel=%s", (self.channel,))],
                  commit=False)
        if not new_channel:
            self._run([(f"UPDATE {CLONE_STATE} SET finished=1 WHERE channel=%s", (self.channel,))])
            return channel_rows.load_position(self.conn, self.channel).gtid_set
        positions = {g for (g,) in self._query(f"SELECT DISTINCT gtid_set FROM {CLONE_STATE} WHERE channel=%s",
                                                (self.channel,), end=False)}  # inside finish's transaction
        start = earliest([GtidSet.parse(g) for g in positions] or [objects_gtid])
        self._run([(f"UPDATE {CLONE_STATE} SET finished=1 WHERE channel=%s", (self.channel,))], commit=False)
        channel_rows.init_position(self.conn, self.channel, start)  # commits it all
        return start

    def _query(self, statement: str, args, end: bool = True) -> list[tuple]:
        return channel_rows.read(self.conn, statement, args, f"clone: read {CLONE_STATE} on replica {self.url}",
                                 end)

    def _run(self, statements: list[tuple[str, tuple]], conn: pymysql.Connection | None = None,
             commit: bool = True) -> None:
        conn = conn or self.conn
        try:
            with conn.cursor() as cur:
                for statement, args in statements:
                    cur.execute(statement, args)
            if commit:
                conn.commit()
        except pymysql.MySQLError as exc:
            conn.rollback()
            raise apply_error(f"clone: write {CLONE_STATE} on replica {self.url}", exc) from exc


def earliest(positions: list[GtidSet]) -> GtidSet:
    """The position every other one contains (one primary's positions over time)."""
    for p in positions:
        if all(q.contains_all(p) for q in positions):
            return p
    raise ConfigError(f"clone: the positions of the copied tables ({', '.join(map(str, positions))}) are not one "
                      "primary's history (a failover between the runs?): run clone again with --restart")
