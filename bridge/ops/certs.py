"""Certificates for a private channel, made with the ``openssl`` command: a CA, and
certificates it signs for named hosts, good both for serving and for connecting
(extended key usage serverAuth and clientAuth), so one file pair serves a bridge
end, a MariaDB server and an operator's command on that host.

Used by ``rdma-bridge tls-certs`` (a first set for two hosts), the sandbox
(``sandbox up --tls``) and the tests. Writes files only; no decisions about them
(bridge.transport.tls checks and uses them)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bridge.errors import ConfigError

CA_DAYS, CERT_DAYS = 3650, 825  # 825: the longest validity common clients still accept
CURVE = "prime256v1"


@dataclass(frozen=True, slots=True)
class CertFiles:
    cert: Path
    key: Path
    ca: Path


def make_ca(out: Path, name: str = "rdma-bridge CA", days: int = CA_DAYS) -> Path:
    """``out``/ca.pem and ca-key.pem (0600); returns the certificate's path."""
    out.mkdir(parents=True, exist_ok=True)
    ca, key = out / "ca.pem", out / "ca-key.pem"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", f"ec_paramgen_curve:{CURVE}", "-nodes",
             "-keyout", key, "-out", ca, "-days", days, "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    key.chmod(0o600)
    return ca


def make_cert(out: Path, stem: str, names: list[str], ca: Path, days: int = CERT_DAYS) -> CertFiles:
    """``out``/STEM.pem and STEM-key.pem (0600), signed by ``ca`` (its key beside it
    as ca-key.pem), valid for ``names`` (host names and IP addresses). ``days`` may be
    negative: a certificate that expired (not after = now - days), for tests."""
    out.mkdir(parents=True, exist_ok=True)
    cert, key, csr, ext = out / f"{stem}.pem", out / f"{stem}-key.pem", out / f"{stem}.csr", out / f"{stem}.ext"
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=" + ",".join(map(_san, names)) + "\n")
    try:
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", f"ec_paramgen_curve:{CURVE}", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", f"/CN={names[0]}")
        key.chmod(0o600)
        _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca.with_name("ca-key.pem"), "-CAcreateserial",
                 "-out", cert, "-days", days, "-extfile", ext)
    finally:
        for scratch in (csr, ext, ca.with_name("ca.srl")):
            scratch.unlink(missing_ok=True)
    return CertFiles(cert, key, ca)


def make_set(out: Path, names: list[str]) -> CertFiles:
    """A certificate for ``names`` (files named after the first) and the CA in ``out``
    that signs it, made there once and kept: a second call for another host gives
    a second certificate of the same CA."""
    ca = out / "ca.pem"
    if not ca.exists():
        make_ca(out)
    return make_cert(out, names[0], names, ca)


def _san(name: str) -> str:
    try:
        return f"IP:{ipaddress.ip_address(name)}"
    except ValueError:
        return f"DNS:{name}"


def _openssl(*args) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise ConfigError("make certificates: the openssl command is missing ('apt-get install openssl')")
    done = subprocess.run([binary, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "OPENSSL_CONF": "/dev/null"})
    if done.returncode != 0:
        raise ConfigError(f"make certificates: openssl {args[0]} failed: {done.stderr.strip()[-400:]}")
