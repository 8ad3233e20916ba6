"""PyMySQL's private parts, every use outside the binlog stream's own connection class
(bridge/source/stream.py, a PyMySQL Connection subclass) in one place, checked against
the installed PyMySQL at import: a version outside ``TESTED_SERIES`` fails loudly here,
before a connection is made, because each function below reaches past PyMySQL's public
interface and may mean something else in another release.

What is used, and why:
- the connection's socket (``raw_socket``): its low-water mark, keepalive, a probe's
  timeout, and the compiled apply lane, which writes and reads on it directly;
- ``no_read_timeout``: PyMySQL has no public setter, and a DDL may run for hours;
- ``force_close``: drop a connection whose bytes can no longer be trusted (a lane's
  round trip cut short), so the next use reconnects;
- ``send_query`` / ``next_answer``: a script's answers read one first byte each, with no
  result objects (once per replicated transaction on the general path);
- ``send_raw``: the semi-sync ACK packet on the dump connection;
- ``_create_ssl_ctx``: a TLS context that verifies nothing (no CA given: ssl-mode
  PREFERRED, PyMySQL's default, or REQUIRED) is made once per process, not once per
  connection. PyMySQL loads the system's CA store into each one, which it then does not
  use: ~50 ms of CPU per connection here, which a monitor retrying an absent server
  every second turned into 5% of a core.

``connect`` is the one factory of connections to a server (the binlog dump's excepted:
the binlog library makes it, from the same URL arguments).
"""

from __future__ import annotations

import socket
import ssl
import threading
from importlib import metadata

import pymysql
from pymysql.constants import COMMAND

from bridge.config import MysqlUrl
from bridge.errors import ConfigError
from bridge.server import errorcodes

LIBRARY = "PyMySQL"
TESTED_SERIES = ("1.2",)  # major.minor releases the test suite passed against (setup.cfg pins the range)


def check_version(installed: str | None = None) -> str:
    """The installed PyMySQL version, or ConfigError naming it and the tested series."""
    try:
        installed = installed or metadata.version(LIBRARY)
    except metadata.PackageNotFoundError as exc:
        raise ConfigError(f"{LIBRARY} is not installed (pip install '{LIBRARY}>=1.2,<1.3')") from exc
    if ".".join(installed.split(".")[:2]) not in TESTED_SERIES:
        raise ConfigError(f"{LIBRARY} {installed} is installed, but rdma-bridge reaches into its private parts and "
                          f"was tested only with {', '.join(s + '.x' for s in TESTED_SERIES)}: install "
                          f"'{LIBRARY}>=1.2,<1.3' (the range setup.cfg pins)")
    return installed


VERSION = check_version()
CONNECT_TIMEOUT_S = 10


class _Connection(pymysql.Connection):
    _unverified: dict[tuple, ssl.SSLContext] = {}
    _unverified_lock = threading.Lock()

    def _create_ssl_ctx(self, sslp):
        if isinstance(sslp, ssl.SSLContext) or {"ca", "capath", "cert", "key"} & set(sslp):
            return super()._create_ssl_ctx(sslp)
        key = tuple(sorted(sslp.items()))
        with self._unverified_lock:
            if key not in self._unverified:
                self._unverified[key] = super()._create_ssl_ctx(sslp)
            return self._unverified[key]


def connect(url: MysqlUrl, **options) -> pymysql.Connection:
    """Every connection of the bridge to a server: the whole URL (its TLS files, socket
    and option file: ``MysqlUrl.connect_args``), utf8mb4 and a connect timeout, then
    the caller's ``options`` (autocommit, read timeout, flags). PyMySQL's errors pass
    through: each caller says what it was connecting for."""
    return _Connection(**{"charset": "utf8mb4", "connect_timeout": CONNECT_TIMEOUT_S, **url.connect_args(),
                              **options})


def raw_socket(conn: pymysql.Connection) -> socket.socket | None:
    """The connection's socket (None once closed)."""
    return conn._sock


def no_read_timeout(conn: pymysql.Connection) -> None:
    conn._read_timeout = None


def force_close(conn: pymysql.Connection) -> None:
    conn._force_close()


def send_raw(conn: pymysql.Connection, data: bytes) -> None:
    """Bytes written on the connection as they are (a packet the caller framed)."""
    conn._write_bytes(data)


def send_query(conn: pymysql.Connection, query: bytes) -> None:
    """A COM_QUERY sent, its answers left to read (``next_answer``)."""
    conn._execute_command(COMMAND.COM_QUERY, query)


def next_answer(conn: pymysql.Connection) -> int:
    """The first byte of the next answer packet, consumed (0: OK); an error packet is
    read by PyMySQL, which raises the server's error. Short reads are a lost
    connection, as in PyMySQL."""
    rfile = conn._rfile
    try:
        header = rfile.peek(5)[:5] if rfile is not None else b""
        if len(header) < 5 or header[3] != conn._next_seq_id:
            return conn._read_packet()._data[0]  # PyMySQL reads it and raises what is wrong
        if header[4] == 0xFF:
            conn._read_packet()  # raises the server's error (PyMySQL parses it)
            return 0xFF
        length = int.from_bytes(header[:3], "little")
        whole = len(rfile.read(4 + length)) == 4 + length and length < 0xFFFFFF
    except OSError as exc:
        conn._force_close()
        raise pymysql.OperationalError(errorcodes.LOST_DURING_QUERY,
                                       f"Lost connection to the server during query ({exc})") from exc
    if not whole:
        conn._force_close()
        raise pymysql.OperationalError(errorcodes.LOST_DURING_QUERY, "Lost connection to the server during query")
    conn._next_seq_id = (conn._next_seq_id + 1) % 256
    return header[4]
