"""Which tables a statement from the binlog (DDL, statement-format DML) names, and the
same statement with schemas renamed (pure, on the statement's bytes).

A statement is cut into tokens (quoted strings, `quoted names`, words, comments,
punctuation); MariaDB/MySQL executable comments (``/*! ... */``, ``/*M! ... */``) are
read as code. ``targets`` recognises the statements that change a table or a schema
(CREATE/ALTER/DROP/RENAME/TRUNCATE TABLE, CREATE/DROP INDEX, triggers and views by the
table they name, database statements, routines and events by their schema, INSERT /
REPLACE / UPDATE / DELETE by the first table); anything else gives ``None`` and goes
by the statement's default schema, as native replication's database filters do.
``rename`` rewrites every schema-qualified name (``shop.orders``, ```shop`.x``) and the
name in a database statement; an unqualified name follows the default schema, which
the caller renames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(rb"""
    (?P<ws>\s+)
  | (?P<exec_open>/\*M?!\d*)
  | (?P<exec_close>\*/)
  | (?P<comment>/\*.*?\*/|--[ \t][^\n]*|\#[^\n]*)
  | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<word>[A-Za-z0-9_$\x80-\xff]+)
  | (?P<punct>.)
""", re.X | re.S)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # word | quoted | string | punct (whitespace and comments are dropped)
    text: bytes
    start: int
    end: int

    @property
    def name(self) -> str:
        """An identifier's value."""
        raw = self.text[1:-1].replace(b"``", b"`") if self.kind == "quoted" else self.text
        return raw.decode("utf-8", "replace")

    @property
    def upper(self) -> str:
        return self.text.decode("latin-1").upper() if self.kind == "word" else ""


def tokens(sql: bytes) -> list[Token]:
    out = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup
        if kind in ("ws", "comment", "exec_open", "exec_close"):
            continue
        out.append(Token(kind, m.group(), m.start(), m.end()))
    return out


@dataclass(frozen=True, slots=True)
class Target:
    schema: str
    table: str  # "" for a schema-level object (database, routine, event)
    objects: bool = False  # a view, trigger, routine or event (clone creates them after the rows)


_TABLE_VERBS = {"INSERT", "REPLACE", "UPDATE", "DELETE"}
_SCHEMA_OBJECTS = {"PROCEDURE", "FUNCTION", "EVENT"}
_DEFINITION_NOISE = {"OR", "REPLACE", "ONLINE", "IGNORE", "TEMPORARY", "UNIQUE", "FULLTEXT", "SPATIAL", "AGGREGATE"}


class _Reader:
    def __init__(self, toks: list[Token], default: str) -> None:
        self.toks, self.at, self.default = toks, 0, default

    def peek(self, ahead: int = 0) -> Token | None:
        i = self.at + ahead
        return self.toks[i] if i < len(self.toks) else None

    def word(self) -> str:
        tok = self.peek()
        return tok.upper if tok is not None else ""

    def take(self, *words: str) -> bool:
        if self.word() in words:
            self.at += 1
            return True
        return False

    def skip_if_exists(self) -> None:
        if self.take("IF"):
            self.take("NOT")
            self.take("EXISTS")

    def name(self) -> Target | None:
        """``a`` or ``a.b``: (default schema, a) or (a, b)."""
        first = self.peek()
        if first is None or first.kind not in ("word", "quoted"):
            return None
        self.at += 1
        dot, second = self.peek(), self.peek(1)
        if dot is not None and dot.text == b"." and second is not None and second.kind in ("word", "quoted"):
            self.at += 2
            return Target(first.name, second.name)
        return Target(self.default, first.name)

    def names(self) -> list[Target]:
        out = []
        while (target := self.name()) is not None:
            out.append(target)
            tok = self.peek()
            if tok is None or tok.text != b",":
                break
            self.at += 1
        return out

    def skip_definer(self) -> None:
        """DEFINER=user@host, ALGORITHM=x, SQL SECURITY y before the object kind."""
        while True:
            word = self.word()
            if word in ("DEFINER", "ALGORITHM"):
                self.at += 1
                while (tok := self.peek()) is not None and tok.upper not in (
                        "VIEW", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "SQL", "ALGORITHM", "DEFINER",
                        "TABLE", "AGGREGATE"):
                    self.at += 1
            elif word == "SQL":
                self.at += 3  # SQL SECURITY DEFINER|INVOKER
            elif word in _DEFINITION_NOISE:
                self.at += 1
            else:
                return

    def find(self, word: str) -> bool:
        while (tok := self.peek()) is not None:
            self.at += 1
            if tok.upper == word:
                return True
        return False


def targets(sql: bytes, default_schema: str) -> list[Target] | None:
    """The tables (and schema-level objects) a statement changes; None when it is
    not one this recognises."""
    r = _Reader(tokens(sql), default_schema)
    verb = r.word()
    r.at += 1
    if verb in ("CREATE", "ALTER", "DROP"):
        r.skip_definer()
        kind = r.word()
        r.at += 1
        if kind in ("DATABASE", "SCHEMA"):
            r.skip_if_exists()
            tok = r.peek()
            if tok is None or tok.kind not in ("word", "quoted"):
                return [Target(default_schema, "")] if verb == "ALTER" else None  # ALTER DATABASE: the default
            return [Target(tok.name, "")]
        if kind in ("TABLE", "VIEW"):
            r.skip_if_exists()
            view = kind == "VIEW"
            if verb == "DROP":
                return [Target(t.schema, t.table, view) for t in r.names()] or None
            first = r.name()
            if first is None:
                return None
            found = [Target(first.schema, first.table, view)]
            if verb == "ALTER":  # ALTER TABLE a RENAME [TO|AS] b
                while r.find("RENAME"):
                    if r.word() in ("COLUMN", "INDEX", "KEY"):
                        continue
                    r.take("TO", "AS")
                    if (renamed := r.name()) is not None:
                        found.append(renamed)
            return found
        if kind == "INDEX":
            r.skip_if_exists()
            if not r.find("ON"):
                return None
            table = r.name()
            return [table] if table else None
        if kind == "TRIGGER":
            r.skip_if_exists()
            trigger = r.name()
            if trigger is None:
                return None
            if verb == "DROP":
                return [Target(trigger.schema, "", True)]
            if not r.find("ON"):
                return None
            table = r.name()
            return [Target(trigger.schema if table.schema == default_schema and trigger.schema != default_schema
                           else table.schema, table.table, True)] if table else None
        if kind in _SCHEMA_OBJECTS:
            r.skip_if_exists()
            obj = r.name()
            return [Target(obj.schema, "", True)] if obj else None
        return None
    if verb == "RENAME":
        if not r.take("TABLE", "TABLES"):
            return None
        found = []
        while (source := r.name()) is not None:
            found.append(source)
            r.take("TO")
            if (dest := r.name()) is not None:
                found.append(dest)
            if (tok := r.peek()) is None or tok.text != b",":
                break
            r.at += 1
        return found or None
    if verb == "TRUNCATE":
        r.take("TABLE")
        table = r.name()
        return [table] if table else None
    if verb in _TABLE_VERBS:
        while r.word() in ("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "QUICK", "IGNORE", "INTO", "FROM"):
            r.at += 1
        table = r.name()
        return [table] if table else None
    return None


def rename(sql: bytes, renames: dict[str, str]) -> bytes:
    """``sql`` with every schema-qualified reference to a renamed schema (and the name in
    CREATE/ALTER/DROP DATABASE) renamed; the bytes between names are kept as they were."""
    if not renames:
        return sql
    toks = tokens(sql)
    edits: list[tuple[int, int, bytes]] = []
    for i, tok in enumerate(toks):
        if tok.kind not in ("word", "quoted") or tok.name not in renames:
            continue
        qualified = i + 2 < len(toks) and toks[i + 1].text == b"." and (toks[i + 2].kind in ("word", "quoted")
                                                                         or toks[i + 2].text == b"*")
        after_dot = i > 0 and toks[i - 1].text == b"."
        database = _names_database(toks, i)
        if (qualified and not after_dot) or database:
            edits.append((tok.start, tok.end, _quote(renames[tok.name])))
    out, at = bytearray(), 0
    for start, end, text in edits:
        out += sql[at:start] + text
        at = end
    return bytes(out + sql[at:])


def _names_database(toks: list[Token], i: int) -> bool:
    """toks[i] is the name in CREATE/ALTER/DROP DATABASE|SCHEMA [IF [NOT] EXISTS] name."""
    j = i - 1
    while j >= 0 and toks[j].upper in ("IF", "NOT", "EXISTS"):
        j -= 1
    return j >= 1 and toks[j].upper in ("DATABASE", "SCHEMA") and toks[0].upper in ("CREATE", "ALTER", "DROP") \
        and all(t.upper in ("OR", "REPLACE") for t in toks[1:j])


def _quote(name: str) -> bytes:
    return b"`" + name.encode("utf-8").replace(b"`", b"``") + b"`"
