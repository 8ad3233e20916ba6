"""Which picked transactions apply together in one replica transaction (pure).

A group holds consecutive row-only transactions already in the ring, up to bounds on
transactions, row events and payload bytes; a barrier (DDL, a repair), a chunk, or a
transaction that brings a new FORMAT_DESCRIPTION does not join one (the group has one
format, a barrier goes alone).
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.wire.frame import FrameKind


@dataclass(frozen=True, slots=True)
class GroupBounds:
    txns: int
    rows: int
    payload_bytes: int

    def room(self, txns: int, rows: int, payload_bytes: int) -> bool:
        """A group this big may take one more transaction."""
        return txns < self.txns and rows < self.rows and payload_bytes < self.payload_bytes


def joins(entry, work: list) -> bool:
    """``entry`` may join the group ``work`` (empty: it may start one); both hold
    bridge.node.scope's Picked (frame, decoded item, picked ns)."""
    return entry.frame.kind == FrameKind.TXN and not entry.item.is_barrier and \
        not (work and entry.item.format_event)
