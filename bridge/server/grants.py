"""What an account may do on every schema, read from its SHOW GRANTS rows: the
privileges of the rows that grant ``ON *.*``, by name. Not substrings of the text: an
account named ``superman`` does not hold SUPER, a grant on one schema is not a grant on
all, and REPLICATION SLAVE ADMIN is not REPLICATION SLAVE. ``WITH GRANT OPTION`` counts
as GRANT OPTION; a role's privileges (granted through SET ROLE) are not counted."""

from __future__ import annotations

import re
from collections.abc import Iterable

ALL = "ALL PRIVILEGES"
_ROW = re.compile(r"GRANT\s+(?P<privileges>.+?)\s+ON\s+(?P<object>\S+)\s+TO\s+"
                  r"(?P<account>(?:`[^`]*`|'[^']*'|\S+)@(?:`[^`]*`|'[^']*'|\S+))(?P<tail>.*)",
                  re.IGNORECASE | re.DOTALL)
_GRANT_OPTION = re.compile(r"\bWITH\b.*\bGRANT\s+OPTION\b", re.IGNORECASE | re.DOTALL)


def global_privileges(rows: Iterable[str]) -> frozenset[str]:
    """The privileges granted on ``*.*`` by SHOW GRANTS' ``rows`` (upper case, single
    spaces; ALL PRIVILEGES stays itself)."""
    out: set[str] = set()
    for row in rows:
        found = _ROW.match(row.strip())
        if found is None or found["object"].replace("`", "") != "*.*":
            continue
        out.update(" ".join(p.split()).upper() for p in found["privileges"].split(","))
        if _GRANT_OPTION.search(found["tail"]):
            out.add("GRANT OPTION")
    return frozenset(out)


def holds(privileges: frozenset[str], alternatives: Iterable[str]) -> bool:
    """Whether ``privileges`` (global_privileges) include one of ``alternatives`` on every
    schema (ALL PRIVILEGES includes each but GRANT OPTION)."""
    wanted = set(alternatives)
    return bool(wanted & privileges) or ALL in privileges and wanted != {"GRANT OPTION"}
