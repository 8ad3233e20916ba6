"""The apply lane's bytes: the compiled lane (bridge.apply.lane._lane) writes what its
pure-Python twin (bridge.apply.lane) writes, byte for byte, and both write the
position events bridge.apply.binlog.build makes for the general path. And what the
lane leaves to the general path, it leaves untouched: no byte sent, no frame taken."""

import base64
import os
import socket
import threading
import time

import pytest

from bridge.apply import lane as apply_lane
from bridge.apply.binlog import build
from bridge.apply.lane import lane as twin_lane
from bridge.apply.lane import mysqlpos
from bridge.model import GtidSet, RowEvents, Statement, Transaction
from bridge.ring.layout import (
    ACK_SEQ_AT,
    DATA_OFFSET,
    HEADER,
    RING_MAGIC,
    WAITING_AT,
    WRITE_SEQ_AT,
    read_u32,
    read_u64,
    write_publish,
)
from bridge.ring.producer import RingProducer
from bridge.wire import binlog, hotpath
from bridge.wire.codec import encode_transaction
from bridge.wire.frame import HEADER_BYTES, FrameKind, frame_bytes

CLASSES = [twin_lane.Lane] + ([apply_lane.Lane] if apply_lane.COMPILED else [])


def fmt(checksum: bool, server_id: int = 7) -> binlog.FormatDescription:
    event = bytearray(100)
    event[5:9] = server_id.to_bytes(4, "little")
    return binlog.FormatDescription(bytes(event), "10.11.6-MariaDB", 4 if checksum else 0)


def make(cls, table: build.PositionTable, f: binlog.FormatDescription, channel=b"chan", engines=None):
    return cls(build.position_key(channel, table.channel_bytes), table.table_map(f), table.updated_at_digits,
               f.checksum_bytes == 4, f.server_id, engines)


@pytest.mark.parametrize("digits", [0, 1, 3, 6])
@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("gtids", ["", "0-1-5", "0-1-5,1-4-99,7-3-18446744073709551615"])
def test_position_events_are_the_general_paths(digits, checksum, gtids):
    table, f = build.PositionTable(255 if digits % 2 else 1024, digits), fmt(checksum)
    now_us = 1_764_000_000_123_456
    expected = table.table_map(f) + table.update(b"chan", 42, gtids.encode(), now_us, f)
    for cls in CLASSES:
        lane = make(cls, table, f)
        assert lane.set_position(41, GtidSet.parse(gtids))
        assert lane.gtids == str(GtidSet.parse(gtids))
        assert lane.position_events(42, now_us) == expected, cls


def test_query_is_one_binlog_statement_and_commit_byte_for_byte():
    table, f = build.PositionTable(255, 6), fmt(True)
    datas = [bytes(range(256)) * 3, b"x", b"yz", b""]
    queries = set()
    for cls in CLASSES:
        lane = make(cls, table, f)
        lane.set_position(9, GtidSet.parse("0-1-9"))
        query = lane.query(datas, 10, 1_700_000_000_000_001)
        assert query == hotpath.one_trip(datas + [lane.position_events(10, 1_700_000_000_000_001)], [b"COMMIT"],
                                         1 << 30)
        queries.add(query)
    assert len(queries) == 1


def test_a_mysql_gtid_set_is_the_lanes_only_where_it_keeps_mysql_gtids():
    for cls in CLASSES:
        lane = make(cls, build.PositionTable(255, 6), fmt(False))
        assert not lane.set_position(3, GtidSet.parse(f"{UUID}:1-5"))  # GTIDs not kept: the general path
        assert lane.set_position(3, GtidSet.parse("0-1-3")) and not lane.mysql
        lane = make(cls, build.PositionTable(255, 6), fmt(False), engines={})
        assert lane.set_position(3, GtidSet.parse(f"{UUID}:1-5")) and lane.mysql and lane.gtids == f"{UUID}:1-5"
        long_set = ",".join(f"{i:08x}-71ca-11e1-9e33-c80aa9429562:1-{i}" for i in range(1, 60))
        assert not lane.set_position(3, GtidSet.parse(long_set))  # over MYSQL_SET_MAX bytes
        assert lane.set_position(3, GtidSet.parse("0-1-3")) and not lane.mysql


UUID, OTHER = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "00000000-0000-0000-0000-00000000000a"


@pytest.mark.parametrize("text, key", [
    (f"{UUID}:1-5", UUID), (f"{UUID}:3", UUID), (f"{UUID}:1-5:7-9", UUID), (f"{UUID}:1-5,{OTHER}:1-3", UUID),
    (f"{UUID}:1-5,{OTHER}:1-3", OTHER), (f"{UUID}:1-5:tag_a:1-3:tag_b:4", f"{UUID}:tag_a"),
    (f"{UUID}:1-5:tag_a:1-3:tag_b:4", UUID), (f"{OTHER}:2-4:tag_a:9,{UUID}:1", f"{OTHER}:tag_a")])
def test_the_carried_mysql_set_reads_as_the_general_paths_set_at_each_step(text, key):
    gtids = GtidSet.parse(text)
    carried = mysqlpos.MysqlPosition(gtids)
    assert carried.text() == str(gtids).encode() and carried.follow(key)
    hi = carried.hi
    assert carried.text() == str(gtids).encode()
    for step in range(1, 4):
        gtids = gtids.add_text(f"{key}:{hi + step}")
        assert carried.text(hi + step) == str(gtids).encode()
    assert carried.next_of(f"{key}:{hi + 1}") and not carried.next_of(f"{key}:{hi + 2}")
    assert not carried.next_of(f"{key}x:{hi + 1}") and not carried.next_of(f"{key}:{hi + 1}0" + "0" * 19)
    assert not mysqlpos.MysqlPosition(gtids).follow("ffffffff-71ca-11e1-9e33-c80aa9429562")


def ring(frames, published=True):
    """A ring region holding ``frames`` (a list of Transaction) from seq 1, session epoch 3,
    published (else whole but the header's write_seq not written yet, as over rdma)."""
    producer = RingProducer(1 << 16, epoch=3)
    for txn in frames:
        producer.append(FrameKind.TXN, encode_transaction(txn))
    region = producer.region
    HEADER.pack_into(region, 0, RING_MAGIC, 0, 0, 0, 0, 1 << 16, 0)
    if published:
        write_publish(region, producer.write_seq, producer.head)
    return region


def read_query(server) -> bytes:
    """One COM_QUERY packet's body, as the replica server reads it."""
    length = int.from_bytes(server.recv(4, socket.MSG_WAITALL)[:3], "little")
    return server.recv(length, socket.MSG_WAITALL)


def packets(answers) -> bytes:
    """``answers`` (packet bodies) as the server sends them, sequence ids from 1."""
    return b"".join(len(a).to_bytes(3, "little") + bytes([i + 1]) + a for i, a in enumerate(answers))


def answering(server, answers):
    """A peer that reads one COM_QUERY and answers ``answers`` (packet bodies)."""
    got = read_query(server)
    server.sendall(packets(answers))
    return got


def tcp_pair():
    """A connected loopback TCP pair (the lane waits differently over TCP: SO_RCVLOWAT)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


def answering_split(server, answers):
    """``answering``, but the answers' bytes go out a few at a time, with pauses between."""
    got = read_query(server)
    data = packets(answers)
    for at in range(0, len(data), 3):
        server.sendall(data[at:at + 3])
        time.sleep(0.002)
    return got


OK = b"\x00\x00\x00\x02\x00\x00\x00"


def run_answered(lane, region, answers):
    """``lane.run`` over ``region`` (from seq 1, epoch 3) on a socket whose peer reads one
    query and answers ``answers``: what it returned, and the queries the peer read."""
    client, server = socket.socketpair()
    with client, server:
        server.settimeout(5)
        seen = []
        peer = threading.Thread(target=lambda: seen.append(answering(server, answers)))
        peer.start()
        ran = lane.run(region, 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20)
        peer.join(5)
    return ran, seen
ROWS = RowEvents(b"\x01" * 40, (("app", "t"),), 1)


@pytest.mark.parametrize("cls", CLASSES)
def test_run_sends_one_query_acks_the_ring_and_counts(cls):
    txns = [Transaction(f"0-1-{n}", (ROWS,), (1000 + n, 2000 + n)) for n in (6, 7, 8)]
    txns.append(Transaction("0-1-9", (RowEvents(b"\x02" * 30, (("rdma_bridge", "heartbeat"),), 1),), (5, 6)))
    region = ring(txns)
    table, f = build.PositionTable(255, 6), fmt(True)
    lane = make(cls, table, f)
    lane.set_position(0, GtidSet.parse("0-1-5"))
    ran, seen = run_answered(lane, region, [OK, OK])
    assert ran == 4
    query = seen[0]
    assert query[:1] == b"\x03" and query.endswith(b"';COMMIT")
    assert lane.seq == 4 and lane.gtids == "0-1-9" and lane.last_gtid == "0-1-9"
    assert (lane.txns, lane.beats, lane.events) == (4, 1, 4)
    assert lane.heartbeat == b"\x02" * 30
    assert read_u64(region, ACK_SEQ_AT) == 4 and lane.expected_seq == 5
    assert query[1:] == lane.query([b"\x01" * 40] * 3 + [b"\x02" * 30], 4, lane.picked_ns // 1000)


@pytest.mark.parametrize("cls", CLASSES)
def test_frames_whole_before_the_header_says_so_are_applied_and_a_torn_one_waits(cls):
    """Over rdma a placement is its frames' write alone: the lane takes each whole frame by
    its own check, and one still being written (its crc not right yet) is not there."""
    txns = [Transaction(f"0-1-{n}", (ROWS,), (1000 + n, 2000 + n)) for n in (6, 7)]
    region = ring(txns, published=False)
    torn_at = DATA_OFFSET + frame_bytes(read_u32(region, DATA_OFFSET + 4))  # the second frame's header
    region[torn_at + HEADER_BYTES + 3] ^= 0xFF  # a payload byte of frame 2 not written yet
    lane = make(cls, build.PositionTable(255, 6), fmt(False))
    lane.set_position(0, GtidSet.parse("0-1-5"))
    ran, seen = run_answered(lane, region, [OK, OK])
    assert ran == 1
    assert read_u64(region, WRITE_SEQ_AT) == 0 and read_u64(region, ACK_SEQ_AT) == 1
    assert lane.gtids == "0-1-6" and lane.expected_seq == 2 and seen[0].endswith(b"';COMMIT")


@pytest.mark.parametrize("cls", CLASSES)
def test_with_spin_us_a_frame_that_comes_while_the_run_polls_needs_no_doorbell(cls):
    """start-replica --spin-us in the lane: after its last frame the run polls the ring
    before it sleeps, so a frame placed meanwhile finds the consumer not waiting (its
    producer rings nothing) and is applied in the same run. Without it the consumer is
    asleep on the doorbell (its waiting word up)."""
    whole = ring([Transaction("0-1-6", (ROWS,), (1006, 2006))])
    for spin_us, waiting in ((900_000, 0), (0, 1)):
        region = bytearray(whole)
        region[DATA_OFFSET:] = bytes(len(region) - DATA_OFFSET)
        write_publish(region, 0, 0)
        seen_waiting = []

        def place_later():
            time.sleep(0.05)
            seen_waiting.append(read_u32(region, WAITING_AT))  # what a producer looks at before it rings
            region[DATA_OFFSET:] = whole[DATA_OFFSET:]

        lane = make(cls, build.PositionTable(255, 6), fmt(False))
        lane.set_position(0, GtidSet.parse("0-1-5"))
        doorbell = os.eventfd(0, os.EFD_NONBLOCK)  # never rung
        client, server = socket.socketpair()
        with client, server:
            server.settimeout(5)
            peer = threading.Thread(target=lambda: answering(server, [OK, OK]))
            peer.start()
            writer = threading.Thread(target=place_later)
            writer.start()
            ran = lane.run(region, 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20, doorbell, 1000, None, None, spin_us)
            writer.join(5)
            peer.join(5)
        os.close(doorbell)
        assert seen_waiting == [waiting], f"spin {spin_us} µs"
        assert ran == 1 and lane.gtids == "0-1-6"


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("answers,code", [([b"\xff\x26\x04#23000Duplicate entry"], twin_lane.FAILED),
                                          ([OK, b"\xff\x26\x04#23000no"], twin_lane.FAILED),
                                          ([b"\x05weird"], twin_lane.LOST)])
def test_error_and_nonsense_answers_leave_the_ring_and_position_as_they_were(cls, answers, code):
    region = ring([Transaction("0-1-6", (ROWS,), (1, 2))])
    lane = make(cls, build.PositionTable(255, 6), fmt(False))
    lane.set_position(0, GtidSet.parse("0-1-5"))
    client, server = socket.socketpair()
    with client, server:
        peer = threading.Thread(target=answering, args=(server, answers))
        peer.start()
        assert lane.run(region, 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20) == code
        peer.join(5)
    assert lane.seq == 0 and lane.gtids == "0-1-5" and read_u64(region, ACK_SEQ_AT) == 0
    if code == twin_lane.FAILED:
        assert lane.error.endswith(answers[-1])


LONG_ERROR = b"\xff\x26\x04#23000Duplicate entry '" + b"x" * 700 + b"' for key 'PRIMARY'"


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("pair", [socket.socketpair, tcp_pair])
@pytest.mark.parametrize("peer_fn", [answering, answering_split])
@pytest.mark.parametrize("answers,code", [([OK, OK], 1), ([LONG_ERROR], twin_lane.FAILED),
                                          ([OK, LONG_ERROR], twin_lane.FAILED)])
def test_answers_split_or_long_are_read_whole_and_the_socket_is_left_for_pymysql(cls, pair, peer_fn, answers, code):
    """Answers that arrive a few bytes at a time, an error message longer than any
    buffer a round trip starts with, over a Unix socket and over TCP: the same result,
    and a TCP socket's low-water mark back at one byte (PyMySQL reads it next)."""
    region = ring([Transaction("0-1-6", (ROWS,), (1, 2))])
    lane = make(cls, build.PositionTable(255, 6), fmt(False))
    lane.set_position(0, GtidSet.parse("0-1-5"))
    client, server = pair()
    with client, server:
        client.settimeout(5)
        peer = threading.Thread(target=peer_fn, args=(server, answers))
        peer.start()
        assert lane.run(region, 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20) == code
        peer.join(5)
        if client.family == socket.AF_INET:
            assert client.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
        server.sendall(b"next")  # nothing of the answers was left unread, nothing read ahead
        assert client.recv(16) == b"next"
    if code == twin_lane.FAILED:
        assert lane.error.endswith(answers[-1])
    else:
        assert lane.seq == 1 and read_u64(region, ACK_SEQ_AT) == 1


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("first", [
    Transaction("0-1-6", (ROWS,), (1, 2), format_event=b"F" * 60),  # a format of its own
    Transaction("0-1-6", (RowEvents(b"\x01" * 40, (("rdma_bridge", "repairs"),), 1),), (1, 2)),  # a repair
    Transaction("0-1-6", (RowEvents(b"\x01" * 40, (("rdma_bridge", "checksums__ab12"),), 1),), (1, 2)),
    Transaction("0-1-6", (Statement("app", "CREATE TABLE t (id INT)"),), (1, 2)),  # DDL: not compact
    Transaction("3e11fa47-71ca-11e1-9e33-c80aa9429562:6", (ROWS,), (1, 2)),  # not a MariaDB GTID
])
def test_what_is_not_the_common_case_is_left_untouched(cls, first):
    region = ring([first, Transaction("0-1-7", (ROWS,), (1, 2))])
    lane = make(cls, build.PositionTable(255, 6), fmt(False))
    lane.set_position(0, GtidSet.parse("0-1-5"))
    assert_untouched(lane, region, "0-1-5")


def assert_untouched(lane, region, gtids: str) -> None:
    """The lane's run finds nothing of its own: nothing sent, nothing taken."""
    client, server = socket.socketpair()
    with client, server:
        assert lane.run(region, 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20) == twin_lane.NOTHING
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.recv(1)  # nothing was sent
    assert lane.seq == 0 and lane.gtids == gtids and read_u64(region, ACK_SEQ_AT) == 0


@pytest.mark.parametrize("cls", CLASSES)
def test_an_empty_ring_is_nothing(cls):
    lane = make(cls, build.PositionTable(255, 6), fmt(False))
    lane.set_position(0, GtidSet.parse("0-1-5"))
    client, server = socket.socketpair()
    with client, server:
        assert lane.run(ring([]), 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20) == twin_lane.NOTHING


@pytest.mark.skipif(not apply_lane.COMPILED, reason="the compiled lane is not built")
def test_the_compiled_lane_is_the_one_that_runs_and_has_the_twins_names():
    compiled, twin = make(apply_lane.Lane, build.PositionTable(255, 6), fmt(False)), \
        make(twin_lane.Lane, build.PositionTable(255, 6), fmt(False))
    assert type(compiled).__module__ == "bridge.apply.lane._lane"
    public = lambda obj: {n for n in dir(obj) if not n.startswith("_")}  # noqa: E731
    assert public(compiled) == public(twin)


# --- a MySQL replica keeping its MySQL primary's GTIDs ------------------------------

def mysql_ring(first: int, count: int, beat_at: int = -1, table=("app", "t")):
    txns = [Transaction(f"{UUID}:{n}", (RowEvents(bytes([n]) * 40, (table,), 1),), (1000 + n, 2000 + n))
            for n in range(first, first + count)]
    if beat_at >= 0:
        txns[beat_at] = Transaction(txns[beat_at].gtid, (RowEvents(b"\x02" * 30, (("rdma_bridge", "heartbeat"),),
                                                                    1),), (5, 6))
    return ring(txns), [t.changes[0].data for t in txns], [t.gtid for t in txns]


def mysql_lane(cls, engines=None, gtids=f"{UUID}:1-5"):
    lane = make(cls, build.PositionTable(255, 6), fmt(True), engines={("app", "t"): False} if engines is None
                else engines)
    assert lane.set_position(0, GtidSet.parse(gtids)) and lane.mysql
    return lane


@pytest.mark.parametrize("cls", CLASSES)
def test_mysql_each_transaction_commits_with_its_gtid_and_position_in_one_round_trip(cls):
    region, datas, gtids = mysql_ring(6, 4, beat_at=2)
    lane = mysql_lane(cls)
    client, server = socket.socketpair()
    with client, server:
        server.settimeout(5)
        seen = []
        peer = threading.Thread(target=lambda: seen.append(answering(server, [OK] * 14)))
        peer.start()
        assert lane.run(region, 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20) == 4
        peer.join(5)
    query = seen[0]
    assert query[1:] == lane.mysql_query(gtids, datas, 0, 5, lane.picked_ns // 1000)
    statements = query[1:].split(b";")
    assert statements[0] == b"COMMIT" and statements[-1] == b"SET @@SESSION.GTID_NEXT='AUTOMATIC'"
    assert statements[1:4] == [f"SET @@SESSION.GTID_NEXT='{UUID}:6'".encode(), statements[2], b"COMMIT"]
    events = base64.b64decode(statements[2][len(b"BINLOG '"):-1])
    assert events.startswith(datas[0] + lane.position_map) and f"{UUID}:1-6".encode() in events
    assert lane.seq == 4 and lane.gtids == f"{UUID}:1-9" and lane.last_gtid == f"{UUID}:9"
    assert (lane.txns, lane.beats, lane.events, lane.groups) == (4, 1, 4, 1) and lane.heartbeat == b"\x02" * 30
    assert read_u64(region, ACK_SEQ_AT) == 4 and lane.expected_seq == 5


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("oks, done", [(0, 0), (3, 0), (4, 1), (6, 1), (7, 2), (9, 2)])
def test_mysql_an_error_mid_group_keeps_the_transactions_committed_before_it(cls, oks, done):
    """The server stops at the first error: the transactions whose COMMIT answered OK are
    applied (position, ring, counts), the rest given back."""
    region, datas, gtids = mysql_ring(6, 3)
    lane = mysql_lane(cls)
    error = b"\xff\x26\x04#23000Duplicate entry"
    client, server = socket.socketpair()
    with client, server:
        peer = threading.Thread(target=answering, args=(server, [OK] * oks + [error]))
        peer.start()
        assert lane.run(region, 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20) == twin_lane.FAILED
        peer.join(5)
    assert lane.error.endswith(error) and lane.given_back == 3 - done
    assert lane.seq == done and read_u64(region, ACK_SEQ_AT) == done and lane.txns == done
    assert lane.gtids == (f"{UUID}:1-{5 + done}" if done else f"{UUID}:1-5")
    assert lane.groups == (1 if done else 0) and lane.expected_seq == 1 + done


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("engines, gtids, first", [
    ({}, f"{UUID}:1-5", 6),  # a table the general path has not applied yet
    ({("app", "t"): True}, f"{UUID}:1-5", 6),  # a MyISAM table: its rows cannot share the position's transaction
    (None, f"{UUID}:1-5", 7),  # a gap
    (None, f"{UUID}:1-5", 5),  # one the replica holds
    (None, f"{OTHER}:1-5", 6),  # a uuid the set does not hold
])
def test_mysql_what_the_lane_does_not_carry_is_left_untouched(cls, engines, gtids, first):
    region, _, _ = mysql_ring(first, 2)
    assert_untouched(mysql_lane(cls, engines, gtids), region, gtids)


def test_mysql_both_lanes_split_groups_alike_under_a_query_limit():
    """A query limit that takes two transactions a group: both lanes send the same queries."""
    sent = []
    for cls in CLASSES:
        region, _, _ = mysql_ring(6, 5)
        lane = mysql_lane(cls)
        client, server = socket.socketpair()
        queries = []
        tail, expected = 0, 1
        with client, server:
            server.settimeout(5)
            for _ in range(2):
                peer = threading.Thread(target=lambda: queries.append(answering(server, [OK] * 8)))
                peer.start()
                limit = 2 * (44 + len(UUID) + 3 + 4 * 14 + lane.position_bytes_max) + 42 + 8
                assert lane.run(region, tail, expected, 3, client, 100, 100, 1 << 20, limit) == 2
                peer.join(5)
                tail, expected = lane.tail, lane.expected_seq
        assert lane.gtids == f"{UUID}:1-9" and lane.seq == 4
        sent.append([q[:1] + q[1:].split(b";SET @@SESSION.GTID_NEXT='AUTOMATIC'")[0][:200] for q in queries])
    assert all(s == sent[0] for s in sent) and len(sent[0]) == 2


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("pair", [socket.socketpair, tcp_pair])
@pytest.mark.parametrize("pad", range(5))
def test_mysql_many_answers_of_any_length_are_read_whole(cls, pair, pad):
    """A group of 40 transactions has 122 answers, past any buffer a round trip starts with,
    wherever an answer's header falls (OK packets carry info text of any length)."""
    region, _, _ = mysql_ring(6, 40)
    lane = mysql_lane(cls)
    answers = [OK + b"i" * ((k * 7 + pad) % 13) for k in range(122)]
    client, server = pair()
    with client, server:
        client.settimeout(5)
        peer = threading.Thread(target=answering, args=(server, answers))
        peer.start()
        assert lane.run(region, 0, 1, 3, client, 100, 100, 1 << 20, 1 << 20) == 40
        peer.join(5)
        server.sendall(b"next")  # nothing of the answers was left unread, nothing read ahead
        assert client.recv(16) == b"next"
    assert lane.seq == 40 and lane.gtids == f"{UUID}:1-45"
