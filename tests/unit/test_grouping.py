"""The replica's grouping of ring frames into one replica transaction: bounded by
transactions, rows and payload bytes; barriers (DDL) go alone, in order; nothing is
dropped or reordered across the bounds. Real frames and decoded transactions from the
codec; only the ring is replaced by a list."""

from bridge.config import MysqlUrl, ReplicaConfig
from bridge.model import RowChange, Statement, Transaction
from bridge.node.replica import ReplicaNode
from bridge.node.replicated import Picked
from bridge.wire.codec import decode_transaction, encode_transaction
from bridge.wire.frame import Frame, FrameKind


def txn(seq: int, rows: int = 1, pad: int = 0, ddl: bool = False) -> Picked:
    changes = (Statement("s", "ALTER TABLE t ADD c INT"),) if ddl else tuple(
        RowChange("insert", "s", "t", ("id", "p"), ("id",), None, (seq * 100 + i, "x" * pad)) for i in range(rows))
    payload = encode_transaction(Transaction(f"0-1-{seq}", changes))
    return Picked(Frame(FrameKind.TXN, seq, payload), decode_transaction(payload), 0)


def grouper(entries, **bounds) -> ReplicaNode:
    node = ReplicaNode.__new__(ReplicaNode)  # only the grouping state: no listener, no replica connection
    node.cfg = ReplicaConfig(target=MysqlUrl.parse("mysql://u@127.0.0.1:1"), listen=("127.0.0.1", 0), **bounds)
    node._stash, node._until = None, None
    pending = list(entries)
    node._next_decoded = lambda: pending.pop(0) if pending else None
    return node


def groups(node) -> list[list[int]]:
    out = []
    while work := node._take():
        out.append([frame.seq for frame, _, _ in work])
    return out


def test_groups_respect_each_bound_and_keep_every_frame_in_order():
    entries = [txn(i) for i in range(1, 11)]
    assert groups(grouper(entries, group_max_txns=4)) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    entries = [txn(i, rows=3) for i in range(1, 6)]
    assert groups(grouper(entries, group_max_rows=6)) == [[1, 2], [3, 4], [5]]
    entries = [txn(i, pad=1000) for i in range(1, 6)]
    size = len(entries[0][0].payload)
    assert groups(grouper(entries, group_max_bytes=2 * size)) == [[1, 2], [3, 4], [5]]


def test_a_barrier_goes_alone_between_groups():
    entries = [txn(1), txn(2), txn(3, ddl=True), txn(4), txn(5, ddl=True), txn(6, ddl=True)]
    assert groups(grouper(entries)) == [[1, 2], [3], [4], [5], [6]]


def test_bounds_scale_with_workers():
    entries = [txn(i) for i in range(1, 10)]
    assert groups(grouper(entries, group_max_txns=2, workers=4)) == [[1, 2, 3, 4, 5, 6, 7, 8], [9]]
