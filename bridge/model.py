"""Frozen value types shared by every stage: GTIDs, row changes, transactions.

Pure: no I/O. Both GTID forms are understood: MariaDB ``domain-server-seq`` (a
GTID set is one last position per domain, as in ``@@gtid_binlog_pos``) and MySQL
``uuid:n`` (a GTID set is intervals per source uuid, as in ``@@gtid_executed``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bridge.errors import ConfigError
from bridge.server import sqlnames

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_MYSQL_GTID = re.compile(r"^([0-9a-fA-F-]{36}(?::[A-Za-z_][A-Za-z0-9_]{0,31})?):(\d+)$")  # uuid[:tag]:n (8.4+)
_TAG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")


@dataclass(frozen=True, slots=True, order=True)
class Gtid:
    """One transaction id. MariaDB: (domain, server, seq); MySQL: (uuid, seq)."""

    domain: str  # MariaDB domain id as decimal text, or the MySQL source uuid (uuid:tag for a tagged GTID)
    seq: int
    server: int = -1  # MariaDB only; -1 for MySQL

    @property
    def is_mariadb(self) -> bool:
        return self.server >= 0

    @classmethod
    def parse(cls, text: str) -> Gtid:
        parts = text.split("-")  # the common case first: once per replicated transaction
        if len(parts) == 3 and text.isascii() and parts[0].isdigit() and parts[1].isdigit() and parts[2].isdigit():
            return cls(parts[0], int(parts[2]), int(parts[1]))  # (domain, seq, server), no keywords: faster
        text = text.strip()
        if m := _MARIADB_GTID.match(text):
            return cls(domain=m.group(1), server=int(m.group(2)), seq=int(m.group(3)))
        if m := _MYSQL_GTID.match(text):
            uuid, _, tag = m.group(1).partition(":")
            return cls(domain=uuid.lower() + (f":{tag.lower()}" if tag else ""), seq=int(m.group(2)))
        raise ConfigError(f"parse gtid: {text!r} is neither domain-server-seq nor uuid[:tag]:n")

    def __str__(self) -> str:
        if self.is_mariadb:
            return f"{self.domain}-{self.server}-{self.seq}"
        return f"{self.domain}:{self.seq}"


Intervals = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class GtidSet:
    """Executed transactions. MariaDB keeps the last Gtid per domain (strict mode
    makes seq grow within a domain); MySQL keeps closed intervals per uuid."""

    mariadb: tuple[Gtid, ...] = ()
    mysql: tuple[tuple[str, Intervals], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> GtidSet:
        text = (text or "").strip().replace("\n", "")
        if not text:
            return cls()
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if all(_MARIADB_GTID.match(p) for p in parts):
            by_domain = {g.domain: g for g in map(Gtid.parse, parts)}
            return cls(mariadb=tuple(sorted(by_domain.values(), key=_domain_key)))
        merged: dict[str, Intervals] = {}
        for part in parts:
            for key, ivs in _parse_mysql_part(part):
                for lo, hi in ivs:
                    merged[key] = _merge(merged.get(key, ()), lo, hi)
        return cls(mysql=tuple(sorted(merged.items())))

    def __str__(self) -> str:
        if self.mariadb:
            return ",".join(str(g) for g in self.mariadb)
        out: dict[str, str] = {}  # uuid -> its text: untagged intervals first, then each tag's (MySQL's form)
        for key, ivs in self.mysql:
            uuid, _, tag = key.partition(":")
            out[uuid] = out.get(uuid, uuid) + (f":{tag}" if tag else "") + "".join(_interval_text(i) for i in ivs)
        return ",".join(out.values())

    def __bool__(self) -> bool:
        return bool(self.mariadb or self.mysql)

    @property
    def tags(self) -> tuple[str, ...]:
        """MySQL 8.4+: the tags of the set's tagged GTIDs (uuid:tag:n), each once."""
        return tuple(dict.fromkeys(key.partition(":")[2] for key, _ in self.mysql if ":" in key))

    def contains(self, gtid: Gtid) -> bool:
        if gtid.is_mariadb:
            last = next((g for g in self.mariadb if g.domain == gtid.domain), None)
            return last is not None and gtid.seq <= last.seq
        ivs = dict(self.mysql).get(gtid.domain, ())
        return any(lo <= gtid.seq <= hi for lo, hi in ivs)

    def contains_all(self, other: GtidSet) -> bool:
        """Every transaction of ``other`` is in this set."""
        if not all(self.contains(g) for g in other.mariadb):
            return False
        mine = dict(self.mysql)
        return all(any(lo <= a and b <= hi for lo, hi in mine.get(uuid, ())) for uuid, ivs in other.mysql
                   for a, b in ivs)

    def add(self, gtid: Gtid) -> GtidSet:
        if gtid.is_mariadb:
            if len(self.mariadb) == 1 and self.mariadb[0].domain == gtid.domain:
                return GtidSet(mariadb=(gtid,))  # one domain: the common case, once per transaction
            kept = [g for g in self.mariadb if g.domain != gtid.domain]
            return GtidSet(mariadb=tuple(sorted([*kept, gtid], key=_domain_key)))
        found = dict(self.mysql)
        found[gtid.domain] = _merge(found.get(gtid.domain, ()), gtid.seq)
        return GtidSet(mysql=tuple(sorted(found.items())))

    def add_text(self, gtid: str) -> GtidSet:
        return self.add(Gtid.parse(gtid))

    def minus(self, other: GtidSet) -> GtidSet:
        """MySQL sets: the transactions of this set that ``other`` lacks (MariaDB's
        per-domain positions compare by domain instead: empty here)."""
        theirs = dict(other.mysql)
        left = tuple((key, kept) for key, ivs in self.mysql if (kept := _subtract(ivs, theirs.get(key, ()))))
        return GtidSet(mysql=left)

    def count(self) -> int:
        """A number that grows by one per transaction the set gains (MariaDB: the sum of
        each domain's last seq; MySQL: the transactions in its intervals)."""
        return sum(g.seq for g in self.mariadb) + sum(hi - lo + 1 for _, ivs in self.mysql for lo, hi in ivs)

    def parts(self) -> list[str]:
        """Each GTID or interval of the set on its own (``uuid:1-5``), for messages."""
        return [str(g) for g in self.mariadb] + [f"{key}{_interval_text(iv)}" for key, ivs in self.mysql for iv in ivs]


def _domain_key(g: Gtid) -> int:
    return int(g.domain)


def _parse_mysql_part(text: str) -> list[tuple[str, Intervals]]:
    """``uuid:1-5:7[:tag:1-3...]`` -> [(uuid, intervals), (uuid:tag, intervals), ...]."""
    uuid, _, rest = text.partition(":")
    if not rest or len(uuid) != 36:
        raise ConfigError(f"parse gtid set: {text!r} is not uuid[:tag]:interval[:interval]")
    found: dict[str, list[tuple[int, int]]] = {}
    key = uuid.lower()
    try:
        for piece in rest.split(":"):
            if _TAG.match(piece):
                key = f"{uuid.lower()}:{piece.lower()}"
                continue
            lo, _, hi = piece.partition("-")
            found.setdefault(key, []).append((int(lo), int(hi or lo)))
    except ValueError as exc:
        raise ConfigError(f"parse gtid set: {text!r} is not uuid[:tag]:interval[:interval]") from exc
    return [(k, tuple(sorted(ivs))) for k, ivs in found.items()]


def _subtract(ivs: Intervals, away: Intervals) -> Intervals:
    out = []
    for lo, hi in ivs:
        for a, b in away:
            if b < lo or a > hi:
                continue
            if a > lo:
                out.append((lo, a - 1))
            lo = b + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return tuple(out)


def _interval_text(iv: tuple[int, int]) -> str:
    lo, hi = iv
    return f":{lo}" if lo == hi else f":{lo}-{hi}"


def _merge(ivs: Intervals, n: int, last: int | None = None) -> Intervals:
    """``ivs`` with ``n`` (to ``last``) added, adjacent intervals joined."""
    merged: list[list[int]] = []
    for lo, hi in sorted([*ivs, (n, n if last is None else last)]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


@dataclass(frozen=True, slots=True)
class InvalidTemporal:
    """A date/datetime MySQL stores but Python cannot hold (``0000-00-00``,
    ``2020-00-10 00:00:00``): kept as its exact SQL text."""

    text: str


@dataclass(frozen=True, slots=True)
class BitValue:
    """A BIT(n) value as an unsigned integer, so it round-trips exactly."""

    value: int
    width: int


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row event row. ``key`` names the primary-key columns (empty: no key,
    match on every column of ``before``). Values follow ``columns``."""

    kind: str  # "insert" | "update" | "delete"
    schema: str
    table: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    before: tuple | None
    after: tuple | None
    flags: int = 0  # of its row event: 0x2 = the primary ran it with foreign_key_checks=0

    @property
    def foreign_key_checks(self) -> bool:
        return not self.flags & 0x2


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement replayed as text (DDL, statement-format DML): ``schema`` is the
    default database it ran in on the primary ('' for none). ``raw``: the QUERY event
    as the binlog holds it, after the INTVAR/RAND/USER_VAR events that preceded it;
    the replica replays it in the session it ran in on the primary (sql_mode,
    character set, time zone, timestamp...). Without it only ``sql`` is run."""

    schema: str
    sql: str
    raw: bytes = field(default=b"", repr=False)


@dataclass(frozen=True, slots=True)
class RowEvents:
    """Row changes as the binlog holds them (binlog apply mode): TABLE_MAP events, then
    the row events that use them, each event whole. The replica's server applies them
    itself (``BINLOG``). ``tables``: (schema, table) of each TABLE_MAP event, in order;
    ``events``: how many row events (a size for grouping, not a row count)."""

    data: bytes = field(repr=False)
    tables: tuple[tuple[str, str], ...]
    events: int


@dataclass(frozen=True, slots=True)
class Verbatim:
    """A transaction's events as the primary wrote them (relay apply mode), each whole,
    its checksum included: from its GTID event to its commit, or (a chunk) a run of them.
    The replica server's own IO thread receives them. ``file``: the primary's binlog file
    the first of them is in (their positions are that file's); ``events``: how many."""

    file: str
    data: bytes = field(repr=False)
    events: int


Change = RowChange | Statement | RowEvents | Verbatim


def starts_with_repair_marker(changes) -> bool:
    first = changes[0] if changes else None
    if isinstance(first, RowEvents):
        return bool(first.tables) and is_repair_marker(*first.tables[0])
    return isinstance(first, RowChange) and first.kind == "insert" and is_repair_marker(first.schema, first.table)


def is_repair_marker(schema: str, table: str) -> bool:
    """rdma_bridge.repairs, or a channel's own rdma_bridge.repairs__<token> (bridge.server.sqlnames.owned)."""
    return schema == REPAIR_MARKER_TABLE[0] and (table == REPAIR_MARKER_TABLE[1] or
                                                  table.startswith(REPAIR_MARKER_TABLE[1] + "__"))


@dataclass(frozen=True, slots=True)
class Transaction:
    """A committed primary transaction, in binlog order."""

    gtid: str
    changes: tuple[Change, ...] = field(default_factory=tuple)
    # (commit read from the binlog, ship start), wall-clock ns on the primary side: stage timing only
    stamps: tuple[int, int] | tuple[()] = field(default=(), compare=False)
    # the binlog's FORMAT_DESCRIPTION event, on the first frame of a stream and when it
    # changes: the replica needs it to read raw events (and its server, for BINLOG)
    format_event: bytes = field(default=b"", compare=False, repr=False)

    @property
    def is_ddl(self) -> bool:
        for c in self.changes:  # no generator: asked of every transaction the replica takes
            if type(c) is Statement:
                return True
        return False

    @property
    def row_count(self) -> int:
        return row_count(self.changes)

    @property
    def is_repair(self) -> bool:
        """A `rdma-bridge repair` transaction: it starts with its marker row."""
        return starts_with_repair_marker(self.changes)

    @property
    def is_heartbeat(self) -> bool:
        """One write of the bridge's own heartbeat row (counted apart from user transactions)."""
        if len(self.changes) != 1:
            return False
        only = self.changes[0]
        if isinstance(only, RowEvents):
            return only.tables == (HEARTBEAT_TABLE,)
        return isinstance(only, RowChange) and (only.schema, only.table) == HEARTBEAT_TABLE

    @property
    def is_barrier(self) -> bool:
        """Applied alone, never grouped or run in parallel with others."""
        return self.is_ddl or self.is_repair


REPAIR_MARKER_TABLE = tuple(sqlnames.REPAIRS.split("."))
HEARTBEAT_TABLE = tuple(sqlnames.HEARTBEAT.split("."))  # written on the primary by bridge.source.heartbeat


def row_count(changes) -> int:
    """Row changes, counting each raw row event as one (its rows are not counted)."""
    n = 0
    for c in changes:  # no generator: once per transaction the replica takes
        if type(c) is RowEvents:
            n += c.events
        elif type(c) is RowChange:
            n += 1
    return n


@dataclass(frozen=True, slots=True)
class Chunk:
    """Part of a transaction too large for one frame, shipped while it is read.
    The replica applies chunks 0..n inside one replica transaction and commits
    (with the position) at the chunk marked ``last``."""

    gtid: str
    index: int
    last: bool
    changes: tuple[Change, ...] = ()
    format_event: bytes = field(default=b"", compare=False, repr=False)

    @property
    def row_count(self) -> int:
        return row_count(self.changes)

    @property
    def is_repair(self) -> bool:
        """The first chunk of a `rdma-bridge repair` transaction whose copy is large."""
        return self.index == 0 and starts_with_repair_marker(self.changes)

