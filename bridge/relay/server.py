"""The relay's listener and its sessions: one thread per connected replica, through the
handshake, the password check, the queries and ``p.COM_REGISTER_SLAVE``, then the binlog
dump: the events of a ``Feed`` from the position the replica asked for, as packets, with
a heartbeat whenever nothing was sent for the replica's heartbeat period."""

from __future__ import annotations

import itertools
import logging
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from bridge.errors import BridgeError, ConfigError, RemoteProtocolError
from bridge.model import GtidSet
from bridge.relay import auth, events
from bridge.relay import protocol as p
from bridge.relay.answers import Session, SourceFacts
from bridge.relay.protocol import Reader, err_packet, ok_packet
from bridge.wire import binlog
from bridge.wire.mysqlgtid import decode_gtid_set

log = logging.getLogger(__name__)

ER_CON_COUNT_ERROR, ER_ACCESS_DENIED, ER_UNKNOWN_COM = 1040, 1045, 1047
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
LOGIN_TIMEOUT_S = 30.0
DEFAULT_HEARTBEAT_S = 30.0  # a replica that sets no period (MariaDB's and MySQL's default is slave_net_timeout/2)


class FeedError(BridgeError):
    """A position the feed cannot serve: the replica gets error 1236 with this text, as a
    source answers a GTID it no longer has."""


@dataclass(frozen=True, slots=True)
class DumpRequest:
    """What a replica asked to be sent: MariaDB's GTID state (``@slave_connect_state``,
    text) or MySQL's executed set (``p.COM_BINLOG_DUMP_GTID``, encoded), else a file and
    position."""

    file: str
    position: int
    replica_server_id: int
    checksum: bool  # the replica asked for the primary's checksum (events come with their crc32)
    mariadb_state: str | None = None
    mysql_gtids: bytes | None = None
    capability: int = 0  # @mariadb_slave_capability
    flags: int = 0  # the dump command's (MySQL's BINLOG_THROUGH_GTID, ...)
    gtids: GtidSet = GtidSet()  # what the replica has (MariaDB: its last GTID per domain): the feed serves the rest
    semi_sync: bool = False  # the replica asked for semi-sync (@rpl_semi_sync_slave, MySQL's @rpl_semi_sync_replica)


class FeedGone(BridgeError):
    """A dump cannot go on where it is (the feed closed, or began again while it was
    inside a transaction): its connection is closed without an error, and the replica
    reconnects from its own position, as after a lost connection (an error 1236 would
    stop its IO thread)."""


class Stream(Protocol):
    ack_gtid: str | None  # the event ``next`` returned last ends this transaction (a semi-sync ACK is asked)

    def next(self, timeout_s: float) -> bytes | None:
        """The next event (bytes as the source wrote them, crc32 included when asked), or
        several events concatenated (a ROTATE always alone), or None when none came within
        ``timeout_s``."""

    def received(self, gtid: str) -> None:
        """The replica acknowledged (semi-sync) every transaction up to ``gtid``."""

    def close(self) -> None: ...


class Feed(Protocol):
    def open(self, request: DumpRequest) -> Stream:
        """The events from the position ``request`` names; FeedError when there are none."""


class Closed(Exception):
    """The replica closed its connection."""


class Connection:
    """Packets over one socket, numbered as the protocol numbers them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.seq = sock, 0

    def start_tls(self, context: ssl.SSLContext) -> None:
        """The rest of the connection over TLS (after the client's SSL request). Reads are
        never buffered ahead: the TLS handshake's first bytes, sent right behind the SSL
        request, are still in the socket for it."""
        self.sock = context.wrap_socket(self.sock, server_side=True)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            part = self.sock.recv(n - len(out))
            if not part:
                raise Closed()
            out += part
        return bytes(out)

    def read(self) -> bytes:
        data = bytearray()
        while True:
            head = self._exactly(4)
            size = int.from_bytes(head[:3], "little")
            self.seq = (head[3] + 1) % 256
            data += self._exactly(size)
            if size < p.MAX_PAYLOAD:
                return bytes(data)

    def read_reply(self) -> bytes:
        """One packet the replica sends on its own during a dump (a semi-sync ACK), which
        does not number the dump's packets."""
        head = self._exactly(4)
        return self._exactly(int.from_bytes(head[:3], "little"))

    def readable(self) -> bool:
        """A packet (or the end) is there to read without waiting."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        return bool(select.select([self.sock], [], [], 0)[0])

    def write(self, *payloads: bytes) -> None:
        out = bytearray()
        for payload in payloads:
            self.pack(out, payload)
        self.sock.sendall(out)

    def pack(self, out: bytearray, payload: bytes) -> None:
        """``payload`` as the next packet(s), appended to ``out`` (sent by the caller)."""
        self.seq = p.pack_into(out, payload, self.seq)


class RelayServer:
    """Serves ``feed`` on ``listen`` to replicas that log in as ``user`` with ``password``;
    ``tls``: offered to a replica that asks for it (``relay_tls_context``)."""

    def __init__(self, listen: tuple[str, int], facts: SourceFacts | None, feed: Feed, user: str, password: str,
                 tls: ssl.SSLContext | None = None, pushed: bool = False) -> None:
        """``facts`` None: not known yet (no primary side has said them): a replica that
        connects meanwhile is told so, and tries again as it does after any failed
        connect. ``pushed``: whoever adds to the feed calls ``push`` (a dump's own thread
        then does not wait on the feed)."""
        self.facts, self.feed, self.user, self.password, self.tls = facts, feed, user, password, tls
        self.pushed = pushed
        self.refusal: tuple[int, str] | None = None  # (code, text) every dump is answered with, as the primary did
        try:
            self.listener = socket.create_server(listen)
        except OSError as exc:
            raise ConfigError(f"relay: cannot listen on {listen[0]}:{listen[1]}: {exc.strerror or exc}") from exc
        self.address = self.listener.getsockname()[:2]
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._sessions: set[socket.socket] = set()
        self._dumps: set[_Dump] = set()  # the dumps ``push`` serves (plain connections)
        self._lock = threading.Lock()
        self.served = 0  # dumps started
        self.tls_logins = 0  # logins over TLS
        self._thread = threading.Thread(target=self._accept, name="relay-listener", daemon=True)

    def start(self) -> RelayServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        with self._lock:
            for sock in list(self._sessions):
                _shut(sock)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, peer = self.listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sessions.add(sock)
            threading.Thread(target=self._session, args=(sock, peer), name="relay-session", daemon=True).start()

    @property
    def plugin(self) -> str:
        return auth.NATIVE if self.facts is None or self.facts.mariadb else auth.CACHING_SHA2

    def _session(self, sock: socket.socket, peer) -> None:
        conn = Connection(sock)
        sock.settimeout(LOGIN_TIMEOUT_S)  # a client that stops halfway through its login holds no thread
        facts = self.facts
        try:
            if facts is None:
                conn.write(err_packet(ER_CON_COUNT_ERROR, "08004", "rdma-bridge relay: no primary side has connected "
                                                                   "to this replica side yet"))
                return
            if self._login(conn, facts):
                conn.sock.settimeout(None)
                self._commands(conn, Session(facts))
        except (Closed, FeedGone):
            pass
        except (OSError, RemoteProtocolError) as exc:
            if not self._stop.is_set():
                log.info("relay: the replica at %s:%s left: %s", *peer[:2], exc)
        finally:
            with self._lock:
                self._sessions.discard(sock)
            _shut(sock)

    def _login(self, conn: Connection, facts: SourceFacts) -> bool:
        salt = auth.nonce()
        capabilities = p.SERVER_CAPABILITIES | (p.CLIENT_SSL if self.tls else 0)
        conn.write(p.handshake(facts.version, next(self._ids), salt, self.plugin, capabilities))
        hello = p.client_hello(conn.read())
        if hello.wants_tls:
            if self.tls is None:  # a client asks only when offered; this one did anyway
                conn.write(err_packet(ER_ACCESS_DENIED, "28000", "this relay offers no TLS"))
                return False
            try:
                conn.start_tls(self.tls)
            except ssl.SSLError as exc:
                log.info("relay: a replica's TLS handshake failed: %s", exc.reason or exc)
                return False
            self.tls_logins += 1
            hello = p.client_hello(conn.read())
        answer, plugin = hello.auth, hello.plugin or self.plugin
        if plugin not in (auth.NATIVE, auth.CACHING_SHA2):
            plugin = self.plugin
            conn.write(p.auth_switch(plugin, salt))
            answer = conn.read()
        if hello.user != self.user or not auth.matches(plugin, self.password, salt, answer):
            conn.write(err_packet(ER_ACCESS_DENIED, "28000", f"Access denied for user '{hello.user}' (using password: "
                                                             f"{'YES' if answer else 'NO'})"))
            return False
        if plugin == auth.CACHING_SHA2:
            conn.write(b"\x01" + auth.FAST_AUTH_SUCCESS[1:])
        conn.write(ok_packet())
        return True

    def _commands(self, conn: Connection, session: Session) -> None:
        while not self._stop.is_set():
            packet = conn.read()
            command, body = packet[0], packet[1:]
            if command == p.COM_QUIT:
                return
            if command == p.COM_QUERY:
                query = body.decode("utf-8", "replace")
                answer = session.answer(query)
                log.debug("relay: %r -> %s", query, "error" if answer[0][:1] == b"\xff" else "answered")
                conn.write(*answer)
            elif command in (p.COM_PING, p.COM_REGISTER_SLAVE, p.COM_INIT_DB):
                conn.write(ok_packet())
            elif command in (p.COM_BINLOG_DUMP, p.COM_BINLOG_DUMP_GTID):
                self._dump(conn, session, _dump_request(command, body, session))
                return
            else:
                conn.write(err_packet(ER_UNKNOWN_COM, "08S01", f"Unknown command 0x{command:02x}"))

    def _dump(self, conn: Connection, session: Session, request: DumpRequest) -> None:
        refusal = self.refusal
        if refusal is not None:  # the primary's own answer to this position (it purged what it lacks)
            conn.write(err_packet(refusal[0], "HY000", refusal[1]))
            return
        try:
            stream = self.feed.open(request)
        except FeedError as exc:
            conn.write(err_packet(ER_MASTER_FATAL_ERROR_READING_BINLOG, "HY000", str(exc)))
            return
        self.served += 1
        period_ns = session.variable("master_heartbeat_period") or session.variable("source_heartbeat_period")
        heartbeat_s = int(period_ns) / 1e9 if period_ns else DEFAULT_HEARTBEAT_S
        dump = _Dump(conn, stream, request, self.facts.server_id, heartbeat_s)
        pushed = self.pushed and not isinstance(conn.sock, ssl.SSLSocket)  # TLS: one thread on a connection
        if pushed:
            with self._lock:
                self._dumps.add(dump)
        try:
            if pushed:
                self._pushed_stream(dump)
            else:
                self._pulled_stream(dump)
        except FeedError as exc:  # the feed lost its place: the replica is told, as by a source, and reconnects
            with dump.lock:
                conn.write(err_packet(ER_MASTER_FATAL_ERROR_READING_BINLOG, "HY000", str(exc)))
        finally:
            with self._lock:
                self._dumps.discard(dump)
            stream.close()

    def refuse(self, code: int, text: str) -> None:
        """From now on every dump is answered with this error (the primary's own, for a
        position it purged), the open ones too: their replicas reconnect and get it."""
        self.refusal = (code, text)
        with self._lock:
            for sock in list(self._sessions):
                try:  # its own thread sees the end and closes it
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def push(self) -> bool:
        """Send each dump everything the feed holds for it, from the thread that just added
        to it (the replica side's loop): no wakeup of the dump's own thread per
        transaction. A dump that fails here is closed; its thread sees it and ends it.
        True: something was sent."""
        with self._lock:
            dumps = list(self._dumps)
        sent = False
        for dump in dumps:
            try:
                with dump.lock:
                    while dump.serve(0):
                        sent = True
            except (BridgeError, OSError) as exc:
                log.info("relay: a dump ended: %s", exc)
                try:  # its own thread sees the end and closes it
                    dump.conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        return sent

    def _pushed_stream(self, dump: _Dump) -> None:
        """A plain connection's own thread: the ACKs the replica sends, the end of the
        connection, and a heartbeat when nothing was sent for its period; ``push`` sends
        the events (this thread too, what a push may have left)."""
        sock = dump.conn.sock
        while not self._stop.is_set():
            with dump.lock:
                if dump.conn.readable():
                    _take_acks(dump.conn, dump.stream, dump.asked)
                dump.serve(0)
                dump.heartbeat_if_quiet()
            select.select([sock], [], [], max(dump.sent_at + dump.heartbeat_s - time.monotonic(), 0.001))

    def _pulled_stream(self, dump: _Dump) -> None:
        """Over TLS, the connection's own thread does everything: it waits on the feed."""
        while not self._stop.is_set():
            if dump.asked and dump.conn.readable():
                _take_acks(dump.conn, dump.stream, dump.asked)
            if not dump.serve(ACK_POLL_S if dump.asked else dump.heartbeat_s):
                dump.heartbeat_if_quiet()


class _Dump:
    """One replica's dump: where it is in the primary's binlog (for heartbeats), the ACKs
    asked of it, and the lock under which one thread at a time uses its connection."""

    def __init__(self, conn: Connection, stream: Stream, request: DumpRequest, server_id: int,
                 heartbeat_s: float) -> None:
        self.conn, self.stream, self.request = conn, stream, request
        self.server_id, self.heartbeat_s = server_id, heartbeat_s
        self.file, self.position = request.file, request.position
        self.asked: dict[tuple[str, int], str] = {}  # (file, next position) of an event whose ACK is asked -> GTID
        self.sent_at = time.monotonic()
        self.lock = threading.Lock()
        self._out = bytearray()

    def serve(self, wait_s: float) -> bool:
        """The events the feed holds for it (waiting up to ``wait_s`` for the first), each
        behind the OK byte and, for a semi-sync replica, the semi-sync header, its flag set
        on a transaction's last event (the replica ACKs it once its relay log holds it);
        all in one send. False: there were none."""
        stream, semi, out = self.stream, self.request.semi_sync, self._out
        event = stream.next(wait_s)
        if event is None:
            return False
        while event is not None:  # an event, or several (the rest of a transaction) concatenated
            ask = semi and stream.ack_gtid is not None
            self.conn.seq, position = p.pack_events(out, event, self.conn.seq, semi, ask)
            if binlog.event_type(event) == binlog.ROTATE:
                self.file, self.position = binlog.rotate_target(event, 4 if self.request.checksum else 0)
            elif position:
                self.position = position
            if ask:
                self.asked[(self.file, self.position)] = stream.ack_gtid
            if len(out) >= SEND_BYTES:
                break
            event = stream.next(0)
        try:
            self.conn.sock.sendall(out)
        finally:
            out.clear()
        self.sent_at = time.monotonic()
        return True

    def heartbeat_if_quiet(self) -> None:
        """A heartbeat where nothing was sent for the replica's period: the file and
        position of the last event sent."""
        if time.monotonic() - self.sent_at >= self.heartbeat_s:
            beat = events.heartbeat(self.file, self.position, self.server_id, self.request.checksum)
            self.conn.write(SEMI_SYNC_NO_ACK + beat if self.request.semi_sync else b"\x00" + beat)
            self.sent_at = time.monotonic()


# a semi-sync dump's packet: OK byte, the magic, whether the replica must ACK this event
SEMI_SYNC_ACK, SEMI_SYNC_NO_ACK = b"\x00\xef\x01", b"\x00\xef\x00"
ACK_POLL_S = 0.0005  # while ACKs are due, how often the stream looks for them between events
SEND_BYTES = 256 << 10  # a dump's events sent at once, at most


def _take_acks(conn: Connection, stream: Stream, asked: dict[tuple[str, int], str]) -> None:
    """The semi-sync ACKs the replica sent (each names the file and position of an event
    that asked for it; it ACKs in order): every transaction up to the one named is received."""
    while conn.readable():
        reply = conn.read_reply()
        if reply[:1] != b"\xef" or len(reply) < 9:
            raise RemoteProtocolError(f"a semi-sync dump: the replica sent {reply[:16].hex()} where an ACK goes")
        acked = (reply[9:].decode("utf-8", "replace"), int.from_bytes(reply[1:9], "little"))
        if acked not in asked:
            continue  # an ACK of a transaction acknowledged already
        while asked:
            key = next(iter(asked))
            gtid = asked.pop(key)
            if key == acked:
                stream.received(gtid)
                break


def relay_tls_context(cert: str, key: str) -> ssl.SSLContext:
    """TLS as a source offers it: this certificate and key, no client certificate asked
    (a replica authenticates with its password; MariaDB 11.4+ and MySQL 8+ replicas ask
    for TLS by default)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"relay tls: certificate {cert} and key {key} cannot be loaded: "
                          f"{getattr(exc, 'reason', None) or getattr(exc, 'strerror', None) or exc}") from exc
    return context


def _dump_request(command: int, body: bytes, session: Session) -> DumpRequest:
    r = Reader(body, "the replica's binlog dump command")
    asked = session.variable("master_binlog_checksum") or session.variable("source_binlog_checksum")  # MySQL 8.0.26+
    checksum = str(asked or "NONE").upper() != "NONE"
    semi_sync = any(str(session.variable(n) or "0") not in ("0", "") for n in ("rpl_semi_sync_slave",
                                                                            "rpl_semi_sync_replica"))
    if command == p.COM_BINLOG_DUMP:
        position = r.u32()
        r.u16()  # flags
        server_id = r.u32()
        file = r.rest().rstrip(b"\0").decode()
        state = session.variable("slave_connect_state")
        return DumpRequest(file, position, server_id, checksum, mariadb_state=None if state is None else str(state),
                           capability=int(session.variable("mariadb_slave_capability") or 0),
                           gtids=_parsed(str(state or "")), semi_sync=semi_sync)
    flags = r.u16()
    server_id = r.u32()
    file = r.take(r.u32()).decode()
    position = r.u64()
    gtids = r.take(r.u32()) if r.left >= 4 else b""
    parts = decode_gtid_set(gtids) if gtids else []
    return DumpRequest(file, position, server_id, checksum, mysql_gtids=gtids, flags=flags,
                       gtids=_parsed(",".join(f"{key}:{a}-{b}" for key, ivs in parts for a, b in ivs)),
                       semi_sync=semi_sync)


def _parsed(text: str) -> GtidSet:
    try:
        return GtidSet.parse(text)
    except (ConfigError, ValueError) as exc:
        raise RemoteProtocolError(f"the replica's GTID position {text[:200]!r}: {exc}") from None


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


