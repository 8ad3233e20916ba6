"""MySQL client/server packets as a server writes and reads them (pure): length-encoded
integers and strings, OK/ERR/EOF, the initial handshake and the client's answer to it, and
text result sets. Only what a replica's IO thread exchanges with its source."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bridge.errors import RemoteProtocolError

MAX_PAYLOAD = 0xFFFFFF  # a longer payload continues in the next packet(s)

# capability flags
CLIENT_LONG_PASSWORD = 1
CLIENT_LONG_FLAG = 4
CLIENT_CONNECT_WITH_DB = 8
CLIENT_PROTOCOL_41 = 0x200
CLIENT_SSL = 0x800
CLIENT_TRANSACTIONS = 0x2000
CLIENT_SECURE_CONNECTION = 0x8000
CLIENT_MULTI_STATEMENTS = 0x10000
CLIENT_MULTI_RESULTS = 0x20000
CLIENT_PLUGIN_AUTH = 0x80000
CLIENT_CONNECT_ATTRS = 0x100000
CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA = 0x200000
SERVER_CAPABILITIES = (CLIENT_LONG_PASSWORD | CLIENT_LONG_FLAG | CLIENT_CONNECT_WITH_DB | CLIENT_PROTOCOL_41
                       | CLIENT_TRANSACTIONS | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_STATEMENTS
                       | CLIENT_MULTI_RESULTS | CLIENT_PLUGIN_AUTH | CLIENT_CONNECT_ATTRS
                       | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
SERVER_STATUS_AUTOCOMMIT = 2
UTF8MB4_GENERAL_CI = 45

# commands
COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E
COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1E

# column types of the result sets answered here
TYPE_LONGLONG, TYPE_VAR_STRING = 0x08, 0xFD


def pack_into(out: bytearray, payload, seq_id: int) -> int:
    """``payload`` as the next packet(s), appended to ``out``; the next packet's number."""
    view = memoryview(payload)
    while True:
        part = view[:MAX_PAYLOAD]
        out += len(part).to_bytes(3, "little")
        out.append(seq_id)
        out += part
        seq_id = (seq_id + 1) % 256
        view = view[MAX_PAYLOAD:]
        if len(part) < MAX_PAYLOAD:
            return seq_id


def pack_events(out: bytearray, events, seq_id: int, semi_sync: bool, ack_last: bool) -> tuple[int, int]:
    """The binlog events concatenated in ``events`` as a dump's packets, appended to ``out``:
    each behind the OK byte and, for a semi-sync replica, the semi-sync header (its flag
    set on the last event where ``ack_last``). Returns (the next packet's number, the last
    nonzero next-event position of their headers, or 0). One call per transaction, not a
    step per event. RemoteProtocolError where the sizes in the headers do not add up."""
    at, end, position = 0, len(events), 0
    plain = b"\x00\xef\x00" if semi_sync else b"\x00"
    while at < end:
        size = int.from_bytes(events[at + 9:at + 13], "little") if end - at >= 19 else 0
        if size < 19 or at + size > end:
            raise RemoteProtocolError(f"binlog events: bad event size {size} at byte {at} of {end}")
        head = b"\x00\xef\x01" if ack_last and semi_sync and at + size == end else plain
        n = len(head) + size
        if n < MAX_PAYLOAD:
            out += n.to_bytes(3, "little")
            out.append(seq_id)
            out += head
            out += events[at:at + size]
            seq_id = (seq_id + 1) % 256
        else:  # a packet of its own over several
            seq_id = pack_into(out, head + bytes(events[at:at + size]), seq_id)
        position = int.from_bytes(events[at + 13:at + 17], "little") or position
        at += size
    return seq_id, position


def lenenc_int(value: int) -> bytes:
    if value < 0xFB:
        return bytes([value])
    if value < 1 << 16:
        return b"\xfc" + struct.pack("<H", value)
    if value < 1 << 24:
        return b"\xfd" + struct.pack("<I", value)[:3]
    return b"\xfe" + struct.pack("<Q", value)


def lenenc_str(value: bytes) -> bytes:
    return lenenc_int(len(value)) + value


class Reader:
    """Reads a packet's fields in order; a field that runs past the end is the peer's error."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.at, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise RemoteProtocolError(f"{self.what}: {len(self.data)} bytes end inside a field")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def lenenc(self) -> int:
        first = self.u8()
        if first < 0xFB:
            return first
        size = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
        if size is None:
            raise RemoteProtocolError(f"{self.what}: 0x{first:02x} is no length")
        return int.from_bytes(self.take(size), "little")

    def cstring(self) -> bytes:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise RemoteProtocolError(f"{self.what}: a string without its terminating NUL")
        out = self.data[self.at:end]
        self.at = end + 1
        return out

    def rest(self) -> bytes:
        out = self.data[self.at:]
        self.at = len(self.data)
        return out

    @property
    def left(self) -> int:
        return len(self.data) - self.at


def ok_packet(affected: int = 0, status: int = SERVER_STATUS_AUTOCOMMIT) -> bytes:
    return b"\x00" + lenenc_int(affected) + lenenc_int(0) + struct.pack("<HH", status, 0)


def err_packet(code: int, state: str, message: str) -> bytes:
    return b"\xff" + struct.pack("<H", code) + b"#" + state.encode()[:5].ljust(5, b"0") + message.encode()


def eof_packet(status: int = SERVER_STATUS_AUTOCOMMIT) -> bytes:
    return b"\xfe" + struct.pack("<HH", 0, status)


def handshake(version: str, connection_id: int, nonce: bytes, plugin: str, capabilities: int) -> bytes:
    """Protocol 10's initial handshake (``nonce``: 20 bytes)."""
    return (b"\x0a" + version.encode() + b"\0" + struct.pack("<I", connection_id) + nonce[:8] + b"\0"
            + struct.pack("<HBHH", capabilities & 0xFFFF, UTF8MB4_GENERAL_CI, SERVER_STATUS_AUTOCOMMIT,
                          capabilities >> 16)
            + bytes([len(nonce) + 1]) + bytes(10) + nonce[8:] + b"\0" + plugin.encode() + b"\0")


@dataclass(frozen=True, slots=True)
class ClientHello:
    capabilities: int
    user: str
    auth: bytes
    database: str
    plugin: str
    wants_tls: bool  # an SSL request: the rest comes after the TLS handshake


def client_hello(data: bytes) -> ClientHello:
    """The client's handshake response (or its SSL request, the first 32 bytes of one)."""
    r = Reader(data, "the replica's handshake response")
    caps = r.u32()
    r.take(4 + 1 + 23)  # max packet, character set, filler
    if r.left == 0 and caps & CLIENT_SSL:
        return ClientHello(caps, "", b"", "", "", True)
    user = r.cstring().decode()
    if caps & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA:
        auth = r.take(r.lenenc())
    elif caps & CLIENT_SECURE_CONNECTION:
        auth = r.take(r.u8())
    else:
        auth = r.cstring()
    database = r.cstring().decode() if caps & CLIENT_CONNECT_WITH_DB and r.left else ""
    plugin = r.cstring().decode() if caps & CLIENT_PLUGIN_AUTH and r.left else ""
    return ClientHello(caps, user, auth, database, plugin, False)


def auth_switch(plugin: str, nonce: bytes) -> bytes:
    return b"\xfe" + plugin.encode() + b"\0" + nonce + b"\0"


def column_definition(name: str, kind: int) -> bytes:
    raw = name.encode()
    return (lenenc_str(b"def") + lenenc_str(b"") + lenenc_str(b"") + lenenc_str(b"") + lenenc_str(raw)
            + lenenc_str(raw) + b"\x0c" + struct.pack("<HIBHB", UTF8MB4_GENERAL_CI, 1024, kind, 0, 0) + b"\0\0")


def result_set(names: list[str], rows: list[tuple]) -> list[bytes]:
    """A text result set's packets (classic EOF packets: no CLIENT_DEPRECATE_EOF is offered)."""
    kinds = [TYPE_LONGLONG if rows and all(isinstance(row[i], int) for row in rows) else TYPE_VAR_STRING
             for i in range(len(names))]
    out = [lenenc_int(len(names)), *(column_definition(n, k) for n, k in zip(names, kinds)), eof_packet()]
    for row in rows:
        out.append(b"".join(b"\xfb" if v is None else lenenc_str(str(v).encode()) for v in row))
    out.append(eof_packet())
    return out
