"""Where the primary and the channel's replica are in GTID terms, and the one loop that
waits until the replica holds a position (the checksum, repair, the demo): it ends at
once, saying where and why, when the channel's applying stopped."""

from __future__ import annotations

import time
from collections.abc import Callable

import pymysql

from bridge.config import MysqlUrl
from bridge.errors import ApplyError, ConfigError
from bridge.model import GtidSet
from bridge.server import errorcodes, sqlnames
from bridge.server.flavor import Flavor


def primary_position(conn) -> GtidSet:
    """Every transaction in the primary's binlog (bridge.server.flavor says how to ask)."""
    with conn.cursor() as cur:
        cur.execute(Flavor.of(conn).gtid_position_sql)
        return GtidSet.parse(cur.fetchone()[0])


def replica_position(conn, url: MysqlUrl, channel: str, starting: bool = False) -> GtidSet:
    """The GTID set the channel's replica side recorded; ``starting``: a channel not
    registered yet (its bridge is starting) holds nothing yet, else it is an error."""
    with conn.cursor() as cur:
        try:
            cur.execute(f"SELECT gtid_set FROM {sqlnames.META} WHERE channel=%s", (channel,))
            row = cur.fetchone()
        except pymysql.ProgrammingError as exc:  # 1146: no bridge ever ran against this replica
            if exc.args[0] != errorcodes.NO_SUCH_TABLE:
                raise
            row = None
    if row:
        return GtidSet.parse(row[0])
    if starting:
        return GtidSet.parse("")
    raise ConfigError(f"the replica {url} has no bridge channel {channel!r} (is the bridge running? "
                      "--channel names it; checksum --offline checks two quiet servers)")


def applying_stopped(conn, channel: str) -> tuple | None:
    """(seq, gtid, error, until) where the channel's applying stopped, as its replica side
    records it (rdma_bridge.apply_stopped), or None."""
    with conn.cursor() as cur:
        try:
            cur.execute(f"SELECT seq, gtid, error, until_gtid FROM {sqlnames.APPLY_STOPPED} WHERE channel=%s",
                        (channel,))
        except pymysql.ProgrammingError as exc:  # 1146: a replica side of an older version
            if exc.args[0] != errorcodes.NO_SUCH_TABLE:
                raise
            return None
        return cur.fetchone()


def wait_for_replica(conn, url: MysqlUrl, channel: str, target: GtidSet, timeout_s: float,
                     on_wait: Callable[[], None] = lambda: None, alive: Callable[[], None] | None = None) -> None:
    """Until the bridge has applied ``target`` on the replica (heartbeats may take it
    past), ``on_wait`` once if it must wait. ``alive``: the bridge is ours and may be
    starting (its channel not registered yet); called each round, it raises if the
    bridge died. A channel whose applying stopped ends the wait at once, saying where
    and what goes on. The one "has the replica reached this position?" loop."""
    deadline, waited = time.monotonic() + timeout_s, False
    while not replica_position(conn, url, channel, starting=alive is not None).contains_all(target):
        stopped = applying_stopped(conn, channel)
        if stopped is not None:
            seq, gtid, error, until = stopped
            raise ApplyError(f"channel {channel!r}: applying is stopped on the replica {url} at seq {seq} ({gtid}): "
                             f"{error}; " + ("`rdma-bridge resume` there applies on" if until else
                                             f"fix the cause and run `rdma-bridge resume`, or `rdma-bridge skip "
                                             f"--gtid {gtid}` to skip that one transaction, then check again"))
        if not waited:
            on_wait()
            waited = True
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise ApplyError(f"the replica {url} did not reach {target} within {timeout_s:.0f}s; is the bridge "
                             f"running on channel {channel!r}?")
        time.sleep(0.05)
