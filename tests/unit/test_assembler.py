from bridge.model import Statement
from bridge.source.assembler import TransactionAssembler
from bridge.source.events import CommitRead, GtidStart, HeartbeatRead, QueryRead, RowsRead

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def rows(n=1):
    return RowsRead("insert", "s", "t", ("id",), ("id",), tuple((None, (i,)) for i in range(n)))


def feed(events):
    asm = TransactionAssembler()
    return [t for t in (asm.feed(e) for e in events) if t is not None]


def test_mariadb_innodb_transaction_ends_at_xid():
    txns = feed([GtidStart("0-1-5", False), rows(2), HeartbeatRead(), rows(1), CommitRead()])
    assert [(t.gtid, t.row_count) for t in txns] == [("0-1-5", 3)]


def test_mariadb_ddl_is_standalone():
    txns = feed([GtidStart("0-1-6", True), QueryRead("db", "ALTER TABLE t ADD c INT")])
    assert txns[0].changes == (Statement("db", "ALTER TABLE t ADD c INT"),) and txns[0].is_ddl


def test_aria_commit_query_ends_the_transaction():
    txns = feed([GtidStart("0-1-7", False), rows(1), QueryRead("db", "COMMIT")])
    assert txns[0].row_count == 1 and not txns[0].is_ddl


def test_mysql_begin_rows_xid_and_ddl_without_begin():
    txns = feed([GtidStart(f"{UUID}:1", False), QueryRead("", "BEGIN"), rows(1), CommitRead(),
                 GtidStart(f"{UUID}:2", False), QueryRead("db", "CREATE TABLE x (a INT)")])
    assert [t.gtid for t in txns] == [f"{UUID}:1", f"{UUID}:2"]
    assert txns[1].is_ddl


def test_events_before_the_first_gtid_are_ignored():
    assert feed([rows(1), CommitRead(), GtidStart("0-1-1", False), rows(1), CommitRead()])[0].gtid == "0-1-1"


def test_large_transaction_is_emitted_in_chunks_while_read():
    asm = TransactionAssembler(chunk_bytes=900)
    out = [asm.feed(e) for e in [GtidStart("0-1-9", False), rows(10), rows(10), rows(10), rows(3), CommitRead()]]
    chunks = [o for o in out if o is not None]
    assert all(type(c).__name__ == "Chunk" for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks))) and len(chunks) >= 3
    assert [c.last for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert sum(len(c.changes) for c in chunks) == 33 and {c.gtid for c in chunks} == {"0-1-9"}
    assert asm.feed(GtidStart("0-1-10", False)) is None and not asm.feed(CommitRead()).changes


def test_small_transaction_stays_whole():
    asm = TransactionAssembler(chunk_bytes=10**6)
    out = [asm.feed(e) for e in [GtidStart("0-1-9", False), rows(10), CommitRead()]]
    assert type(out[-1]).__name__ == "Transaction" and out[-1].row_count == 10


def test_raw_row_events_gather_and_a_chunk_cut_mid_statement_repeats_its_table_maps():
    from bridge.model import Chunk, RowEvents
    from bridge.source.events import ContextRead, RawRowEvent

    tmap, row, end = RawRowEvent(b"M" * 40, ("s", "t")), RawRowEvent(b"R" * 100, None), \
        RawRowEvent(b"E" * 100, None, statement_end=True)
    asm = TransactionAssembler(chunk_bytes=250)
    out = [asm.feed(e) for e in [GtidStart("0-1-9", False), tmap, row, row, row, end, CommitRead()]]
    chunks = [o for o in out if o is not None]
    assert [type(c) for c in chunks] == [Chunk, Chunk] and [c.last for c in chunks] == [False, True]
    first, second = chunks[0].changes[0], chunks[1].changes[0]
    assert first == RowEvents(b"M" * 40 + b"R" * 300, (("s", "t"),), 3)
    assert second == RowEvents(b"M" * 40 + b"E" * 100, (("s", "t"),), 1)  # the open statement's map again
    txn = feed([GtidStart("0-1-10", False), tmap, end, ContextRead(b"C" * 5), QueryRead("s", "UPDATE t", b"Q" * 9),
                tmap, end, CommitRead()])[0]
    assert [type(c).__name__ for c in txn.changes] == ["RowEvents", "Statement", "RowEvents"]
    assert txn.changes[1].raw == b"C" * 5 + b"Q" * 9 and txn.row_count == 2 and txn.is_ddl
