"""What a channel replicates (pure): ``--include`` / ``--exclude`` patterns and
``--rename-schema``, one definition for clone, the stream, checksum and verify.

A pattern is ``schema`` (every table of it) or ``schema.table``, with shell wildcards
(``*``, ``?``, ``[...]``), matched case-sensitively against the primary's names. A
table is replicated when it matches an include (or no include is given) and no
exclude. Objects that are not tables (routines, events, databases themselves) go with
their schema: replicated when some table of that schema could be. The bridge's own
schema is always replicated and never renamed, except the tables another channel owns
(checksum and repair tables named ``<kind>__<token>``, bridge.server.sqlnames): a channel
applies its own only, so channels that share a replica never collide. Renames apply
after matching: patterns always name the primary's schemas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache

from bridge.errors import ConfigError
from bridge.server.sqlnames import SCHEMA, SYSTEM_SCHEMAS, owner_token

_WILD = set("*?[")


@lru_cache(maxsize=1024)
def _split(pattern: str) -> tuple[str, str]:
    db, dot, table = pattern.partition(".")
    if not db or (dot and not table):
        raise ConfigError(f"filter pattern {pattern!r}: write schema or schema.table (wildcards * ? allowed)")
    return db, table if dot else "*"


@dataclass(frozen=True, slots=True)
class Filter:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()  # (primary schema, replica schema)
    # per transaction while a resumed clone catches up: (replica schema, table) copied at a
    # later position than the transaction's (table "": the schema's routines, views,
    # triggers and events), whose changes the replica already holds; never recorded
    copied_later: frozenset[tuple[str, str]] = field(default=frozenset(), compare=False)
    # the channel applying (bridge.server.sqlnames.channel_token): rdma_bridge tables another
    # channel owns are not its own; "" keeps them all (clone, verify); never recorded
    channel_token: str = field(default="", compare=False)

    @classmethod
    def parse(cls, include=(), exclude=(), renames=()) -> Filter:
        """From the command line: patterns, and FROM=TO texts for renames."""
        for pattern in (*include, *exclude):
            _split(pattern)
        pairs = []
        for text in renames:
            source, eq, target = text.partition("=")
            if not eq or not source or not target or _WILD & set(source + target):
                raise ConfigError(f"--rename-schema {text!r}: write FROM=TO with two schema names")
            if SCHEMA in (source, target) or source in SYSTEM_SCHEMAS or target in SYSTEM_SCHEMAS:
                raise ConfigError(f"--rename-schema {text!r}: the system schemas and {SCHEMA} keep their names")
            pairs.append((source, target))
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        for names, what in ((sources, "renamed twice"), (targets, "the target of two renames")):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ConfigError(f"--rename-schema: {', '.join(twice)} is {what}")
        return cls(tuple(dict.fromkeys(include)), tuple(dict.fromkeys(exclude)), tuple(pairs))

    @property
    def everything(self) -> bool:
        """Keeps every table under its own name (no filtering work at all)."""
        return not (self.include or self.exclude or self.renames or self.copied_later)

    def keeps(self, schema: str, table: str) -> bool:
        if schema == SCHEMA:
            return not self.foreign(table)
        if self.include and not any(_matches(p, schema, table) for p in self.include):
            return False
        return not any(_matches(p, schema, table) for p in self.exclude) and not self.holds(schema, table)

    def keeps_schema(self, schema: str) -> bool:
        """Some table of ``schema`` may be replicated: its schema-level objects are."""
        if schema == SCHEMA:
            return True
        if self.include and not any(_matches_schema(p, schema) for p in self.include):
            return False
        return not any(_split(p)[1] == "*" and _matches_schema(p, schema) for p in self.exclude) \
            and not self.holds(schema, "")

    def foreign(self, bridge_table: str) -> bool:
        """A rdma_bridge table another channel owns (never one of this channel's, nor a shared one)."""
        owner = owner_token(bridge_table)
        return bool(self.channel_token) and owner is not None and owner != self.channel_token

    def holds(self, schema: str, table: str) -> bool:
        """The replica's copy of this table ("": of the schema's objects) was made after
        the transaction at hand (``copied_later``)."""
        return bool(self.copied_later) and (self.target(schema), table) in self.copied_later

    def target(self, schema: str) -> str:
        """The replica's name of a primary schema."""
        for source, to in self.renames:
            if source == schema:
                return to
        return schema

    def source(self, schema: str) -> str | None:
        """The primary's name of a replica schema; None when the replica's schema of
        that name receives nothing (its primary namesake goes to another schema)."""
        for source, to in self.renames:
            if to == schema:
                return source
        return None if any(source == schema for source, _ in self.renames) else schema

    def narrows(self, old: Filter) -> bool:
        """Everything this keeps, ``old`` kept under the same name: a change to it
        needs no copy (tables only stop being replicated)."""
        if self.renames != old.renames:
            return False
        includes_fewer = (not old.include) or (bool(self.include) and set(self.include) <= set(old.include))
        return includes_fewer and set(old.exclude) <= set(self.exclude)

    def describe(self) -> str:
        if self.everything:
            return "every table"
        parts = [f"include {', '.join(self.include)}" if self.include else "every table"]
        if self.exclude:
            parts.append(f"exclude {', '.join(self.exclude)}")
        if self.renames:
            parts.append("rename " + ", ".join(f"{s}={t}" for s, t in self.renames))
        return "; ".join(parts)

    def to_json(self) -> str:
        return json.dumps({"include": list(self.include), "exclude": list(self.exclude),
                           "rename_schema": [f"{s}={t}" for s, t in self.renames]}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Filter:
        data = json.loads(text)
        return cls.parse(data.get("include", ()), data.get("exclude", ()), data.get("rename_schema", ()))


EVERYTHING = Filter()


@lru_cache(maxsize=65536)  # asked per row event and statement: each (pattern, table) is decided once
def _matches(pattern: str, schema: str, table: str) -> bool:
    db, tbl = _split(pattern)
    return fnmatchcase(schema, db) and fnmatchcase(table, tbl)


@lru_cache(maxsize=4096)
def _matches_schema(pattern: str, schema: str) -> bool:
    return fnmatchcase(schema, _split(pattern)[0])
