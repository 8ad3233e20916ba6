"""Replaying a QUERY event as the primary ran it (pure): the session first, then the statement.

A statement in the binlog (DDL, or DML logged as a statement) depends on the session
it ran in: sql_mode, character set, time zone, the statement's timestamp (NOW()),
auto-increment settings, foreign_key_checks, and for statement-format DML the
INTVAR/RAND/USER_VAR events logged before it. A native replica's SQL thread sets all
of that from the event before executing it; ``statements`` renders the same as SQL,
the way ``mariadb-binlog`` prints a QUERY event, ending with the statement's own
bytes in its own character_set_client. ``RESET_REPLAYED`` (with the applier's own
session setup) puts the session back afterwards.

Native replication also disables, on the replica, every scheduled event it creates
or alters (``DISABLE ON SLAVE``): ``event_to_disable`` finds the event a statement
creates or alters, so the applier can do the same right after it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from bridge.errors import ApplyError, RemoteProtocolError
from bridge.server.flavor import MYSQL_RETIRED_SQL_MODE_BITS
from bridge.server.sqlnames import quote_name
from bridge.wire import binlog

# What a replayed statement's session settings leave behind that the applier's own
# session setup (bridge.apply.connection) does not set again.
RESET_REPLAYED = (b"SET SESSION timestamp=DEFAULT, auto_increment_increment=DEFAULT, auto_increment_offset=DEFAULT, "
                  b"collation_database=DEFAULT, lc_time_names=DEFAULT, unique_checks=1, sql_auto_is_null=0")
# An INSERT_ID the statement did not use: 0 clears it on MariaDB. MySQL has no way to clear
# it (no DEFAULT) and takes 0 as the value the next AUTO_INCREMENT insert gets (measured on
# 9.7: the applier's own rdma_bridge.skipped row got id 0, the next one a duplicate), so a
# MySQL replica is left with it; a replayed insert brings its own INSERT_ID anyway.
RESET_INSERT_ID = b"SET SESSION insert_id=0"
# explicit_defaults_for_timestamp decides what a TIMESTAMP column a DDL creates becomes.
# MySQL refuses to set it inside a transaction (error 1766), where statement-format DML
# runs: it is set (and reset) only around a statement that commits implicitly (DDL).
EXPLICIT_DEFAULTS = b"SET @@session.explicit_defaults_for_timestamp="
RESET_EXPLICIT_DEFAULTS = b"SET SESSION explicit_defaults_for_timestamp=DEFAULT"
RESET_CHARSET_COLLATIONS = b"SET SESSION character_set_collations=DEFAULT"  # where the replica has it
# sql_mode bits both flavors give the same meaning (MySQL 5.7 numbering, which MariaDB
# and MySQL 8 keep); only these are replayed when the primary is of the other flavor:
# not those from bit 31 on (each flavor's own), nor those MySQL 8 retired and refuses
# (bridge.server.flavor, which also says them by name for a routine's sql_mode text).
PORTABLE_SQL_MODE = (1 << 31) - 1 & ~MYSQL_RETIRED_SQL_MODE_BITS
# Collation ids 255 and up are MySQL 8's utf8mb4_0900_* family (and newer), which MariaDB
# before 11.4 does not know: across flavors they are replayed as utf8mb4.
FIRST_MYSQL8_COLLATION = 255

@dataclass(frozen=True, slots=True)
class ReplicaCollations:
    """The collations of the replica server, to replay a statement's session by name (a
    MariaDB 11 collation id above 2047 cannot be SET as a number for every variable)."""

    by_id: Mapping[int, tuple[str, str]]  # id -> (collation, character set)
    has_charset_collations: bool = False  # @@character_set_collations (MariaDB 11.2+)
    primary_names: Mapping[int, str] = field(default_factory=dict)  # the primary's own names, for messages

    def __call__(self, collation_id: int) -> tuple[str, str] | None:
        return self.by_id.get(collation_id)

    def name(self, collation_id: int, what: str) -> tuple[str, str]:
        """(collation, character set) of an id the statement needs; an id the replica
        does not know stops applying with the primary's name for it."""
        known = self.by_id.get(collation_id)
        if known is None:
            primary = self.primary_names.get(collation_id)
            raise ApplyError(f"{what}: collation id {collation_id} "
                             f"({primary + ' on the primary' if primary else 'unnamed by the primary'}) is unknown to "
                             "the replica server: run a replica version that has it (a native replica needs it too)")
        return known


@dataclass(frozen=True, slots=True)
class Replay:
    """What to run for one QUERY event: ``session`` then ``sql`` (its own bytes), then
    ``restore`` (what the session settings leave behind, besides the applier's own setup)."""

    schema: str
    session: tuple[bytes, ...]
    sql: bytes
    text: str  # for messages
    invoker: tuple[str, str] | None = None  # (user, host) the primary ran it as, when the event says
    restore: tuple[bytes, ...] = (RESET_REPLAYED,)


_COLLATE = re.compile(rb"(?i)(\bCOLLATE\s*=?\s*)`?([A-Za-z0-9_]+)`?")


def portable_collations(statement: bytes, known: Mapping[str, str]) -> bytes:
    """``statement`` with every ``COLLATE name`` the replica lacks replaced by its
    character set's default there (``known``: the replica's collation names, lower case,
    and each character set's default under ``"charset:"`` + its name): MySQL's
    utf8mb4_0900 collations, which MariaDB before 11.4 does not have, become utf8mb4's
    default, as a statement that names no collation gets it. Unknown character sets stay."""
    def replace(m: re.Match) -> bytes:
        name = m.group(2).decode("ascii").lower()
        if name in known:
            return m.group(0)
        default = known.get("charset:" + name.split("_", 1)[0])
        return m.group(1) + default.encode() if default else m.group(0)
    return _COLLATE.sub(replace, statement)


def split_raw(raw: bytes) -> tuple[list[bytes], bytes]:
    """(context events, the QUERY event) of a ``Statement.raw``."""
    events = list(binlog.split_events(raw))
    if not events or binlog.event_type(events[-1]) != binlog.QUERY:
        raise RemoteProtocolError("statement: the raw events do not end with a QUERY event")
    return events[:-1], events[-1]


def statements(raw: bytes, checksum_bytes: int, same_flavor: bool, collations: ReplicaCollations,
               in_transaction: bool = False, mysql_replica: bool = False) -> Replay:
    """``in_transaction``: the statement runs inside a transaction (statement-format DML):
    nothing that MySQL refuses to set there (explicit_defaults_for_timestamp)."""
    context, query_event = split_raw(raw)
    q = binlog.parse_query(query_event, checksum_bytes)
    session = [*_session(q, same_flavor, collations)]
    session += [_context(binlog.parse_context(ev, checksum_bytes), collations) for ev in context]
    restore = (RESET_REPLAYED, RESET_CHARSET_COLLATIONS) if collations.has_charset_collations else (RESET_REPLAYED,)
    if not mysql_replica:
        restore += (RESET_INSERT_ID,)
    if in_transaction:
        session = [s for s in session if not s.startswith(EXPLICIT_DEFAULTS)]
    else:
        restore += (RESET_EXPLICIT_DEFAULTS,)
    return Replay(q.schema, tuple(session), q.sql, q.text, q.status.get(binlog.Q_INVOKER), restore)


def _session(q: binlog.QueryEvent, same_flavor: bool, collations: ReplicaCollations):
    if q.flags2 is not None:
        yield (b"SET @@session.foreign_key_checks=%d, @@session.sql_auto_is_null=%d, @@session.unique_checks=%d"
               % (not q.flags2 & binlog.OPTION_NO_FOREIGN_KEY_CHECKS, bool(q.flags2 & binlog.OPTION_AUTO_IS_NULL),
                  not q.flags2 & binlog.OPTION_RELAXED_UNIQUE_CHECKS))
    if q.sql_mode is not None:
        yield b"SET @@session.sql_mode=%d" % (q.sql_mode if same_flavor else q.sql_mode & PORTABLE_SQL_MODE)
    status = q.status
    if binlog.Q_AUTO_INCREMENT in status:
        yield b"SET @@session.auto_increment_increment=%d, @@session.auto_increment_offset=%d" % \
            status[binlog.Q_AUTO_INCREMENT]
    if q.charset is not None:
        yield _charset(q.charset, same_flavor, collations)
    if collations.has_charset_collations:  # the statement's, or none (an older primary's defaults), as native
        yield b"SET @@session.character_set_collations=" + _string(",".join(
            f"{collations.name(cs, 'character_set_collations')[1]}={collations.name(c, 'character_set_collations')[0]}"
            for cs, c in status.get(binlog.Q_CHARACTER_SET_COLLATIONS, ())))
    if binlog.Q_TIME_ZONE in status:
        yield b"SET @@session.time_zone=" + _string(status[binlog.Q_TIME_ZONE])
    if binlog.Q_LC_TIME_NAMES in status:
        yield b"SET @@session.lc_time_names=%d" % status[binlog.Q_LC_TIME_NAMES]
    database = status.get(binlog.Q_CHARSET_DATABASE)
    if database is not None and (same_flavor or collations(database)):
        yield b"SET @@session.collation_database=" + _string(collations.name(database, "collation_database")[0])
    explicit = status.get(binlog.Q_EXPLICIT_DEFAULTS_FOR_TIMESTAMP)  # MySQL writes it; MariaDB uses a flags2 bit
    if explicit is None and q.flags2 is not None:
        explicit = int(bool(q.flags2 & binlog.OPTION_EXPLICIT_DEF_TIMESTAMP))
    if explicit is not None:  # decides what a TIMESTAMP column without a DEFAULT becomes
        yield EXPLICIT_DEFAULTS + b"%d" % explicit
    yield b"SET TIMESTAMP=%d.%06d" % (q.timestamp, q.microseconds)


def _charset(ids: tuple[int, int, int], same_flavor: bool, collations: ReplicaCollations) -> bytes:
    """By name: character_set_client takes only a character set (a MariaDB 11 default
    collation id such as 2304 is not one), the collations any id the replica knows."""
    if not same_flavor and any(not collations(i) for i in ids):
        # a MySQL 8 collation MariaDB lacks: the bytes are utf8mb4 (all of the 0900 family are)
        known = [collations(i) for i in ids]
        charset = (known[0] or ("", "utf8mb4"))[1]
        return b"SET NAMES " + charset.encode()
    (_, client), (connection, _), (server, _) = (collations.name(i, "session of the statement") for i in ids)
    return (b"SET @@session.character_set_client=%s, @@session.collation_connection=%s, "
            b"@@session.collation_server=%s" % (_string(client), _string(connection), _string(server)))


def _context(parsed: tuple[str, object], collations: ReplicaCollations) -> bytes:
    kind, value = parsed
    if kind == "intvar":
        which, number = value
        return b"SET %s=%d" % (b"LAST_INSERT_ID" if which == 1 else b"INSERT_ID", number)
    if kind == "rand":
        return b"SET @@RAND_SEED1=%d, @@RAND_SEED2=%d" % value
    return b"SET @" + quote_name(value.name).encode() + b":=" + _user_value(value, collations)


def _user_value(v: binlog.UserVar, collations: ReplicaCollations) -> bytes:
    if v.kind == "null":
        return b"NULL"
    if v.kind == "string":
        names = collations(v.collation)
        if names is None:
            return b"X'" + v.value.hex().encode() + b"'"
        collation, charset = names
        return b"_%s X'%s' COLLATE %s" % (charset.encode(), v.value.hex().encode(), quote_name(collation).encode())
    if v.kind == "real":
        return repr(v.value).encode()
    return str(v.value).encode()


def _string(text: str) -> bytes:
    return b"'" + text.replace("\\", "\\\\").replace("'", "''").encode() + b"'"


_EVENT_DDL = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(CREATE|ALTER)\s+(?:OR\s+REPLACE\s+)?(?:DEFINER\s*=\s*(?:`[^`]*`|'[^']*'|\S+?)"
    r"(?:@(?:`[^`]*`|'[^']*'|\S+?))?\s+)?EVENT\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"(?P<name>(?:`(?:[^`]|``)*`|\w+)(?:\s*\.\s*(?:`(?:[^`]|``)*`|\w+))?)"
    r"(?:.*\bRENAME\s+TO\s+(?P<renamed>(?:`(?:[^`]|``)*`|\w+)(?:\s*\.\s*(?:`(?:[^`]|``)*`|\w+))?))?",
    re.IGNORECASE | re.DOTALL)
_DISABLED_ON_SLAVE = re.compile(r"\bDISABLE\s+ON\s+(?:SLAVE|REPLICA)\b", re.IGNORECASE)


_TRIGGER_DDL = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*CREATE\s+(?:OR\s+REPLACE\s+)?(?:DEFINER\s*=\s*\S+\s+)?TRIGGER\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?(?P<name>\S+)", re.IGNORECASE | re.DOTALL)


def created_trigger(sql: str) -> str | None:
    """The name a CREATE TRIGGER statement gives, or None for any other statement."""
    m = _TRIGGER_DDL.match(sql)
    return m.group("name") if m else None


def names_definer(sql: str) -> bool:
    """The statement names its DEFINER (else the server makes its invoker the definer)."""
    m = _EVENT_DDL.match(sql)
    return m is not None and re.search(r"\bDEFINER\s*=", sql[:m.start("name")], re.IGNORECASE) is not None


def event_to_disable(sql: str, schema: str) -> str | None:
    """The qualified name of the scheduled event a CREATE/ALTER EVENT statement leaves
    behind (its new name after RENAME TO), or None for any other statement."""
    m = _EVENT_DDL.match(sql)
    if m is None or _DISABLED_ON_SLAVE.search(sql):
        return None
    name = m.group("renamed") or m.group("name")
    parts = [p.strip() for p in re.split(r"\.(?=(?:[^`]*`[^`]*`)*[^`]*$)", name)]
    unquoted = [p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts]
    if len(unquoted) == 1:
        if not schema:
            return None
        unquoted.insert(0, schema)
    return ".".join(quote_name(p) for p in unquoted)
