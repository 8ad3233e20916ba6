"""The binlog dump's connection (PyMySQL's, adapted): packets read, not parsed.

Once the dump command is sent every packet is an event: ``read_stream_packet`` reads
one straight from the buffered socket (the semi-sync header taken off, an ACK request
noted), ``take_transaction`` a whole common transaction at once when its packets are
buffered (``bridge.wire.hotpath.scan_transaction``). A lost or silent connection is
``SourceConnectionLost``, never the library's own reconnect (which replays from its
first position and would deliver duplicates). ``BinlogReader`` (reader.py) owns it.

A subclass of PyMySQL's Connection, it uses its private parts (the buffered socket file,
the packet sequence number, the raw write) as its own; bridge.server.dbconn checks at import
that the installed PyMySQL is one they were tested with.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections import deque

import pymysql

from bridge.errors import SourceConnectionLost
from bridge.server import dbconn
from bridge.source import lanes
from bridge.wire import binlog, compressed
from bridge.wire.hotpath import MAX_PACKET, SEMI_SYNC_ACK_REQUESTED, SEMI_SYNC_MAGIC
from bridge.wire.native import hot

LIBRARY = object()  # "let the library decode this packet" (a fast path's answer)


class Handled(Exception):  # control flow between this module and reader.py, never seen outside them
    """Our fast path took the event: it leaves the library's fetchone by this exception."""

    def __init__(self, event) -> None:
        super().__init__()
        self.event = event


_DUMP_COMMANDS = (0x12, 0x1E)  # COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID
_SEMI_SYNC_HEADER = bytes([0, SEMI_SYNC_MAGIC])  # OK marker, then 0xEF and a flag byte before the event


class StreamConnection(pymysql.connections.Connection):
    """Raises our error on a lost connection so the library cannot silently replay.
    Once the dump runs, ``fast_path`` (set per reader) sees each event packet first
    and may take it itself (see ``BinlogReader._fast_event``)."""

    fast_path = None
    semi_sync = False  # announce a semi-sync replica; strip the 0xEF header; note ACK requests
    semi_sync_variable = "@rpl_semi_sync_slave"  # MySQL's source plugin: @rpl_semi_sync_replica (bridge.server.flavor)
    ack_wanted: int | None = None  # next-event position of the last event that asked for an ACK
    dumping = False  # the dump command was sent: every packet from here is an event
    stashed = None  # a packet BinlogReader read itself but leaves to the library
    _stall_s: float | None = None  # the read timeout, once the kernel keeps it (SO_RCVTIMEO)
    _inner: deque | None = None  # the rest of a compressed transaction's events, as packets
    verbatim = False  # relay apply mode: a compressed transaction stays one event, as the primary wrote it

    def _write_bytes(self, data) -> None:
        if len(data) > 4 and data[4] in _DUMP_COMMANDS:
            if self.semi_sync:
                self.query(f"SET {self.semi_sync_variable}=1")  # before the dump, or the server sends no header
                self._next_seq_id = 0
            self.dumping = True
            if not isinstance(self._sock, ssl.SSLSocket):  # every answer before it was read whole: nothing is buffered
                self._rfile = lanes.DumpReader(self._sock)  # whose buffer the ship lane reads too
        super()._write_bytes(data)

    def _read_packet(self, packet_type=pymysql.connections.MysqlPacket):
        if not self.dumping:
            return super()._read_packet(packet_type)
        if self.stashed is not None:
            data, self.stashed = self.stashed, None
        else:
            data = self.read_stream_packet()
            if self.fast_path is not None:
                event = self.fast_path(data)
                if event is not LIBRARY:
                    raise Handled(event)
        return packet_type(data, self.encoding)

    def read_stream_packet(self) -> bytes:
        """The next packet's payload once the dump runs, read here rather than by
        PyMySQL (no packet object per event), the semi-sync header taken off (ACK
        request noted). A silent server ends the read after the kernel's receive
        timeout (``_kernel_timeout``): no poll() before each read (over TLS, Python's)."""
        if self._inner:
            return self._inner.popleft()
        if self._stall_s is None:
            self._kernel_timeout()
        rfile, parts = self._rfile, []
        while True:
            try:
                header = rfile.read(4)  # None: the receive timeout passed
                if header is None or len(header) < 4:
                    raise self._stream_lost(header)
                if header[3] != self._next_seq_id:
                    raise self._stream_lost(f"packet number {header[3]}, expected {self._next_seq_id}")
                self._next_seq_id = (self._next_seq_id + 1) % 256
                length = int.from_bytes(header[:3], "little")
                data = rfile.read(length)
            except OSError as exc:
                raise self._lost_reading(exc) from exc
            if data is None or len(data) < length:
                raise self._stream_lost(data)
            if length < MAX_PACKET or parts:
                parts.append(data)
            if length < MAX_PACKET:
                break
        if len(parts) > 1:
            data = b"".join(parts)
        if data[:1] == b"\xff":
            pymysql.connections.MysqlPacket(data, self.encoding).raise_for_error()
        if self.semi_sync and data[:2] == _SEMI_SYNC_HEADER:
            # 0x00 | 0xEF | flag | event: the library would choke on the two extra bytes
            flag, data = data[2], b"\0" + data[3:]
            if flag & SEMI_SYNC_ACK_REQUESTED:
                self.ack_wanted = int.from_bytes(data[14:18], "little")  # header log_pos
                self._next_seq_id = 1  # the server numbers afresh after an event that wants an ACK
        if len(data) > 5 and data[5] == binlog.TRANSACTION_PAYLOAD and not self.verbatim:
            # MySQL's compressed transaction: its events handed on one by one
            first, *rest = (b"\0" + event for event in compressed.expand(bytes(data[1:])))
            self._inner = deque(rest)
            return first
        return data

    def take_transaction(self, max_bytes: int, gtid_first: bool) -> tuple[str | None, bytes, tuple, int, int] | None:
        """(GTID, events, tables, row events, commit position) of a transaction (or
        of the rest of one, after its GTID event) when ``hotpath.scan_transaction``
        finds it whole in the buffered packets; they are then taken (seq id and ACK
        request noted as read_stream_packet does). None: nothing taken. With nothing
        buffered this waits for the next packet as a read does, with the same
        timeout and the same errors."""
        buffered = self.buffered_packets()
        if buffered is None:
            return None
        scanned = hot.scan_transaction(buffered, self._next_seq_id, self.semi_sync, max_bytes, gtid_first)
        if scanned is None:
            return None
        taken, seq_id, gtid, data, tables, events, commit_position, ack = scanned
        self.take(taken, seq_id, ack)
        return gtid, data, tables, events, commit_position

    def take_verbatim(self, max_bytes: int) -> tuple[str, bytes, int, int] | None:
        """Relay apply mode, between transactions: (GTID, its events as the primary wrote
        them, how many, commit position) when ``hotpath.scan_verbatim`` finds a common
        transaction whole in the buffered packets (then taken); else None, as
        ``take_transaction``."""
        buffered = self.buffered_packets()
        if buffered is None:
            return None
        scanned = hot.scan_verbatim(buffered, self._next_seq_id, self.semi_sync, max_bytes)
        if scanned is None:
            return None
        taken, seq_id, gtid, data, events, commit_position, ack = scanned
        self.take(taken, seq_id, ack)
        return gtid, data, events, commit_position

    def place_buffered(self, place):
        """``place(buffered packets, next packet's number, semi-sync headers)``; what
        it says it used (``.taken``, ``.seq_id``, ``.ack``) is taken. See
        ``BinlogReader.take_run``."""
        packets = self.buffered_packets()
        if packets is None:
            return None
        run = place(packets, self._next_seq_id, self.semi_sync)
        if run is not None:
            self.take(run.taken, run.seq_id, run.ack)
        return run

    def buffered_packets(self) -> bytes | None:
        """The packets buffered now, for a one-call path to scan (``take`` then takes
        what it used), after waiting for the next one as a read does (same timeout,
        same errors) when none is; None where only the per-event path may read (the
        dump not started, a packet stashed for the library) or when the wait ended
        just as a packet arrived."""
        if not self.dumping or self.stashed is not None or self._stall_s is None or self._inner:
            return None
        try:
            buffered = self._rfile.peek(1)
        except OSError as exc:
            raise self._lost_reading(exc) from exc
        if not buffered:
            lost = self._nothing_read()
            if lost is not None:
                raise lost
            return None
        return buffered

    @property
    def dump_reader(self):
        """The dump's reader the ship lane shares (``lanes.DumpReader``), or None: the
        dump not started, or over TLS (PyMySQL's file reads the TLS socket)."""
        rfile = self._rfile
        return rfile if self.dumping and self._stall_s is not None and isinstance(rfile, lanes.DumpReader) and \
            not self._inner else None

    def run_lane(self, lane, wait_ms: int, ack_file: bytes | None = None, ack_wait_us: int = 0,
                 file: bytes | None = None) -> int:
        """``lane.run`` from this connection's next packet number on (see bridge.source.ship);
        the packets it read are read here too when it raises (a lost link keeps the dump)."""
        try:
            return lane.run(self._next_seq_id, wait_ms, ack_file, ack_wait_us, file)
        finally:
            self._next_seq_id = lane.seq_id

    def stalled(self) -> SourceConnectionLost:
        """The error of a read that found nothing for the read timeout (the connection closed)."""
        return self._stream_lost(None)

    def take(self, taken: int, seq_id: int, ack: int) -> None:
        """``taken`` bytes of ``buffered_packets`` used: read them off, note the next
        packet's number and the ACK position asked for (-1: none)."""
        self._rfile.read(taken)
        self._next_seq_id = seq_id
        if ack >= 0:
            self.ack_wanted = ack

    def readable_now(self) -> bool:
        """Whether the next read finds bytes at once, buffered here or in the kernel (a
        peek with the socket non-blocking for a moment; its SO_RCVTIMEO stays). Also
        True when the read would fail: it is the read that says why."""
        if not self.dumping or self.stashed is not None or self._stall_s is None or self._inner:
            return True
        sock, timeout = self._sock, self._sock.gettimeout()
        sock.settimeout(0.0)
        try:
            return bool(self._rfile.peek(1))
        except ssl.SSLWantReadError:
            return False
        except OSError:
            return True
        finally:
            sock.settimeout(timeout)

    def _nothing_read(self) -> SourceConnectionLost | None:
        """A read that got nothing: the server closed the connection or the receive
        timeout passed (a peek reports both alike; the socket tells them apart), or
        None when a packet arrived just now. Over TLS (PyMySQL takes it whenever the
        server offers it, as MariaDB 11.4+ does by default) a timeout raises instead
        (``_lost_reading``), so nothing read is the server's close."""
        if isinstance(self._sock, ssl.SSLSocket):
            return self._stream_lost(b"")
        try:
            if self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                return None
            return self._stream_lost(b"")
        except BlockingIOError:
            return self._stream_lost(None)
        except OSError as exc:
            return self._stream_lost(str(exc))

    def _lost_reading(self, exc: OSError) -> SourceConnectionLost:
        """A read that failed; over TLS the read timeout ends it so (TimeoutError)."""
        return self._stream_lost(None if isinstance(exc, (TimeoutError, ssl.SSLWantReadError)) else str(exc))

    def _stream_lost(self, why: str | bytes | None) -> SourceConnectionLost:
        """``why``: what went wrong, or what was read short (None: the timeout passed)."""
        dbconn.force_close(self)
        if why is None:
            why = f"nothing for {self._stall_s:g}s, not even a heartbeat"
        elif isinstance(why, bytes):
            why = "the server closed it"
        return SourceConnectionLost(f"binlog stream from {self.host}:{self.port}: connection lost ({why})")

    def _kernel_timeout(self) -> None:
        """The read timeout as SO_RCVTIMEO on a blocking socket (a Python-level
        timeout polls before every read). Not over TLS: OpenSSL retries a read the
        kernel's timeout ended, for ever, so there the timeout stays Python's."""
        self._stall_s = seconds = self._read_timeout or 0
        if isinstance(self._sock, ssl.SSLSocket):
            self._sock.settimeout(seconds or None)
        else:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                  struct.pack("ll", int(seconds), int(seconds % 1 * 1e6)))
            self._sock.settimeout(None)  # blocking from here: PyMySQL's writes keep it so (their timeout is None)
        self._current_timeout = self._read_timeout = self._write_timeout = None
