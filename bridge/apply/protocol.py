"""What the replica side's node asks of an applier: one connection (``Applier``,
bridge/apply/applier.py) or several workers (``ParallelApplier``, parallel.py) behind
the same members. The node holds an ``ApplierLike``; a test checks both classes have
every member named here."""

from __future__ import annotations

from typing import Protocol

from bridge.apply.channel import Position
from bridge.model import Chunk, GtidSet, Transaction


class ApplierLike(Protocol):
    # what the replica holds and how it applies
    position: Position
    stats: object  # ParallelStats of the workers; None for one connection (nothing parallel to report)

    @property
    def has_position(self) -> bool: ...

    @property
    def format(self): ...  # the FORMAT_DESCRIPTION in force (binlog mode), or None

    @property
    def server(self): ...  # the replica server's ServerInfo

    @property
    def mode(self) -> str: ...

    @property
    def rules(self): ...  # the channel's filter

    @property
    def account_statements(self) -> dict: ...

    # a session's start
    def preflight(self, mode: str) -> None: ...

    def set_mode(self, mode: str, same_flavor: bool, primary_collations: dict[int, str] | None = None) -> None: ...

    def use_account_statements(self, choice: str) -> bool: ...

    def init_position(self, gtid_set: GtidSet, explicit: bool) -> Position: ...

    def next_epoch(self) -> int: ...

    def reload_position(self) -> Position: ...

    def format_for(self, item): ...

    # applying
    def apply(self, seq: int, txn: Transaction) -> None: ...

    def apply_group(self, items: list[tuple[int, Transaction]]) -> None: ...

    def apply_chunk(self, seq: int, chunk: Chunk) -> None: ...

    def skip(self, seq: int, gtid: str, error: str, by: str, item=None) -> None: ...

    def record_stop(self, stopped: dict | None) -> None: ...

    def abort_open(self) -> None: ...

    def reconnect(self) -> Position: ...

    def close(self) -> None: ...
