"""Frozen per-component configuration with named defaults (units in the names).

Parsed only by the CLI; each component receives its own section as plain values.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from bridge.errors import ConfigError

DEFAULT_RING_BYTES = 8 * 1024 * 1024
# each URL option's password variable: used where its URL carries no password (the URL's own
# variable, e.g. RDMA_BRIDGE_SOURCE, holds the whole URL instead)
PASSWORD_ENV = {"source": "RDMA_BRIDGE_SOURCE_PASSWORD", "target": "RDMA_BRIDGE_TARGET_PASSWORD",
                "check_source": "RDMA_BRIDGE_CHECK_SOURCE_PASSWORD",
                "check_target": "RDMA_BRIDGE_CHECK_TARGET_PASSWORD",
                "clone_source": "RDMA_BRIDGE_CLONE_SOURCE_PASSWORD", "workload": "RDMA_BRIDGE_WORKLOAD_PASSWORD"}


# URL query options passed to the MySQL client (PyMySQL) for TLS and option files:
# mysql://user@host:port?ssl-ca=/ca.pem&ssl-cert=/c.pem&ssl-key=/k.pem&ssl-verify-cert=1
# mysql://user@host:port?defaults-file=/etc/rdma-bridge/my.cnf   ([client] password=... there)
# mysql://user@localhost?socket=/run/mysqld/mysqld.sock  (a server on this host, through its
# unix socket: cheaper per statement than TCP loopback; the account is then user@localhost)
# mysql://user@host:port?ssl-mode=DISABLED  (as the mysql client's --ssl-mode: PREFERRED, the
# default, takes TLS whenever the server offers it, as MySQL 8+ and MariaDB 11.4+ do;
# DISABLED never, and a caching_sha2_password account then sends its password RSA-encrypted
# with the server's public key; REQUIRED refuses a server without TLS, unverified)
URL_OPTIONS = {"ssl-ca": "ssl_ca", "ssl-cert": "ssl_cert", "ssl-key": "ssl_key",
               "ssl-verify-cert": "ssl_verify_cert", "ssl-verify-identity": "ssl_verify_identity",
               "defaults-file": "read_default_file", "defaults-group": "read_default_group",
               "socket": "unix_socket", "ssl-mode": "ssl_mode"}
SSL_MODES = {"disabled": {"ssl_disabled": True}, "preferred": {},
             "required": {"ssl": {"verify_mode": False, "check_hostname": False}}}
_FILE_OPTIONS = ("ssl-ca", "ssl-cert", "ssl-key", "defaults-file", "socket")
_FLAG_OPTIONS = ("ssl-verify-cert", "ssl-verify-identity")


@dataclass(frozen=True, slots=True)
class MysqlUrl:
    """``mysql://user:password@host:port[?options]``; ``str()`` never shows the password.
    Options (URL_OPTIONS): TLS files and flags, and a MySQL option file whose
    ``[client]`` section may hold the password (so it is neither in argv nor in the
    environment)."""

    host: str
    port: int
    user: str
    password: str = ""
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str, password_env: str | None = None) -> MysqlUrl:
        parts = urlsplit(text)
        if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
            raise ConfigError(f"parse url: {_mask(text)!r} is not mysql://user:password@host:port")
        password = unquote(parts.password or "")
        if not password and password_env:
            password = os.environ.get(password_env, "")
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise ConfigError(f"parse url: bad port in {_mask(text)!r}") from exc
        return cls(host=parts.hostname, port=port, user=unquote(parts.username or "root"), password=password,
                   options=_options(parts.query, _mask(text)))

    def __str__(self) -> str:
        secret = ":***" if self.password else ""
        query = "?" + "&".join(f"{k}={v}" for k, v in self.options) if self.options else ""
        return f"mysql://{self.user}{secret}@{self.host}:{self.port}{query}"

    def __repr__(self) -> str:
        return f"MysqlUrl({self})"

    def connect_args(self) -> dict:
        args = {"host": self.host, "port": self.port, "user": self.user, "password": self.password}
        for key, value in self.options:
            if key == "ssl-mode":
                args.update(SSL_MODES[value.lower()])
                continue
            args[URL_OPTIONS[key]] = value.lower() in ("1", "true", "yes", "on") if key in _FLAG_OPTIONS else value
        if "read_default_file" in args:
            args.setdefault("read_default_group", "client")
        return args


def tls_refusal(exc: BaseException) -> str | None:
    """Why a server's TLS certificate was refused, with the fix, if that is what a
    connection error (PyMySQL's, raised from the ssl module's) comes down to."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (f"its TLS certificate is refused ({cause.verify_message}): the URL's ssl-ca must be the CA that "
                "issued the server's certificate (and, with ssl-verify-identity, the certificate must name the host)")
    return None


def _options(query: str, shown: str) -> tuple[tuple[str, str], ...]:
    out = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in URL_OPTIONS:
            raise ConfigError(f"parse url {shown!r}: unknown option {key!r} (known: {', '.join(URL_OPTIONS)})")
        if key in _FILE_OPTIONS and not os.path.exists(value):
            raise ConfigError(f"parse url {shown!r}: {key} file {value!r} does not exist")
        if key == "ssl-mode" and value.lower() not in SSL_MODES:
            modes = ", ".join(m.upper() for m in SSL_MODES)
            raise ConfigError(f"parse url {shown!r}: ssl-mode {value!r}: one of {modes} "
                              "(to verify the server, give ssl-ca and ssl-verify-cert=1)")
        out.append((key, value))
    _load_tls_files(dict(out), shown)
    return tuple(out)


def _load_tls_files(options: dict, shown: str) -> None:
    """The URL's TLS files loaded once here, so that a wrong one is named at start (the
    client library would fail on it at each connection, in whichever thread)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for key, load in (("ssl-ca", lambda: ctx.load_verify_locations(cafile=options["ssl-ca"])),
                      ("ssl-cert", lambda: ctx.load_cert_chain(options["ssl-cert"], options.get("ssl-key")))):
        if key not in options:
            continue
        try:
            load()
        except (ssl.SSLError, OSError) as exc:
            what = "a PEM CA certificate" if key == "ssl-ca" else "a PEM certificate with its ssl-key"
            raise ConfigError(f"parse url {shown!r}: {key} {options[key]!r} is not {what} "
                              f"({getattr(exc, 'reason', None) or exc})") from exc


def _mask(text: str) -> str:
    parts = urlsplit(text)
    if parts.password:
        return text.replace(":" + parts.password + "@", ":***@")
    return text


def parse_replica(text: str, transports: tuple[str, ...]) -> tuple[tuple[str, int], str]:
    """``[TRANSPORT://]HOST:PORT``: the address, and the transport named, one of
    ``transports`` ("" where none is: the primary side's --transport)."""
    transport, sep, rest = text.partition("://")
    if not sep:
        return parse_hostport(text), ""
    if transport not in transports:
        raise ConfigError(f"parse address: {text!r} names the transport {transport!r}, not one of "
                          f"{', '.join(transports)}")
    return parse_hostport(rest), transport


def parse_hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or "/" in host:
        raise ConfigError(f"parse address: {text!r} is not HOST:PORT")
    return host or "127.0.0.1", int(port)


SECRET_ENV = "RDMA_BRIDGE_SECRET"


def read_secret(secret_file: str | None, env: str = SECRET_ENV) -> str:
    """A secret (the control channel's by default): a file's first line, or the environment ``env``."""
    if secret_file:
        try:
            with open(secret_file) as f:
                return f.readline().strip()
        except OSError as exc:
            raise ConfigError(f"read secret file {secret_file}: {exc.strerror}") from exc
    return os.environ.get(env, "") if env else ""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def backoff_s(attempt: int, first_s: float, max_s: float) -> float:
    """The one retry policy of both sides: wait ``first_s`` before the first retry,
    twice as long before each next one, at most ``max_s`` (attempts count from 1)."""
    return min(max_s, first_s * 2 ** (attempt - 1))


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """TLS on the bridge's own connections: this end's certificate and key, and the CA
    that must have signed the other end's certificate (both ends verify each other)."""

    cert: str
    key: str
    ca: str


@dataclass(frozen=True, slots=True)
class RdmaOptions:
    """Where an rdma queue pair runs and how its packets are marked (docs/operations.md, RoCE)."""
    device: str | None = None  # None: the device whose GID is the control connection's local address
    port: int | None = None  # None: that GID's port
    gid_index: int | None = None  # None: the GID of the control connection's local address
    traffic_class: int | None = None  # IP traffic class byte (DSCP << 2); None: the peer's, else 0
    service_level: int | None = None  # SL (the priority on a VLAN, the virtual lane on InfiniBand); None: as above

    def __post_init__(self) -> None:
        if self.traffic_class is not None and not 0 <= self.traffic_class <= 255:
            raise ConfigError(f"rdma traffic class: {self.traffic_class} is not 0-255 (DSCP << 2, e.g. 104 for "
                              "DSCP 26)")
        if self.service_level is not None and not 0 <= self.service_level <= 15:
            raise ConfigError(f"rdma service level: {self.service_level} is not 0-15")
        if self.port is not None and self.port < 1:
            raise ConfigError(f"rdma port: {self.port} (ports count from 1)")
        if self.gid_index is not None and self.gid_index < 0:
            raise ConfigError(f"rdma GID index: {self.gid_index} is negative")


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    target: MysqlUrl
    listen: tuple[str, int]
    secret: str = field(default="", repr=False)
    transport: str = "shm"
    ring_bytes: int = DEFAULT_RING_BYTES
    channel: str = "default"
    poll_idle_s: float = 0.0002
    spin_s: float = 0.0  # keep polling this long after the last frame before sleeping (pyverbs' rdma: 200 µs polls)
    group_max_txns: int = 1000  # consecutive small transactions applied as one replica transaction
    group_max_rows: int = 5000
    group_max_bytes: int = 8 << 20  # payload bytes; a group never waits for more frames (no time bound needed)
    workers: int = 1  # replica connections; above 1 a window of workers x the group bounds is split
    apply_mode: str = "auto"  # auto | binlog (row events applied by the server) | sql (rows as statements)
    reconnect_attempts: int = 60
    reconnect_backoff_s: float = 0.1
    reconnect_backoff_max_s: float = 2.0
    metrics: tuple[str, int] | None = None  # /metrics and /status; None: off
    delay_s: float = 0.0  # apply each transaction no earlier than this long after the primary side read its commit
    until_gtid: str = ""  # stop applying once the replica holds this GTID set
    account_statements: str = "auto"  # replay | leave-out | auto (replay where the apply user may manage accounts)
    tls: TlsFiles | None = None  # None: plain TCP (refused beyond loopback unless insecure_transport)
    insecure_transport: bool = False  # plain TCP beyond loopback, said at start
    # --include/--exclude/--rename-schema as bridge.filter.Filter.to_json(); "": not given
    # (the channel's recorded filter, if any, holds)
    channel_filter: str = ""
    rdma: RdmaOptions = RdmaOptions()
    # apply mode relay (bridge.node.relaying): where the replica server's channel connects,
    # whether this side points the channel there, and the password it logs in with ("": made at start)
    relay_listen: tuple[str, int] = ("127.0.0.1", 0)
    relay_configure: bool = True
    relay_password: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class PrimaryConfig:
    source: MysqlUrl
    replica: tuple[str, int]  # the first replica side (with one, the only)
    secret: str = field(default="", repr=False)
    transport: str = "shm"
    server_id: int = 4242
    replicas: tuple[tuple[str, int], ...] = ()  # fan-out: every replica side, the first first; () = (replica,)
    transports: tuple[str, ...] = ()  # fan-out: each replica side's transport, as ``replicas`` ("": ``transport``)
    semi_sync_quorum: int = 1  # fan-out: replica sides that must cover a transaction before its ACK
    # used only when the replica has no position yet; "" = the binlog's start; None: not
    # given (the binlog's start too, but refused where the replica already holds data)
    start_gtid: str | None = None
    backpressure_timeout_s: float = 5.0
    connect_timeout_s: float = 10.0
    heartbeat_s: float = 0.5
    chunk_bytes: int = 1 << 20  # larger transactions stream as chunks (at most ring/4 each)
    heartbeat_row_s: float = 0.0  # write rdma_bridge.heartbeat on the primary this often; 0: off
    heartbeat_table: str | None = None  # "schema.table": also keep a pt-heartbeat row there
    semi_sync: str = "off"  # off | received (ACK once placed in the ring) | applied (once committed)
    take_over: bool = False  # fence off a primary side already feeding the channel
    behind_poll_s: float = 1.0  # how often the primary side measures how far behind the replica is
    metrics: tuple[str, int] | None = None  # /metrics and /status; None: off
    reconnect_attempts: int = 60
    reconnect_backoff_s: float = 0.1
    reconnect_backoff_max_s: float = 2.0
    tls: TlsFiles | None = None  # None: plain TCP to the replica side
    rdma: RdmaOptions = RdmaOptions()

    def transport_of(self, address: tuple[str, int]) -> str:
        """The transport to the replica side at ``address`` (its own, else ``transport``)."""
        for replica, transport in zip(self.replicas, self.transports):
            if replica == address and transport:
                return transport
        return self.transport

    @property
    def transports_used(self) -> tuple[str, ...]:
        """Every transport some replica side is fed over, each once."""
        return tuple(dict.fromkeys(self.transport_of(a) for a in self.replicas or (self.replica,)))
