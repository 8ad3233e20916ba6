"""What a server knows of collations, read through any DB-API cursor (no driver
imported here): both sides name the ids a statement's session was logged with.

MariaDB 11 lists its uca1400 collations (ids above 2047, the default utf8mb4 one
among them) only in ``information_schema.COLLATION_CHARACTER_SET_APPLICABILITY``,
with a ``FULL_COLLATION_NAME`` and an ``ID``; older servers and MySQL list every
collation in ``COLLATIONS``.
"""

from __future__ import annotations

Collations = dict[int, tuple[str, str]]  # collation id -> (collation name, character set name)


def read_collations(cur) -> Collations:
    cur.execute("SELECT ID, COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLLATIONS "
                "WHERE ID IS NOT NULL")
    found = {int(i): (name, charset) for i, name, charset in cur.fetchall()}
    cur.execute("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA='information_schema' "
                "AND TABLE_NAME='COLLATION_CHARACTER_SET_APPLICABILITY' AND COLUMN_NAME='FULL_COLLATION_NAME'")
    if cur.fetchone()[0]:
        cur.execute("SELECT ID, FULL_COLLATION_NAME, CHARACTER_SET_NAME "
                    "FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY WHERE ID IS NOT NULL")
        found.update((int(i), (name, charset)) for i, name, charset in cur.fetchall())
    return found


def has_variable(cur, name: str) -> bool:
    cur.execute("SHOW VARIABLES LIKE %s", (name,))
    return cur.fetchone() is not None


def collation_names(cur) -> dict[str, str]:
    """The server's collation names (lower case, each mapped to itself) and each
    character set's default under ``"charset:"`` + its name (bridge.apply.replay's
    ``portable_collations``)."""
    cur.execute("SELECT COLLATION_NAME, CHARACTER_SET_NAME, IS_DEFAULT FROM information_schema.COLLATIONS")
    known: dict[str, str] = {}
    for name, charset, default in cur.fetchall():
        known[str(name).lower()] = str(name)
        if str(default).lower() == "yes":
            known["charset:" + str(charset).lower()] = str(name)
    return known
