"""The relay's served protocol (bridge.relay) against a real replica server's IO thread:
a sandbox's native replica of the primary (MariaDB's or MySQL's own GTID replication) is
pointed at a RelayServer whose feed is the primary's own binlog dump, passed through. It
logs in with its plugin, asks its queries, registers, dumps from its GTID state, gets
heartbeats while idle, and applies what the primary writes with the server's own SQL
thread: the databases are compared. A wrong password is refused as a server refuses it.
Afterwards the native replica is pointed back at the primary.

The feed here stands in for the ring's (apply mode relay, to come): what is tested is
the served protocol, not where the events come from."""

from __future__ import annotations

import json
import queue
import struct
import threading
import time

import pymysql
import pytest

from bridge.check.compare import compare_databases
from bridge.config import MysqlUrl
from bridge.lab.workload import MixedWorkload, connect, create_schema
from bridge.model import Chunk, GtidSet
from bridge.ops.certs import make_set
from bridge.relay.answers import SourceFacts
from bridge.relay.channel import RelayChannel
from bridge.relay.feed import TransactionFeed
from bridge.relay.server import DumpRequest, FeedError, RelayServer, relay_tls_context
from bridge.server import dbconn
from bridge.server.flavor import Flavor
from bridge.source.events import VerbatimRead
from bridge.source.reader import BinlogReader
from bridge.source.verbatim import VerbatimGrouper
from bridge.wire import binlog as binlog_types
from bridge.wire.binlog import split_events
from bridge.wire.codec import decode_chunk, decode_transaction, encode_chunk, encode_transaction
from bridge.wire.mysqlgtid import encode_gtid_set
from tests.conftest import relay_sandbox
from tests.helpers import wait_for

NATIVE_USER = "rdma_native"  # the native replica's account on the primary (bridge.lab.native)


class PrimaryDump:
    """The primary's binlog dump from the position a replica asked the relay for, read
    by a thread into a queue: the events as the primary sent them."""

    def __init__(self, url, request: DumpRequest, heartbeat_ns: int = 0) -> None:
        self.conn = dbconn.connect(url, autocommit=True)
        server_id = 4000 + request.replica_server_id
        with self.conn.cursor() as cur:
            if heartbeat_ns:  # as a replica's IO thread says it (MySQL 8.0.26+ by its newer name)
                cur.execute("SET @master_heartbeat_period = %s", (heartbeat_ns,))
                cur.execute("SET @source_heartbeat_period = %s", (heartbeat_ns,))
            if request.checksum:
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            if request.mysql_gtids is None:
                cur.execute("SET @mariadb_slave_capability = 4")
                cur.execute("SET @slave_connect_state = %s", (request.mariadb_state or "",))
        if request.mysql_gtids is None:
            self.conn._execute_command(0x12, struct.pack("<IHI", 4, 0, server_id))
        else:  # COM_BINLOG_DUMP_GTID with the replica's own GTID set
            file = request.file.encode()
            self.conn._execute_command(0x1E, struct.pack("<HII", request.flags, server_id, len(file)) + file
                                       + struct.pack("<QI", request.position, len(request.mysql_gtids))
                                       + request.mysql_gtids)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, name="primary-dump", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.conn._read_packet().get_all_data()
                if data[:1] != b"\x00":
                    break
                self.events.put(data[1:])
        except (pymysql.MySQLError, OSError) as exc:
            self.events.put(exc)

    def next(self, timeout_s: float) -> bytes | None:
        try:
            item = self.events.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(item, Exception):
            raise FeedError(f"the primary's dump ended: {item}")
        return item

    def close(self) -> None:
        try:
            self.conn._sock.close()
        except (OSError, AttributeError):
            pass


class PassThrough:
    def __init__(self, url) -> None:
        self.url = url
        self.opened: list[DumpRequest] = []

    def open(self, request: DumpRequest) -> PrimaryDump:
        self.opened.append(request)
        return PrimaryDump(self.url, request)


def _facts(conn, flavor: Flavor) -> SourceFacts:
    with conn.cursor() as cur:
        cur.execute("SELECT @@server_id, @@binlog_checksum")
        server_id, checksum = cur.fetchone()
        names = ("gtid_mode", "server_uuid") if flavor.is_mysql else ("gtid_domain_id",)
        cur.execute("SELECT " + ", ".join(f"@@GLOBAL.{n}" for n in names))
        variables = {n: str(v) for n, v in zip(names, cur.fetchone())}
    version = conn.get_server_info()
    if not flavor.is_mysql:  # a MariaDB server's handshake says 5.5.5- first (old clients compare it)
        version = "5.5.5-" + version.removeprefix("5.5.5-")
    return SourceFacts(version=version, server_id=server_id, checksum=checksum, variables=variables)


def replica_status(conn, flavor: Flavor) -> dict:
    """The native replica's IO and SQL threads, errors, source and heartbeats, in one shape."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        if flavor.is_mysql:
            cur.execute("SHOW REPLICA STATUS")
            row = cur.fetchone() or {}
            cur.execute("SELECT COUNT_RECEIVED_HEARTBEATS AS n FROM performance_schema.replication_connection_status "
                        "WHERE CHANNEL_NAME = ''")
            beats = (cur.fetchone() or {"n": 0})["n"]
            prefix, source = "Replica", "Source"
        else:
            cur.execute("SHOW ALL SLAVES STATUS")  # it has the heartbeats received too
            row = next((r for r in cur.fetchall() if r["Connection_name"] == ""), {})
            beats, prefix, source = row.get("Slave_received_heartbeats", 0), "Slave", "Master"
    return {"io": row.get(f"{prefix}_IO_Running"), "sql": row.get(f"{prefix}_SQL_Running"),
            "io_errno": row.get("Last_IO_Errno"), "io_error": row.get("Last_IO_Error"),
            "sql_errno": row.get("Last_SQL_Errno"), "source_id": row.get(f"{source}_Server_Id"),
            "heartbeats": int(beats or 0)}


def _native_position(conn, flavor: Flavor) -> GtidSet:
    with conn.cursor() as cur:
        cur.execute(flavor.replica_gtid_sql)
        return GtidSet.parse(cur.fetchone()[0])


def _back_to_the_primary(conn, flavor: Flavor, port: int, password: str) -> None:
    statement, params = flavor.change_source(port, NATIVE_USER, password, None)
    with conn.cursor() as cur:
        cur.execute(flavor.stop_replica)
        cur.execute(statement, params)
        cur.execute("CHANGE REPLICATION SOURCE TO SOURCE_SSL=0" if flavor.is_mysql else "CHANGE MASTER TO MASTER_SSL=0")
        cur.execute(flavor.start_replica)


def _to_the_relay(conn, flavor: Flavor, server: RelayServer, password: str, tls_ca: str | None = None) -> None:
    """The native replica's own channel ('') pointed at the relay as the replica side points its server's."""
    channel = RelayChannel(flavor, "", "127.0.0.1", server.address[1], NATIVE_USER, heartbeat_s=0.5, tls_ca=tls_ca)
    with conn.cursor() as cur:
        channel.configure(cur, password)


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """A sandbox of its own: its native replica is pointed away from the primary and back."""
    with relay_sandbox(tmp_path_factory, "relay", native_replica=True) as own:
        yield own


@pytest.fixture
def relay(box):
    box, info = box
    state = json.loads(box.state_file.read_text())
    password, primary_port = state["passwords"]["apply"], state["ports"]["primary"]
    urls = {k: MysqlUrl.parse(v) for k, v in info.items() if v.startswith("mysql://")}
    pconn, nconn = connect(urls["primary_admin"]), connect(urls["native_admin"])
    flavor = Flavor.of(pconn)
    feed = PassThrough(urls["primary"])
    server = RelayServer(("127.0.0.1", 0), _facts(pconn, flavor), feed, NATIVE_USER, password).start()
    try:
        yield server, feed, flavor, pconn, nconn, urls, password, box
    finally:
        _back_to_the_primary(nconn, flavor, primary_port, password)
        server.close()
        pconn.close()
        nconn.close()


def test_a_native_replica_replicates_through_the_relay_as_from_its_primary(relay):
    server, feed, flavor, pconn, nconn, urls, password, _ = relay
    schema = "relay_pass"
    with pconn.cursor() as cur:  # one transaction the native replica has before it moves: in its position
        cur.execute("CREATE DATABASE IF NOT EXISTS relay_before")
        cur.execute(flavor.gtid_position_sql)
        before = GtidSet.parse(cur.fetchone()[0])
    wait_for(lambda: _native_position(nconn, flavor).contains_all(before), "the native replica at the primary")
    _to_the_relay(nconn, flavor, server, password)
    try:
        wait_for(lambda: replica_status(nconn, flavor)["io"] == "Yes", "the IO thread connected to the relay",
                 timeout_s=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {replica_status(nconn, flavor)}") from None
    create_schema(pconn, schema)
    MixedWorkload(pconn, schema, seed=59).run(300)
    wait_for(lambda: compare_databases(urls["primary_admin"], urls["native_admin"], [schema]).ok,
             "the native replica equal to the primary", timeout_s=90)
    time.sleep(1.5)  # idle for three heartbeat periods
    status = replica_status(nconn, flavor)
    assert (status["io"], status["sql"], status["io_errno"], status["sql_errno"]) == ("Yes", "Yes", 0, 0), status
    assert status["source_id"] == server.facts.server_id, status
    assert status["heartbeats"] >= 2, ("no heartbeats reached the replica while it was idle", status)
    request = feed.opened[-1]
    assert request.checksum, request
    assert request.gtids.contains_all(before) and before.contains_all(request.gtids), (str(request.gtids), str(before))
    assert (request.mysql_gtids is not None) == flavor.is_mysql and (request.mariadb_state is None) == flavor.is_mysql
    result = compare_databases(urls["primary_admin"], urls["native_admin"], [schema])
    assert result.ok and result.digests, [(d.table, d.missing, d.extra) for d in result.diffs]


def test_a_wrong_password_is_refused_as_a_server_refuses_it(relay):
    server, feed, flavor, _, nconn, _, _, _ = relay
    _to_the_relay(nconn, flavor, server, "not-the-password")
    try:
        wait_for(lambda: replica_status(nconn, flavor)["io_errno"] == 1045, "the IO thread refused with error 1045",
                 timeout_s=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {replica_status(nconn, flavor)}") from None
    assert f"Access denied for user '{NATIVE_USER}'" in replica_status(nconn, flavor)["io_error"]
    assert feed.opened == [] and server.served == 0


def test_a_replica_that_asks_for_tls_gets_it_and_verifies_the_relays_certificate(relay):
    server, feed, flavor, pconn, nconn, _, password, box = relay
    # in the state directory, where the server (or its container) reads; the address first: MariaDB 10.11's
    # replica matches the host it connects to against the certificate's common name, not its IP names
    files = make_set(box.dir / "relay-tls", ["127.0.0.1", "localhost"])
    tls = RelayServer(("127.0.0.1", 0), server.facts, feed, NATIVE_USER, password,
                      tls=relay_tls_context(str(files.cert), str(files.key))).start()
    try:
        _to_the_relay(nconn, flavor, tls, password, tls_ca=str(files.ca))
        with pconn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS relay_tls")
            cur.execute(flavor.gtid_position_sql)
            written = GtidSet.parse(cur.fetchone()[0])
        try:
            wait_for(lambda: _native_position(nconn, flavor).contains_all(written), "the replica applied over TLS",
                     timeout_s=30)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {replica_status(nconn, flavor)}") from None
        status = replica_status(nconn, flavor)
        assert (status["io"], status["io_errno"]) == ("Yes", 0), status
        assert tls.tls_logins >= 1 and tls.served >= 1
    finally:
        tls.close()


def test_the_primarys_transactions_grouped_verbatim_and_framed_reach_the_replica_equal(relay):
    """What relay mode carries in the ring: the primary's dump grouped into whole
    transactions (bridge.source.verbatim; small chunks, so long transactions leave in
    several), through the codec as frames carry them, into a TransactionFeed the relay
    serves from, opening each dump with its own ROTATE and FORMAT_DESCRIPTION."""
    server, _, flavor, pconn, nconn, urls, password, _ = relay
    schema = "relay_verbatim"
    with pconn.cursor() as cur:
        cur.execute(flavor.gtid_position_sql)
        start = GtidSet.parse(cur.fetchone()[0])
    wait_for(lambda: _native_position(nconn, flavor).contains_all(start), "the native replica at the primary")
    dump = PrimaryDump(urls["primary"], _asked_from(start, flavor, 77))
    grouper, fed, format_event = VerbatimGrouper(checksum_bytes=4, chunk_bytes=4096), [], []
    feed: list[TransactionFeed] = []
    stop = threading.Event()

    def pump() -> None:  # the primary side's part, and the ring's framing
        while not stop.is_set():
            event = dump.next(0.2)
            if event is None:
                continue
            if event[4] == 15 and not format_event:
                format_event.append(event)
                feed.append(TransactionFeed(event, server.facts.server_id, before=start))
            item = grouper.feed(event)
            if item is not None:
                frame = encode_chunk(item) if isinstance(item, Chunk) else encode_transaction(item)
                item = decode_chunk(frame) if isinstance(item, Chunk) else decode_transaction(frame)
                fed.append(item)
                feed[0].append(item)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    wait_for(lambda: feed, "the primary's FORMAT_DESCRIPTION", timeout_s=10)
    verbatim = RelayServer(("127.0.0.1", 0), server.facts, feed[0], NATIVE_USER, password).start()
    try:
        _to_the_relay(nconn, flavor, verbatim, password)
        create_schema(pconn, schema)
        MixedWorkload(pconn, schema, seed=61).run(300)
        with pconn.cursor() as cur:
            cur.execute(f"ALTER TABLE {schema}.accounts ADD COLUMN note VARCHAR(20) NULL")
            cur.execute(f"UPDATE {schema}.accounts SET note = 'x'")  # one long transaction: several chunks
            cur.execute(flavor.gtid_position_sql)
            written = GtidSet.parse(cur.fetchone()[0])
        try:
            wait_for(lambda: _native_position(nconn, flavor).contains_all(written), "the native replica applied "
                     "every transaction through the verbatim feed", timeout_s=90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {replica_status(nconn, flavor)}") from None
        status = replica_status(nconn, flavor)
        assert (status["io"], status["sql"], status["io_errno"], status["sql_errno"]) == ("Yes", "Yes", 0, 0), status
        assert any(isinstance(i, Chunk) and i.index > 0 for i in fed), "no transaction left in several chunks"
        assert verbatim.served >= 1 and server.served == 0  # the native replica read this relay only
        result = compare_databases(urls["primary_admin"], urls["native_admin"], [schema])
        assert result.ok and result.digests, [(d.table, d.missing, d.extra) for d in result.diffs]
    finally:
        stop.set()
        pumping.join(5)
        dump.close()
        feed[0].close()
        verbatim.close()


def test_the_primary_sides_reader_in_relay_mode_hands_each_transaction_as_the_primary_sent_it(relay):
    """BinlogReader(verbatim=True), grouped, against the primary's own dump of the same
    range: the same transactions, byte for byte. On MySQL a transaction the primary
    compressed (binlog_transaction_compression) stays one TRANSACTION_PAYLOAD event."""
    _, _, flavor, pconn, _, urls, _, _ = relay
    schema = "relay_reader"
    with pconn.cursor() as cur:
        cur.execute(flavor.gtid_position_sql)
        start = GtidSet.parse(cur.fetchone()[0])
    reader = BinlogReader(urls["primary"], 4141, str(start), flavor=flavor, verbatim=True)
    dump = PrimaryDump(urls["primary"], _asked_from(start, flavor, 78))
    try:
        create_schema(pconn, schema)
        MixedWorkload(pconn, schema, seed=62).run(100)
        with pconn.cursor() as cur:
            if flavor.is_mysql:
                cur.execute("SET SESSION binlog_transaction_compression = ON")
                cur.execute(f"UPDATE {schema}.accounts SET owner = CONCAT(owner, '!')")
                cur.execute("SET SESSION binlog_transaction_compression = OFF")
            cur.execute(flavor.gtid_position_sql)
            last = GtidSet.parse(cur.fetchone()[0])
        read = _grouped(lambda: reader.next_event(), start, last,
                        lambda e: e.event if isinstance(e, VerbatimRead) else None)
        dumped = _grouped(lambda: dump.next(5.0), start, last, lambda e: e)
    finally:
        reader.close()
        dump.close()
    assert [t.gtid for t in read] == [t.gtid for t in dumped] and len(read) >= 50
    assert read == dumped
    if flavor.is_mysql:
        assert any(e[4] == 40 for t in read for e in split_events(t.changes[0].data)), "no compressed transaction"


def _asked_from(start: GtidSet, flavor: Flavor, server_id: int) -> DumpRequest:
    """A dump from ``start`` as a replica of ``flavor`` asks for it (MySQL: BINLOG_THROUGH_GTID)."""
    if flavor.is_mysql:
        return DumpRequest("", 4, server_id, True, flags=4,
                           mysql_gtids=encode_gtid_set([(k, list(ivs)) for k, ivs in start.mysql]))
    return DumpRequest("", 4, server_id, True, mariadb_state=str(start))


def _grouped(next_event, start: GtidSet, last: GtidSet, raw) -> list:
    """Transactions grouped from ``next_event`` (a dump from ``start``) until every GTID of
    ``last`` was seen."""
    grouper, out, seen = VerbatimGrouper(checksum_bytes=4, chunk_bytes=1 << 30), [], start
    deadline = time.monotonic() + 60
    while not seen.contains_all(last):
        assert time.monotonic() < deadline, f"only {seen} of {last} read"
        event = next_event()
        event = raw(event) if event is not None else None
        if event is None:
            continue
        item = grouper.feed(event)
        if item is not None:
            out.append(item)
            seen = seen.add_text(item.gtid)
    return out


# what a source sends between transactions, which the relay leaves out (a replica applies without them)
GTID_LIST, BINLOG_CHECKPOINT, PREVIOUS_GTIDS = 163, 161, 35
_BETWEEN = frozenset({GTID_LIST, BINLOG_CHECKPOINT, PREVIOUS_GTIDS})


def _dumped_until(dump: PrimaryDump, start: GtidSet, last: GtidSet) -> tuple[list[bytes], bytes]:
    """Every event of ``dump`` until each GTID of ``last`` was sent, then its first heartbeat."""
    grouper, seen, events_, deadline = VerbatimGrouper(checksum_bytes=4, chunk_bytes=1 << 30), start, [], \
        time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"only {seen} of {last} dumped"
        event = dump.next(5.0)
        if event is None:
            continue
        if event[4] == binlog_types.HEARTBEAT:
            if seen.contains_all(last):
                return events_, event
            continue
        events_.append(event)
        item = grouper.feed(event)
        if item is not None:
            seen = seen.add_text(item.gtid)


def test_conformance_the_relay_sends_what_the_primary_sends_a_replica_byte_for_byte(relay):
    """One replica's dump from one GTID position, from the primary itself and from the relay
    (fed the primary's transactions grouped and through the codec, as the ring carries
    them): the same ROTATE, the same FORMAT_DESCRIPTION (as the primary's own dump sends it),
    the same transactions event for event with their checksums, and the same
    heartbeat once idle, byte for byte. What a source sends between transactions (MariaDB's
    GTID_LIST and BINLOG_CHECKPOINT, MySQL's PREVIOUS_GTIDS) the relay leaves out."""
    server, _, flavor, pconn, _, urls, password, _ = relay
    schema = "relay_conformance"
    with pconn.cursor() as cur:
        cur.execute(flavor.gtid_position_sql)
        start = GtidSet.parse(cur.fetchone()[0])
    create_schema(pconn, schema)
    MixedWorkload(pconn, schema, seed=64).run(150)
    with pconn.cursor() as cur:
        if flavor.is_mysql:
            cur.execute("SET SESSION binlog_transaction_compression = ON")
        cur.execute(f"UPDATE {schema}.accounts SET owner = CONCAT(owner, '?')")
        cur.execute(flavor.gtid_position_sql)
        last = GtidSet.parse(cur.fetchone()[0])
    request, beat_ns = _asked_from(start, flavor, 79), 200_000_000
    real = PrimaryDump(urls["primary"], request, heartbeat_ns=beat_ns)
    try:
        sent, beat = _dumped_until(real, start, last)
    finally:
        real.close()
    format_event = next(e for e in sent if e[4] == binlog_types.FORMAT_DESCRIPTION)
    feed = TransactionFeed(format_event, server.facts.server_id, before=start)
    feed.mid_file = server.facts.flavor.dump_starts_mid_file
    grouper = VerbatimGrouper(checksum_bytes=4, chunk_bytes=4096)
    for event in sent:
        item = grouper.feed(event)
        if item is not None:
            feed.append(decode_chunk(encode_chunk(item)) if isinstance(item, Chunk) else
                        decode_transaction(encode_transaction(item)))
    served = RelayServer(("127.0.0.1", 0), server.facts, feed, NATIVE_USER, password).start()
    relayed_dump = PrimaryDump(MysqlUrl.parse(f"mysql://{NATIVE_USER}:{password}@127.0.0.1:{served.address[1]}"),
                               request, heartbeat_ns=beat_ns)
    try:
        relayed, relayed_beat = _dumped_until(relayed_dump, start, last)
    finally:
        relayed_dump.close()
        served.close()
        feed.close()
    mid_file = server.facts.flavor.dump_starts_mid_file
    if mid_file:  # the ROTATE names where each starts reading: the server's GTID index, the relay's first event
        assert relayed[0][:19] == sent[0][:19] and relayed[0][27:-4] == sent[0][27:-4], (relayed[0], sent[0])
        first = next(e for e in relayed[2:])
        assert binlog_types.rotate_target(sent[0], 4)[1] <= binlog_types.rotate_target(relayed[0], 4)[1] == \
            binlog_types.next_position(first) - len(first)
    else:
        assert relayed[0] == sent[0] and relayed[0][4] == binlog_types.ROTATE, (relayed[0].hex(), sent[0].hex())
    assert relayed[1] == _first_format(sent)
    transactions = [e for e in sent[1:] if e[4] not in _BETWEEN and e[4] != binlog_types.FORMAT_DESCRIPTION]
    assert relayed[2:] == transactions and len(transactions) >= 300
    assert relayed_beat == beat, (relayed_beat.hex(), beat.hex())


def _first_format(sent: list[bytes]) -> bytes:
    """The FORMAT_DESCRIPTION the source sent after its ROTATE, as sent."""
    return next(e for e in sent if e[4] == binlog_types.FORMAT_DESCRIPTION)
