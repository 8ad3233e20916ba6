"""Which picked transactions apply together (bridge.node.grouping), with frames and payloads as values."""

from bridge.model import RowEvents, Statement, Transaction
from bridge.node.grouping import GroupBounds, joins
from bridge.node.scope import Picked
from bridge.wire.frame import Frame, FrameKind

ROWS = RowEvents(b"\x01" * 10, (("app", "t"),), 1)


def picked(txn, kind=FrameKind.TXN, seq=1):
    return Picked(Frame(kind, seq, b"payload", 0, 0), txn, 0)


def test_row_only_transactions_join_and_start_groups():
    a, b = picked(Transaction("0-1-1", (ROWS,))), picked(Transaction("0-1-2", (ROWS,)), seq=2)
    assert joins(a, []) and joins(b, [a])


def test_a_barrier_or_a_chunk_never_joins_nor_starts_a_group():
    ddl = picked(Transaction("0-1-1", (Statement("app", "CREATE TABLE t (id INT)"),)))
    chunk = picked(Transaction("0-1-1", (ROWS,)), kind=FrameKind.CHUNK)
    rows = picked(Transaction("0-1-2", (ROWS,)), seq=2)
    for entry in (ddl, chunk):
        assert not joins(entry, []) and not joins(entry, [rows])


def test_a_new_format_starts_a_group_but_does_not_join_one():
    first = picked(Transaction("0-1-1", (ROWS,)))
    formatted = picked(Transaction("0-1-2", (ROWS,), format_event=b"F" * 40), seq=2)
    assert joins(formatted, []) and not joins(formatted, [first])


def test_bounds_each_end_a_group():
    bounds = GroupBounds(txns=3, rows=10, payload_bytes=100)
    assert bounds.room(2, 9, 99)
    assert not bounds.room(3, 0, 0) and not bounds.room(0, 10, 0) and not bounds.room(0, 0, 100)
