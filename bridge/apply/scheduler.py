"""Writeset scheduler (pure): which parts of a window of transactions may run at once.

A transaction's writeset is the set of hashed (schema, table, key, values) entries
it touches: the primary key and every unique key, of both the before and the after
image. A table with no primary or unique key contributes one whole-table entry, so
all its writers conflict. String key values are folded the way the loosest MySQL
collations compare them (case, accents, trailing spaces): two values that *may*
collide on the replica's unique index get the same entry. Over-reporting a conflict
costs parallelism; under-reporting one would reorder writes, so the folding errs wide.

A window is cut into consecutive segments (one replica transaction each). Commits
stay in source order, segment after segment, so the replica still only ever shows a
prefix of the primary's history; a segment that shares an entry with an earlier one
waits for that segment's commit before it starts.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bridge.model import RowChange, RowEvents, Transaction
from bridge.wire import tablemap

# (schema, table) -> the column tuples of its primary and unique keys
UniqueKeys = Callable[[str, str], tuple[tuple[str, ...], ...]]
Item = tuple[int, Transaction]


@dataclass(frozen=True, slots=True)
class Segment:
    index: int
    items: tuple[Item, ...]
    writeset: frozenset
    waits_for: int  # index of the last earlier segment it conflicts with; -1: none
    rows: int

    @property
    def first_seq(self) -> int:
        return self.items[0][0]

    @property
    def last_seq(self) -> int:
        return self.items[-1][0]


def fold(value):
    """A key value as the loosest collation sees it."""
    if isinstance(value, str):
        decomposed = unicodedata.normalize("NFKD", value)
        return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold().rstrip(" ")
    return value


def writeset(txn: Transaction, unique_keys: UniqueKeys, checksum_bytes: int = 0) -> frozenset:
    """``checksum_bytes``: the stream's CRC32 trailer size, to read raw row events."""
    entries = set()
    for change in txn.changes:
        if isinstance(change, RowChange):
            entries.update(_row_entries(change.schema, change.table, change.columns, change.key,
                                        (change.before, change.after), unique_keys))
        elif isinstance(change, RowEvents):
            for table, _, before, after in tablemap.rows_of(change.data, checksum_bytes):
                key = tuple(table.names[i] for i in table.primary_key)
                images = tuple(None if image is None else _key_values(table, image) for image in (before, after))
                entries.update(_row_entries(table.schema, table.table, table.names, key, images, unique_keys))
    return frozenset(entries)


def _key_values(table: tablemap.TableMap, image: tuple) -> tuple:
    """A raw row image as comparable values: text of character columns (to be folded),
    the bytes of everything else (the same value is always the same bytes)."""
    return tuple(tablemap.as_text(v, c) if c is not None and v is not tablemap.ABSENT else v
                 for v, c in zip(image, table.collations))


def _row_entries(schema: str, table: str, columns, own_key, images, unique_keys: UniqueKeys):
    keys = unique_keys(schema, table) or ((own_key,) if own_key else ())
    if not keys:
        yield hash((schema, table))
        return
    index = {col: i for i, col in enumerate(columns)}
    for image in images:
        if image is None:
            continue
        for key in keys:
            try:
                values = tuple(fold(image[index[col]]) for col in key)
            except KeyError:  # a key column the row image lacks: be safe, whole table
                values = (tablemap.ABSENT,)
            if tablemap.ABSENT in values:  # (MariaDB 11 leaves generated columns out of UPDATE images)
                yield hash((schema, table))
                continue
            if None in values and key != own_key:
                continue  # NULLs never collide in a unique index
            yield hash((schema, table, key, values))


def plan(items: Sequence[Item], segments: int, unique_keys: UniqueKeys, checksum_bytes: int = 0) -> list[Segment]:
    """Cut ``items`` (consecutive row-only transactions) into at most ``segments``
    consecutive parts of about equal row counts, each with the earlier segment it
    must wait for."""
    if not items:
        return []
    rows = [max(1, txn.row_count) for _, txn in items]
    target = sum(rows) / max(1, min(segments, len(items)))
    parts: list[list[int]] = [[]]
    filled = 0
    for i, n in enumerate(rows):
        if parts[-1] and filled + n / 2 > target and len(parts) < segments:
            parts.append([])
            filled = 0
        parts[-1].append(i)
        filled += n
    out: list[Segment] = []
    for index, part in enumerate(parts):
        chosen = tuple(items[i] for i in part)
        ws = frozenset().union(*(writeset(txn, unique_keys, checksum_bytes) for _, txn in chosen))
        waits_for = next((s.index for s in reversed(out) if s.writeset & ws), -1)
        out.append(Segment(index, chosen, ws, waits_for, sum(rows[i] for i in part)))
    return out


def conflicts(segments: Sequence[Segment]) -> int:
    """How many segments had to wait for an earlier one."""
    return sum(1 for s in segments if s.waits_for >= 0)
