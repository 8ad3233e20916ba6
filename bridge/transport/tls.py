"""TLS on the bridge's own TCP connections: the control channel, the tcp transport's
data connection, the rdma transport's setup connection and the operator's admin
requests. Both ends present a certificate and verify the other's against --tls-ca
(mutual authentication); the connecting end also checks that the replica side's
certificate names the address it dialled. The shared secret is still proven inside.

Owns: building the contexts (TLS 1.2 or newer, forward-secret AEAD suites only),
checking the files before anything starts (readable, key not world-readable, key
matches certificate, chain and expiry), wrapping sockets with errors that say
whose certificate failed and why. A plain-TCP peer meets a clear refusal, not a
hang: the listener waits briefly for a TLS ClientHello and otherwise answers in
plain text that TLS is required (``PLAIN_REFUSAL``)."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import stat
import time

from bridge.config import TlsFiles
from bridge.errors import AuthenticationError, ConfigError, RemoteProtocolError, TransportError

log = logging.getLogger(__name__)
CIPHERS_TLS12 = "ECDHE+AESGCM:ECDHE+CHACHA20"  # TLS 1.3's own suites are all of this kind
CLIENT_HELLO_WAIT_S = 2.0  # a TLS client speaks first at once; silence this long is a plain client
EXPIRY_WARNING_DAYS = 30
_HANDSHAKE_RECORD = 0x16  # the first byte of every TLS ClientHello (RFC 8446 5.1)
_OPTIONS = {"cert": "--tls-cert", "key": "--tls-key", "ca": "--tls-ca"}


def prepare(files: TlsFiles | None, server_side: bool) -> ssl.SSLContext | None:
    """The files checked (warnings logged) and this end's context; None: plain TCP."""
    if files is None:
        return None
    for warning in check_files(files):
        log.warning("%s", warning)
    return server_context(files) if server_side else client_context(files)


def client_context(files: TlsFiles) -> ssl.SSLContext:
    return _context(ssl.PROTOCOL_TLS_CLIENT, files)


def server_context(files: TlsFiles) -> ssl.SSLContext:
    return _context(ssl.PROTOCOL_TLS_SERVER, files)


def _context(protocol: int, files: TlsFiles) -> ssl.SSLContext:
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(CIPHERS_TLS12)
    ctx.verify_mode = ssl.CERT_REQUIRED  # the server side too: mutual authentication
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except ssl.SSLError as exc:
        why = "does not match it" if "KEY_VALUES_MISMATCH" in str(exc) else f"cannot be loaded ({exc.reason})"
        raise ConfigError(f"tls: --tls-key {files.key} {why} (--tls-cert {files.cert})") from exc
    except OSError as exc:
        raise ConfigError(f"tls: --tls-cert {files.cert} / --tls-key {files.key}: {exc.strerror or exc}") from exc
    try:
        ctx.load_verify_locations(cafile=files.ca)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"tls: --tls-ca {files.ca} cannot be loaded ({getattr(exc, 'reason', None) or exc})") \
            from exc
    return ctx


# --- checks before start (both start commands, admin requests, doctor) ---------------

def check_files(files: TlsFiles) -> list[str]:
    """Raise ConfigError for what cannot work; return warnings (a certificate that
    expires soon). The chain is checked by a handshake of this end with itself, in
    memory, by OpenSSL: our certificate must verify against our CA as the peer's does."""
    for field, option in _OPTIONS.items():
        path = getattr(files, field)
        try:
            mode = os.stat(path).st_mode
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise ConfigError(f"tls: {option} {path}: {exc.strerror}") from exc
        if field == "key" and mode & stat.S_IROTH:
            raise ConfigError(f"tls: --tls-key {path} is readable by every user (mode {stat.S_IMODE(mode):04o}): "
                              f"chmod 600 {path}")
    server, client = server_context(files), client_context(files)
    client.check_hostname = False  # names are for the peer that dials a host, checked then
    peer = _handshake_in_memory(server, client, files)
    return _expiry_warnings(peer, files)


def _handshake_in_memory(server: ssl.SSLContext, client: ssl.SSLContext, files: TlsFiles) -> dict:
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    ends = [(client.wrap_bio(c_in, c_out), c_out, s_in), (server.wrap_bio(s_in, s_out, server_side=True), s_out, c_in)]
    done = set()
    for _ in range(8):
        for i, (end, out, peer_in) in enumerate(ends):
            try:
                end.do_handshake()
                done.add(i)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError as exc:
                raise ConfigError(f"tls: --tls-cert {files.cert} does not verify against --tls-ca {files.ca}: "
                                  f"{exc.verify_message}") from exc
            except ssl.SSLError as exc:
                raise ConfigError(f"tls: --tls-cert {files.cert} cannot serve a TLS session: {exc.reason}") from exc
            peer_in.write(out.read())
        if len(done) == 2:
            return ends[0][0].getpeercert()
    raise ConfigError(f"tls: a handshake with --tls-cert {files.cert} did not finish")


def _expiry_warnings(cert: dict, files: TlsFiles) -> list[str]:
    ends = ssl.cert_time_to_seconds(cert["notAfter"])
    days = (ends - time.time()) / 86400
    if days < EXPIRY_WARNING_DAYS:
        return [f"tls: --tls-cert {files.cert} expires in {days:.0f} days ({cert['notAfter']}): renew it"]
    return []


# --- connections ------------------------------------------------------------------

def wrap_client(ctx: ssl.SSLContext, sock: socket.socket, host: str, port: int) -> ssl.SSLSocket:
    """The connecting end's handshake (the socket's timeout bounds it). A failure
    names whose certificate was refused, by whom, and why."""
    where = f"{host}:{port}"
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        raise AuthenticationError(f"tls handshake with {where}: its certificate is refused: {exc.verify_message} "
                                  f"(it must be issued by --tls-ca and name {host})") from exc
    except ssl.SSLError as exc:
        sock.close()
        raise _handshake_error(exc, where, "the replica side") from exc
    except OSError as exc:
        sock.close()
        raise TransportError(f"tls handshake with {where}: {exc.strerror or exc}") from exc


def accept(ctx: ssl.SSLContext, sock: socket.socket, peer: str) -> ssl.SSLSocket:
    """The listening end: a TLS session, or PlainClient for a plain-TCP peer (the
    caller answers it with PLAIN_REFUSAL, in plain text)."""
    if not _speaks_tls(sock):
        raise PlainClient(f"connection from {peer}: plain TCP, but this replica side requires TLS")
    try:
        return ctx.wrap_socket(sock, server_side=True)
    except ssl.SSLError as exc:
        raise _handshake_error(exc, peer, "the connecting side") from exc
    except OSError as exc:
        raise TransportError(f"tls handshake with {peer}: {exc.strerror or exc}") from exc


class PlainClient(RemoteProtocolError):
    """A peer without TLS reached a listener that requires it."""


PLAIN_REFUSAL = ("this replica side requires TLS: give the connecting side --tls-cert, --tls-key and --tls-ca "
                 "(certificates issued by the CA the replica side trusts)")


def _speaks_tls(sock: socket.socket) -> bool:
    previous = sock.gettimeout()
    sock.settimeout(CLIENT_HELLO_WAIT_S)
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        return False  # waiting for us to speak first: our plain protocol's challenge
    finally:
        sock.settimeout(previous)
    if not first:
        raise TransportError(f"connection from {_peer(sock)}: closed before the TLS handshake")
    return first[:1] == bytes([_HANDSHAKE_RECORD])


def _peer(sock: socket.socket) -> str:
    try:
        return "%s:%d" % sock.getpeername()[:2]
    except OSError:
        return "peer"


def _handshake_error(exc: ssl.SSLError, where: str, them: str) -> BaseException:
    reason = exc.reason or str(exc)
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "UNEXPECTED_EOF_WHILE_READING", "HTTP_REQUEST") \
            or "wrong version" in str(exc):
        return RemoteProtocolError(f"tls handshake with {where}: {them} does not speak TLS ({reason}); start it "
                                   "with --tls-cert, --tls-key and --tls-ca too")
    return certificate_refusal(exc, f"tls handshake with {where}") or \
        RemoteProtocolError(f"tls handshake with {where}: {reason}")


def certificate_refusal(exc: ssl.SSLError, context: str) -> AuthenticationError | None:
    """A certificate refused by either end (TLS 1.3 tells a client that its own was
    refused only at its first read, as an alert): no retry can mend it."""
    reason = exc.reason or ""
    if not any(word in reason for word in ("CERTIFICATE", "UNKNOWN_CA")):
        return None
    return AuthenticationError(f"{context}: refused ({reason.lower().replace('_', ' ')}): both ends' certificates "
                               "must be issued by the CA the other end trusts (--tls-ca), and be valid now")
