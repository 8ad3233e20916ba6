"""One connection to the replica server: connect, the applier's session, scripts.

A script is a list of statements sent as ONE multi-statement round trip; one result
is read per statement, whatever the server's "more results" flag says (MariaDB's
``BINLOG`` clears it although the statements after it run: see
``bridge.apply.binlog.build``). The server stops at the first error, so a failed
script leaves its transaction open with the earlier statements' work: callers roll
back. Server errors become our ApplyError family here, named by the statement.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

import pymysql
from pymysql.constants import CLIENT

from bridge.apply import sql
from bridge.config import MysqlUrl, tls_refusal
from bridge.errors import ApplyError, LockConflict, TargetConnectionLost
from bridge.server import dbconn, errorcodes
from bridge.server.flavor import Flavor
from bridge.server.grants import global_privileges

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 10
OK_BYTES_MIN = 11  # the smallest OK packet: 4-byte header, 0x00, affected rows, insert id, status, warnings
ANSWERS_WAIT_MS = 10  # how long one wait may hold out for all the answers before reading them as they come


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version: str
    flavor: Flavor
    max_allowed_packet: int
    identity: str = ""  # host, port and server id: two replica sides of one fan-out must not share a server
    gtid_mode: str = ""  # MySQL's @@GLOBAL.gtid_mode ('' on MariaDB)

    @property
    def takes_gtid_next(self) -> bool:
        """A MySQL replica that assigns GTIDs: each replicated transaction can keep its
        primary's GTID (SET GTID_NEXT), as a native MySQL replica keeps it."""
        return self.flavor.keeps_gtids(self.gtid_mode)


GTID_AUTOMATIC = b"SET @@SESSION.GTID_NEXT='AUTOMATIC'"


def gtid_next(gtid: str) -> bytes:
    """The statement that makes the next transaction commit with the primary's ``gtid``
    (MySQL; what mysqlbinlog prints before each transaction)."""
    return b"SET @@SESSION.GTID_NEXT='" + gtid.encode() + b"'"


def session_setup(foreign_key_checks: bool) -> str:
    """The applier's session. ``foreign_key_checks``: on where rows are replayed as SQL
    (cascades must happen on the replica; switched off around the rows the primary wrote
    with it off), off in binlog mode, where each row event carries the primary's own
    setting and our own statements (repair) must not cascade."""
    # not strict: every value comes from a primary that stored it (zero dates, the ENUM
    # error value ''), and a native replica's row events are not checked against sql_mode
    return ("SET SESSION time_zone='+00:00', sql_mode='NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION', "
            f"foreign_key_checks={int(foreign_key_checks)}, autocommit=0, "
            "character_set_client=utf8mb4, collation_connection=utf8mb4_general_ci")


def connect(url: MysqlUrl, lock_wait_timeout_s: int = 0) -> tuple[pymysql.Connection, ServerInfo]:
    try:
        conn = dbconn.connect(url, read_timeout=CONNECT_TIMEOUT_S,  # a server that never greets must not hang us
                              client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.FOUND_ROWS)
    except pymysql.MySQLError as exc:
        raise apply_error(f"connect to replica {url}", exc) from exc
    # A DDL may legitimately run for hours: no read timeout once connected; TCP
    # keepalive finds a dead peer instead. (PyMySQL has no public setter for this.)
    dbconn.no_read_timeout(conn)
    _keepalive(dbconn.raw_socket(conn))
    conn.encoders = {**conn.encoders, **sql.LITERAL_ENCODERS}
    try:
        with conn.cursor() as cur:
            if lock_wait_timeout_s:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")  # MariaDB and MySQL
                cur.execute("SET SESSION innodb_lock_wait_timeout=%s", (lock_wait_timeout_s,))
            cur.execute("SELECT VERSION(), @@max_allowed_packet, CONCAT(@@hostname, ':', @@port, ' id ', @@server_id)")
            version, packet, identity = cur.fetchone()
            flavor = Flavor.of(conn)
            gtid_mode = ""
            if flavor.is_mysql:
                cur.execute("SELECT @@GLOBAL.gtid_mode")
                gtid_mode = cur.fetchone()[0]
    except pymysql.MySQLError as exc:
        raise apply_error(f"set up the session on replica {url}", exc) from exc
    return conn, ServerInfo(version, flavor, int(packet), identity, gtid_mode)


def run_script(conn: pymysql.Connection, context: str, statements: list[bytes],
               describe: Callable[[int], str] = lambda _i: "") -> None:
    """The statements in one round trip, each of which must answer OK (no rows): the
    answers are read here, not by PyMySQL, and only their first byte is looked at
    (this is once per replicated transaction)."""
    run_query(conn, context, b";".join(statements), len(statements), describe)


def run_query(conn: pymysql.Connection, context: str, query: bytes, statements: int,
              describe: Callable[[int], str] = lambda _i: "") -> None:
    """``run_script`` of statements already joined into ``query``."""
    done = 0
    try:
        waiter = _waiter(conn) if statements > 1 else None
        if waiter is not None:
            _set_lowat(conn, OK_BYTES_MIN * statements)
        dbconn.send_query(conn, query)
        if waiter is not None:
            _wait_for_answers(conn, waiter)
        for done in range(statements):
            if dbconn.next_answer(conn) != 0:  # an error answer raised the server's error
                raise ApplyError(f"{context}{describe(done)}: the statement returned rows, expected OK")
    except pymysql.MySQLError as exc:
        raise apply_error(f"{context}{describe(done)}", exc, server_notes(conn, exc)) from exc


def server_notes(conn: pymysql.Connection, exc: pymysql.MySQLError) -> str:
    """What else the server said about a failed statement (SHOW WARNINGS, as a native
    replica's Last_SQL_Error quotes them): a row event that cannot be applied often
    fails as 1105 "Unknown error" with the reason only there. '' for a lost connection."""
    code = errorcodes.code_of(exc)
    if not errorcodes.answered(code) or isinstance(exc, pymysql.InterfaceError):
        return ""  # no answer from a server that is still there: nothing to ask it (the connection may hang)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW WARNINGS")
            rows = cur.fetchall()
    except pymysql.MySQLError:
        return ""  # the connection is no longer usable: the error itself says why
    main = exc.args[-1] if exc.args else ""
    return "; ".join(f"{level} {number}: {message}" for level, number, message in rows if message != main)


def _waiter(conn: pymysql.Connection):
    """A poll object on the connection's socket where the kernel can hold a wakeup
    back until several answers are in (SO_RCVLOWAT: TCP without TLS), else None."""
    sock = dbconn.raw_socket(conn)
    cached = getattr(conn, "_bridge_waiter", None)
    if cached is not None and cached[0] is sock:
        return cached[1]
    waiter = None
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6) and not isinstance(sock, ssl.SSLSocket):
        waiter = select.poll()
        waiter.register(sock.fileno(), select.POLLIN)
    conn._bridge_waiter = (sock, waiter)
    return waiter


def _wait_for_answers(conn: pymysql.Connection, waiter) -> None:
    """One sleep for all the answers of a script instead of one per answer (the
    server sends each statement's answer as it finishes): the socket's low-water
    mark is the least those answers can weigh when all succeed, so the kernel
    wakes this thread once, when the last one is in. An error answers with fewer
    bytes now and then (one short ERR packet): the wait then ends after
    ANSWERS_WAIT_MS, as does one for a script that runs longer; the answers are
    read as they come after it. Errors of the socket itself are left to the read."""
    try:
        waiter.poll(ANSWERS_WAIT_MS)
    except OSError:
        pass  # EINTR and the like: the reads below wait as usual
    _set_lowat(conn, 1)


def _set_lowat(conn: pymysql.Connection, n: int) -> None:
    try:
        dbconn.raw_socket(conn).setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
    except (OSError, AttributeError):
        pass  # closed under us: the send or read that follows says so


def rollback(conn: pymysql.Connection, url: MysqlUrl, gtid_next: bool = False) -> None:
    """Roll back; ``gtid_next``: also give up a GTID the transaction was to commit with
    (after a ROLLBACK, MySQL refuses every statement until GTID_NEXT is set again)."""
    try:
        conn.rollback()
        if gtid_next:
            with conn.cursor() as cur:
                cur.execute(GTID_AUTOMATIC)
    except pymysql.MySQLError as exc:
        log.warning("rollback on replica %s failed: %s", url, exc)


def _keepalive(sock: socket.socket, idle_s: int = 30, interval_s: int = 10, probes: int = 3) -> None:
    """TCP keepalives, so a replica server that vanished is noticed; a unix socket
    (``?socket=`` in the URL) has none and needs none."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)


def apply_error(context: str, exc: pymysql.MySQLError, notes: str = "") -> ApplyError:
    """Our error for a server error: a lost connection is retryable, the rest is not. The
    message names the server's error number (as a native replica's Last_SQL_Errno), and
    ``notes``, what else the server said (``server_notes``)."""
    code = errorcodes.code_of(exc)
    detail = exc.args[-1] if exc.args else type(exc).__name__
    if code and not isinstance(exc, pymysql.InterfaceError):
        detail = f"error {code}: {detail}" + (f" ({notes})" if notes else "")
    refused = tls_refusal(exc)
    if refused:  # no retry mends a certificate
        return ApplyError(f"{context}: {refused}", code)
    if code == errorcodes.CANT_CONNECT:
        return TargetConnectionLost(f"{context}: cannot reach the replica: {detail}", code)
    if code in errorcodes.CONNECTION_LOST or isinstance(exc, pymysql.InterfaceError):
        return TargetConnectionLost(f"{context}: connection to the replica lost: {detail}", code)
    if code in errorcodes.LOCK_CONFLICT:
        return LockConflict(f"{context}: {detail}", code)
    return ApplyError(f"{context}: {detail}", code)


def current_grants(conn: pymysql.Connection, url: MysqlUrl) -> tuple[frozenset[str], str, str]:
    """(privileges on *.*, user, host) of the connected account (bridge.server.grants)."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            user, _, host = cur.fetchone()[0].rpartition("@")
            cur.execute("SHOW GRANTS")
            grants = global_privileges(row[0] for row in cur.fetchall())
    except pymysql.MySQLError as exc:
        raise apply_error(f"read the grants of {url.user} on replica {url}", exc) from exc
    return grants, user, host


def trigger_names(conn: pymysql.Connection, url: MysqlUrl) -> list[str]:
    """Triggers on the replica outside the system schemas, as schema.table.trigger."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT TRIGGER_SCHEMA, EVENT_OBJECT_TABLE, TRIGGER_NAME FROM information_schema.TRIGGERS "
                        "WHERE TRIGGER_SCHEMA NOT IN ('mysql', 'sys', 'information_schema', 'performance_schema', "
                        "'rdma_bridge') ORDER BY 1, 2, 3")
            return [".".join(row) for row in cur.fetchall()]
    except pymysql.MySQLError as exc:
        raise apply_error(f"list the triggers on replica {url}", exc) from exc
