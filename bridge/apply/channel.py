"""A channel's bookkeeping on the replica: its row in ``rdma_bridge.bridge_meta``
(applied seq, executed GTID set, pending DDL, session epoch) and the lock that lets
one replica side apply it at a time.

The lock is a named user lock (GET_LOCK) held by the applier's first connection for
its whole life; the server releases it when that connection ends, so a replica side
that dies never leaves it behind. The epoch grows by one at every session: frames
carry it, and frames of an older session are never applied.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import pymysql

from bridge.apply import sql
from bridge.apply.connection import apply_error, rollback
from bridge.config import MysqlUrl
from bridge.errors import ChannelLocked, StartRefused
from bridge.filter import EVERYTHING, Filter
from bridge.model import GtidSet
from bridge.server.sqlfiles import sql_statements
from bridge.server.sqlnames import APPLY_STOPPED, CHANNEL_FILTER, CLONE_STATE, META, SKIPPED, SYSTEM_SCHEMAS

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Position:
    applied_seq: int
    gtid_set: GtidSet
    pending_ddl_seq: int = 0
    recorded: bool = True  # False: the channel has no row yet


def ensure_schema(conn: pymysql.Connection) -> None:
    """The bridge's own tables, and the columns later versions added to them."""
    with conn.cursor() as cur:
        for stmt in sql_statements("bridge_schema.sql"):
            cur.execute(stmt)
        if not cur.execute(f"SHOW COLUMNS FROM {META} LIKE 'epoch'"):
            cur.execute(f"ALTER TABLE {META} ADD COLUMN epoch BIGINT UNSIGNED NOT NULL DEFAULT 0")
        if not cur.execute(f"SHOW COLUMNS FROM {SKIPPED} LIKE 'read_at'"):
            cur.execute(f"ALTER TABLE {SKIPPED} ADD COLUMN read_at TIMESTAMP(6) NULL")


def load_position(conn: pymysql.Connection, channel: str) -> Position:
    ensure_schema(conn)
    with conn.cursor() as cur:
        cur.execute(sql.POSITION_SELECT, (channel,))
        row = cur.fetchone()
    conn.commit()
    if row is None:
        return Position(0, GtidSet(), recorded=False)
    return Position(int(row[0]), GtidSet.parse(row[1]), int(row[2]))


def init_position(conn: pymysql.Connection, channel: str, gtid_set: GtidSet) -> None:
    """Where a new channel starts (seq 0), durably, before anything is applied."""
    with conn.cursor() as cur:
        cur.execute(sql.POSITION_INSERT + " ON DUPLICATE KEY UPDATE channel=channel", (channel, 0, str(gtid_set)))
    conn.commit()


def load_filter(conn: pymysql.Connection, channel: str, url: MysqlUrl) -> Filter | None:
    """The channel's recorded filter; None when it has none (every table, own names)."""
    ensure_schema(conn)
    rows = read(conn, f"SELECT rules FROM {CHANNEL_FILTER} WHERE channel=%s", (channel,),
                f"read the filter of channel {channel!r} on replica {url}")
    return Filter.from_json(rows[0][0]) if rows and rows[0][0] else None


def read(conn: pymysql.Connection, statement: str, args: tuple, what: str, end: bool = True) -> list[tuple]:
    """The rows of one query on the replica, its transaction ended (``end``); a server
    error as ours (a lost connection retryable), ``what`` saying what was being read."""
    try:
        with conn.cursor() as cur:
            cur.execute(statement, args)
            rows = list(cur.fetchall())
        if end:
            conn.commit()
    except pymysql.MySQLError as exc:
        raise apply_error(what, exc) from exc
    return rows


def refuse_unfinished_clone(conn: pymysql.Connection, channel: str, url: MysqlUrl) -> None:
    """A clone of the channel that stopped half way leaves tables half copied: nothing
    may be applied until it is resumed (or restarted) and finishes."""
    (unfinished,), = read(conn, f"SELECT COUNT(*) FROM {CLONE_STATE} WHERE channel=%s AND finished=0", (channel,),
                          f"read the clone state of channel {channel!r} on replica {url}")
    if unfinished:
        raise StartRefused(f"channel {channel!r} on replica {url}: a clone of it stopped before it finished, with "
                           "tables half copied; run the same rdma-bridge clone again to resume it (or with --restart "
                           "to start over), then start the replica side")


def save_filter(conn: pymysql.Connection, channel: str, rules: Filter, commit: bool = True) -> None:
    with conn.cursor() as cur:
        cur.execute(f"{sql.TAG}INSERT INTO {CHANNEL_FILTER} (channel, rules) VALUES (%s, %s) ON DUPLICATE KEY "
                    "UPDATE rules=VALUES(rules)", (channel, rules.to_json()))
    if commit:
        conn.commit()


def settle_filter(conn: pymysql.Connection, channel: str, url: MysqlUrl, given: Filter | None,
                  has_position: bool) -> Filter:
    """The filter the channel applies with: the one recorded, or ``given`` when there is
    none yet or it only narrows the recorded one (recorded then). A filter that would
    add tables or change a rename is refused: those tables' rows before now were never
    copied."""
    refuse_unfinished_clone(conn, channel, url)
    recorded = load_filter(conn, channel, url)
    if given is None or given == recorded:
        return recorded or EVERYTHING
    if recorded is None and not has_position:
        save_filter(conn, channel, given)
        return given
    old = recorded or EVERYTHING
    if not given.narrows(old):
        raise StartRefused(f"channel {channel!r} on replica {url} replicates {old.describe()}; the filter given "
                           f"({given.describe()}) would add tables or change a rename, whose earlier rows the "
                           "replica never received: with the replica side stopped, rdma-bridge clone --channel "
                           f"{channel} with the new --include/--exclude/--rename-schema copies the tables it adds "
                           "and records it; or give the recorded filter (or a narrower one)")
    log.warning("channel %r: filter narrowed from %s to %s: the tables left out keep their rows on the replica and "
                "get no more changes", channel, old.describe(), given.describe())
    save_filter(conn, channel, given)
    return given


def load_catch_up(conn: pymysql.Connection, channel: str, position: GtidSet,
                  url: MysqlUrl) -> dict[tuple[str, str], GtidSet]:
    """Tables (the replica's names; table '': a schema's routines, views, triggers and
    events) a resumed clone copied at a later position than the channel holds: their
    changes up to that position are already on the replica (bridge.clone.state)."""
    rows = read(conn, f"SELECT db, tbl, gtid_set FROM {CLONE_STATE} WHERE channel=%s AND finished=1", (channel,),
                f"read the clone state of channel {channel!r} on replica {url}")
    found = {(db, tbl): GtidSet.parse(gtid) for db, tbl, gtid in rows}
    return {key: gtid for key, gtid in found.items() if not position.contains_all(gtid)}


def record_skip(conn: pymysql.Connection, channel: str, seq: int, gtids: GtidSet, gtid: str, error: str,
                by: str, read_ns: int | None = None,
                gtid_script: tuple[list[bytes], list[bytes]] = ([], [])) -> None:
    """The position moved past a transaction that is not applied, and the record of
    it, in one replica transaction. ``skipped_at`` is the moment of the skip (SYSDATE:
    the session's TIMESTAMP is the last replayed event's), ``read_at`` when the primary
    side read the transaction (None: not known, a chunk). ``gtid_script``: statements
    before and after it (the applier's ``gtid_script``)."""
    head, after = gtid_script
    try:
        with conn.cursor() as cur:
            for statement in head:
                cur.execute(statement)
            cur.execute(sql.position_write(conn.escape, channel, seq, gtids).decode())
            cur.execute(f"{sql.TAG}INSERT INTO {SKIPPED} (channel, seq, gtid, error, skipped_by, skipped_at, read_at) "
                        "VALUES (%s, %s, %s, %s, %s, SYSDATE(6), FROM_UNIXTIME(%s))",
                        (channel, seq, gtid, error[:4000], by[:255], None if read_ns is None else read_ns / 1e9))
        conn.commit()
        with conn.cursor() as cur:
            for statement in after:
                cur.execute(statement)
    except pymysql.MySQLError as exc:
        rollback(conn, "the replica", gtid_next=bool(after))
        raise apply_error(f"skip seq {seq} ({gtid})", exc) from exc


def record_stop(conn: pymysql.Connection, channel: str, stopped: dict | None) -> None:
    """Where the channel's applying stopped (``Halt.status()``), or None once it goes on."""
    with conn.cursor() as cur:
        cur.execute(f"{sql.TAG}DELETE FROM {APPLY_STOPPED} WHERE channel=%s", (channel,))
        if stopped is not None:
            cur.execute(f"{sql.TAG}INSERT INTO {APPLY_STOPPED} (channel, seq, gtid, error, until_gtid, stopped_at) "
                        "VALUES (%s, %s, %s, %s, %s, SYSDATE(6))",
                        (channel, stopped["seq"], stopped["gtid"], stopped["error"][:4000], int(stopped["until"])))
    conn.commit()


def read_stop(conn: pymysql.Connection, channel: str) -> tuple | None:
    """(seq, gtid, error, until) where the channel's applying stopped, or None."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT seq, gtid, error, until_gtid FROM {APPLY_STOPPED} WHERE channel=%s", (channel,))
        return cur.fetchone()


def next_epoch(conn: pymysql.Connection, channel: str) -> int:
    """The epoch of a new session, committed before the session starts."""
    with conn.cursor() as cur:
        cur.execute(f"{sql.TAG}UPDATE {META} SET epoch = epoch + 1 WHERE channel=%s", (channel,))
        cur.execute(f"SELECT epoch FROM {META} WHERE channel=%s", (channel,))
        epoch = int(cur.fetchone()[0])
    conn.commit()
    return epoch


def lock_name(channel: str) -> str:
    name = f"rdma_bridge.channel.{channel}"
    return name if len(name) <= 64 else "rdma_bridge.channel." + hashlib.sha1(channel.encode()).hexdigest()


LOCK_WAIT_S = 2  # a connection of ours the server has not reaped yet lets go in that time


def lock_channel(conn: pymysql.Connection, channel: str, url: MysqlUrl) -> None:
    """Hold the channel for this replica side, or refuse naming who holds it."""
    name = lock_name(channel)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, %s)", (name, LOCK_WAIT_S))
            if cur.fetchone()[0] == 1:
                return
            cur.execute("SELECT IS_USED_LOCK(%s)", (name,))
            holder = cur.fetchone()[0]
            cur.execute("SELECT USER, HOST FROM information_schema.PROCESSLIST WHERE ID=%s", (holder,))
            who = cur.fetchone()
    except pymysql.MySQLError as exc:
        raise apply_error(f"lock channel {channel!r} on replica {url}", exc) from exc
    by = f"connection {holder} of {who[0]}@{who[1]}" if who else f"connection {holder}"
    raise ChannelLocked(f"channel {channel!r} on replica {url} is applied by another replica side ({by}); stop "
                        "it first, or give this one another --channel")


def other_channels(conn: pymysql.Connection, channel: str) -> list[tuple[str, str]]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT channel, gtid_set FROM {META} WHERE channel<>%s ORDER BY channel",
                    (channel,))
        return [(c, g) for c, g in cur.fetchall()]


def schemas_with_tables(conn: pymysql.Connection) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT DISTINCT TABLE_SCHEMA FROM information_schema.TABLES WHERE TABLE_SCHEMA NOT IN "
                    f"({', '.join(['%s'] * len(SYSTEM_SCHEMAS))}) ORDER BY 1", SYSTEM_SCHEMAS)
        return [row[0] for row in cur.fetchall()]
