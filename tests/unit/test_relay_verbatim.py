"""Relay mode's transactions as the primary wrote them: grouped whole from a dump's
events (bridge.source.verbatim), carried by the codec, and served by the relay's feed
(bridge.relay.feed) from a replica's GTID position, each dump opened with a ROTATE and
the FORMAT_DESCRIPTION."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from bridge.errors import RemoteProtocolError
from bridge.model import Chunk, GtidSet, Transaction, Verbatim
from bridge.relay import events
from bridge.relay.feed import TransactionFeed
from bridge.relay.server import DumpRequest, FeedError, FeedGone
from bridge.source.verbatim import VerbatimGrouper
from bridge.wire.codec import decode_chunk, decode_transaction, encode_chunk, encode_transaction
from tests.binlog_packets import binlog_event, binlog_transaction

FORMAT = binlog_event(15, struct.pack("<H", 4) + b"10.11.6-MariaDB".ljust(50, b"\0") + bytes(4) + b"\x13" +
                      bytes(40) + b"\x01", next_position=256)


def _group(txns: list[list[bytes]], chunk_bytes: int = 1 << 20, file: str = "bin.000001") -> list:
    grouper, out = VerbatimGrouper(checksum_bytes=4, chunk_bytes=chunk_bytes, file=file), []
    for events_ in txns:
        for e in events_:
            item = grouper.feed(e)
            if item is not None:
                out.append(item)
    return out


def test_each_transaction_is_kept_byte_for_byte_from_its_gtid_to_its_commit():
    txns = [binlog_transaction(5, rows=3), binlog_transaction(6, flags=1), binlog_transaction(7, mysql=True),
            binlog_transaction(8)]
    grouped = _group(txns)
    assert [t.gtid for t in grouped] == ["0-1-5", "0-1-6", "00010203-0405-0607-0809-0a0b0c0d0e0f:7", "0-1-8"]
    for txn, events_ in zip(grouped, txns):
        assert txn.changes == (Verbatim("bin.000001", b"".join(events_), len(events_)),)
        assert decode_transaction(encode_transaction(txn)) == txn  # as a frame carries it


def test_a_rotate_between_transactions_names_the_file_of_the_next_and_is_not_shipped():
    rotate = events.rotate("bin.000002", 4, 1, True)
    grouped = _group([binlog_transaction(5), [rotate, FORMAT], binlog_transaction(6)])
    assert [t.changes[0].file for t in grouped] == ["bin.000001", "bin.000002"]
    assert all(rotate not in t.changes[0].data for t in grouped)


def test_a_long_transaction_leaves_in_chunks_that_join_to_its_events():
    events_ = binlog_transaction(9, rows=40)
    chunks = _group([events_], chunk_bytes=200)
    assert len(chunks) > 2 and all(isinstance(c, Chunk) for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks))) and [c.last for c in chunks][-1]
    assert b"".join(c.changes[0].data for c in chunks) == b"".join(events_)
    assert all(decode_chunk(encode_chunk(c)) == c for c in chunks)


def test_a_transaction_without_a_gtid_or_a_gtid_inside_another_is_refused():
    with pytest.raises(RemoteProtocolError, match="without a GTID"):
        _group([[binlog_event(34, bytes(42))]])
    with pytest.raises(RemoteProtocolError, match="began before 0-1-5 committed"):
        _group([binlog_transaction(5)[:2], binlog_transaction(6)])


def _request(state: str | None) -> DumpRequest:
    return DumpRequest("", 4, 9, True, mariadb_state=state, gtids=GtidSet.parse(state))


def test_the_feed_serves_from_the_first_transaction_the_replica_lacks_after_a_rotate_and_the_format():
    feed = TransactionFeed(FORMAT, server_id=1, before=GtidSet.parse("0-1-4"))
    for item in _group([binlog_transaction(n) for n in (5, 6, 7)]):
        feed.append(item)
    stream = feed.open(_request("0-1-6"))
    served = [stream.next(0.01) for _ in range(3)]
    assert served[0] == events.rotate("bin.000001", 4, 1, True)
    assert served[1] == FORMAT  # as the primary wrote it (a source sends it so, its position and crc too)
    assert served[2] == b"".join(binlog_transaction(7))  # a transaction's events at once: the dump packs them
    assert stream.ack_gtid == "0-1-7"  # its last event ends 0-1-7 (a semi-sync replica is asked to ACK it)
    assert stream.next(0.01) is None  # nothing more yet: the relay sends a heartbeat
    feed.append(_group([binlog_transaction(8)], file="bin.000002")[0])
    assert stream.next(0.01) == events.rotate("bin.000002", 4, 1, True)  # the file changed between two


def test_a_replica_that_lacks_what_the_feed_no_longer_keeps_is_refused_not_served_past_it():
    feed = TransactionFeed(FORMAT, server_id=1, before=GtidSet.parse("0-1-4"))
    for item in _group([binlog_transaction(n) for n in (5, 6)]):
        feed.append(item)
    with pytest.raises(FeedError, match=r"lacks transactions the relay no longer keeps \(0-1-4\)"):
        feed.open(_request("0-1-3"))  # 0-1-4 came before the feed began
    stream = feed.open(_request("0-1-4"))
    assert [stream.next(0.01) for _ in range(3)][2] == b"".join(binlog_transaction(5))
    assert feed.forget(GtidSet.parse("0-1-5")) == 1 and str(feed.before) == "0-1-5"
    with pytest.raises(FeedError, match="no longer keeps"):
        feed.open(_request("0-1-4"))  # the replica server lost 0-1-5 (its relay log, say)
    assert feed.open(_request("0-1-5")).next(0.01) == events.rotate("bin.000001", 4, 1, True)
    with pytest.raises(FeedError, match="did not arrive verbatim"):
        feed.append(Transaction("0-1-9", (object(),)))


def _served(stream, n: int) -> list[bytes]:
    return [stream.next(0.01) for _ in range(n)]


def test_a_dump_goes_on_across_a_restart_of_the_feed_from_what_it_has_sent():
    """A new session of the primary side begins the feed again from the replica server's
    executed GTIDs: an open dump skips what it already sent and goes on, without
    reconnecting; one that stopped inside a chunked transaction is closed (FeedGone), and
    the replica reconnects from its own position."""
    feed = TransactionFeed(b"", server_id=1, before=GtidSet.parse("0-1-4"))
    first = [dataclasses.replace(item, format_event=FORMAT) if n == 0 else item
             for n, item in enumerate(_group([binlog_transaction(n) for n in (5, 6)]))]
    for item in first:
        feed.append(item)
    stream = feed.open(_request("0-1-4"))
    assert _served(stream, 4)[2:] == [b"".join(binlog_transaction(5)), b"".join(binlog_transaction(6))]
    feed.restart(GtidSet.parse("0-1-5"))  # the server executed 5; the primary side reads 6 again
    again = _group([binlog_transaction(n) for n in (6, 7)])
    feed.append(dataclasses.replace(again[0], format_event=FORMAT))
    feed.append(again[1])
    assert _served(stream, 1) == [b"".join(binlog_transaction(7))]  # 6 was sent: not again
    chunks = _group([binlog_transaction(8, rows=40)], chunk_bytes=64)
    assert len(chunks) > 2
    feed.append(chunks[0])
    inside = feed.open(_request("0-1-7"))
    inside.next(0.01)
    while inside.inside is False:
        inside.next(0.01)
    feed.restart(GtidSet.parse("0-1-7"))
    with pytest.raises(FeedGone, match="inside a transaction"):
        for _ in range(100):  # the chunk's events already taken go first
            inside.next(0.01)


def test_a_dump_that_looks_before_the_new_session_brings_anything_still_sends_nothing_twice():
    """The feed begins again (a new session of the primary side) at the server's executed
    GTIDs, behind what an open dump has sent; the dump looks while the feed is still empty
    (its own thread, a heartbeat's wakeup), and only then does the primary side's re-read
    bring those transactions again: the dump skips every one it has sent, and goes on
    after them. So does a dump that opens in between, from its relay log's position."""
    feed = TransactionFeed(FORMAT, server_id=1, before=GtidSet.parse("0-1-4"))
    for item in _group([binlog_transaction(n) for n in (5, 6, 7)]):
        feed.append(item)
    stream = feed.open(_request("0-1-4"))
    assert _served(stream, 5)[2:] == [b"".join(binlog_transaction(n)) for n in (5, 6, 7)]
    feed.restart(GtidSet.parse("0-1-5"))  # the server executed 5; the dump sent 6 and 7
    assert stream.next(0.01) is None  # nothing in the feed yet
    reconnected = feed.open(_request("0-1-7"))  # a dump that opens now, its relay log holding 6 and 7
    for item in _group([binlog_transaction(n) for n in (6, 7, 8)]):
        feed.append(item)
    assert _served(stream, 1) == [b"".join(binlog_transaction(8))] and stream.next(0.01) is None
    assert _served(reconnected, 3)[2:] == [b"".join(binlog_transaction(8))] and reconnected.next(0.01) is None


def test_past_its_bound_the_feed_drops_what_every_dump_sent_and_refuses_a_dump_that_needs_it():
    feed = TransactionFeed(FORMAT, server_id=1, before=GtidSet.parse("0-1-4"))
    chunks = _group([binlog_transaction(5, rows=40)], chunk_bytes=64)
    for item in chunks:
        feed.append(item)
    assert feed.trim(0) == 0  # no dump has sent anything: all kept (the ring then fills: backpressure)
    stream = feed.open(_request("0-1-4"))
    while stream.at < 2:
        stream.next(0.01)
    assert feed.trim(0) == 2 and feed.kept == len(chunks) - 2
    with pytest.raises(FeedError, match="lacks the start of transaction 0-1-5"):
        feed.open(_request("0-1-4"))  # the replica lost its relay log: the primary side reads it again
    assert str(feed.before) == "0-1-4"  # a chunk dropped is not a transaction the feed passed
