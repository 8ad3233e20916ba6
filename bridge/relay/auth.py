"""The password checks of the two plugins a replica's IO thread authenticates with
(pure): ``mysql_native_password`` (MariaDB) and ``caching_sha2_password`` (MySQL 8 on;
MySQL 9 has no other). The relay knows the password it expects, so a client's scramble
is checked against it directly: caching_sha2's fast path always applies, and no
password ever crosses the connection, with TLS or without."""

from __future__ import annotations

import hashlib
import hmac
import os

NATIVE = "mysql_native_password"
CACHING_SHA2 = "caching_sha2_password"
FAST_AUTH_SUCCESS = b"\x01\x03"  # caching_sha2's "more data" packet: the scramble matched


def nonce() -> bytes:
    """20 bytes for the handshake, none of them NUL (the handshake carries them NUL-terminated)."""
    return bytes(b % 255 + 1 for b in os.urandom(20))


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def native_scramble(password: str, salt: bytes) -> bytes:
    if not password:
        return b""
    stage1 = hashlib.sha1(password.encode()).digest()
    return _xor(stage1, hashlib.sha1(salt + hashlib.sha1(stage1).digest()).digest())


def sha2_scramble(password: str, salt: bytes) -> bytes:
    if not password:
        return b""
    stage1 = hashlib.sha256(password.encode()).digest()
    return _xor(stage1, hashlib.sha256(hashlib.sha256(stage1).digest() + salt).digest())


def matches(plugin: str, password: str, salt: bytes, answer: bytes) -> bool:
    """Whether ``answer`` is ``plugin``'s scramble of ``password`` with ``salt``."""
    expected = (native_scramble if plugin == NATIVE else sha2_scramble)(password, salt)
    return hmac.compare_digest(expected, bytes(answer))
