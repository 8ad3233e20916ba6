"""The queries a replica's IO thread asks its source, answered as the primary would
answer them (pure). MariaDB's and MySQL's ask different ones (slave.cc,
``get_master_version_and_clock`` and what follows it): the clock, the server id and uuid,
the binlog checksum, the GTID mode and domain, the heartbeat period and the replica's
capability and GTID state as user variables of the session. ``SET`` of a user variable
is kept for the session (the dump reads them); any other query is refused with the
error a server gives, and the replica decides whether that stops it (most it ignores)."""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field

from bridge.relay.protocol import err_packet, ok_packet, result_set
from bridge.server.flavor import Flavor

ER_NOT_SUPPORTED_YET, ER_UNKNOWN_SYSTEM_VARIABLE = 1235, 1193


@dataclass(frozen=True, slots=True)
class SourceFacts:
    """What the relay says of its source: the primary's, so that the replica sees the
    primary (its server id in the events, its uuid in GTIDs, its checksum)."""

    version: str  # as the primary's own handshake says it (MariaDB: "5.5.5-11.8.3-MariaDB...")
    server_id: int
    checksum: str = "CRC32"  # @@binlog_checksum: CRC32 or NONE
    variables: dict[str, str] = field(default_factory=dict)  # further globals by lower-case name

    # the primary's settings (bridge.source.preflight.read_settings) a replica asks for
    ASKED = ("gtid_mode", "server_uuid", "gtid_domain_id")

    @classmethod
    def of_primary(cls, settings: dict[str, str]) -> SourceFacts:
        """From the primary's settings as the primary side reads them: what its hello
        carries to a replica side in relay mode."""
        version = settings["version"]
        if not Flavor.from_version(version).is_mysql:  # a MariaDB server's handshake says 5.5.5- first
            version = "5.5.5-" + version.removeprefix("5.5.5-")
        return cls(version=version, server_id=int(settings["server_id"]),
                   checksum=settings.get("binlog_checksum") or "NONE",
                   variables={n: settings[n] for n in cls.ASKED if settings.get(n)})

    def with_semi_sync(self, on: bool) -> SourceFacts:
        """With the primary's semi-sync variables where the primary side acknowledges
        (a replica server whose semi-sync is on then asks for it, and ACKs what it
        received): without them, it replicates asynchronously from this relay."""
        if not on:
            return self
        return dataclasses.replace(self, variables={**self.variables, "rpl_semi_sync_master_enabled": "1",
                                                    "rpl_semi_sync_source_enabled": "1"})

    def to_json(self) -> dict:
        return {"version": self.version, "server_id": self.server_id, "checksum": self.checksum,
                "variables": dict(self.variables)}

    @classmethod
    def from_json(cls, given: dict) -> SourceFacts:
        return cls(version=str(given["version"]), server_id=int(given["server_id"]),
                   checksum=str(given.get("checksum") or "NONE"),
                   variables={str(k): str(v) for k, v in dict(given.get("variables") or {}).items()})

    @property
    def flavor(self) -> Flavor:
        return Flavor.from_version(self.version.removeprefix("5.5.5-"))

    @property
    def mariadb(self) -> bool:
        return not Flavor.from_version(self.version).is_mysql

    def global_value(self, name: str) -> str | int | None:
        name = name.lower()
        if name == "server_id":
            return self.server_id
        if name == "binlog_checksum":
            return self.checksum
        return self.variables.get(name)


_SET_USER = re.compile(r"@(?P<name>[\w$]+)\s*:?=\s*(?P<value>'(?:[^'\\]|\\.|'')*'|\"[^\"]*\"|@@[\w.]+|[-+\w.]+)",
                       re.S)
_GLOBAL = re.compile(r"^@@(?:global\.|session\.)?(?P<name>[\w]+)$", re.I)
_SHOW_VARIABLES = re.compile(r"^SHOW\s+(?:GLOBAL\s+|SESSION\s+)?VARIABLES\s+LIKE\s+'(?P<name>[^']*)'$", re.I)


class Session:
    """One replica connection's user variables and its answers."""

    def __init__(self, facts: SourceFacts) -> None:
        self.facts = facts
        self.user: dict[str, str | int | None] = {}

    def variable(self, name: str) -> str | int | None:
        return self.user.get(name.lower())

    def answer(self, query: str) -> list[bytes]:
        """The packets that answer ``query``."""
        text = query.strip().rstrip(";").strip()
        head = text.split(None, 1)[0].upper() if text else ""
        if head == "SET":
            return self._set(text[3:])
        if head == "SELECT":
            return self._select(text[6:].strip())
        shown = _SHOW_VARIABLES.match(text)
        if shown:
            value = self.facts.global_value(shown.group("name"))
            rows = [] if value is None else [(shown.group("name").lower(), str(value))]  # a server's: text
            return result_set(["Variable_name", "Value"], rows)
        return [err_packet(ER_NOT_SUPPORTED_YET, "42000",
                           f"This source (rdma-bridge relay) does not run: {text[:200]}")]

    def _set(self, assignments: str) -> list[bytes]:
        for found in _SET_USER.finditer(assignments):
            self.user[found.group("name").lower()] = self._value(found.group("value"))
        return [ok_packet()]

    def _value(self, text: str) -> str | int | None:
        if text[0] in "'\"":
            return re.sub(r"\\(.)", r"\1", text[1:-1].replace(text[0] * 2, text[0]))
        var = _GLOBAL.match(text)
        if var:
            return self.facts.global_value(var.group("name"))
        if text.upper() == "NULL":
            return None
        try:
            return int(text)
        except ValueError:
            return text

    def _select(self, expressions: str) -> list[bytes]:
        names, row = [], []
        for expression in (e.strip() for e in expressions.split(",")):
            names.append(expression)
            if expression.upper() in ("UNIX_TIMESTAMP()", "UNIX_TIMESTAMP(NOW())"):
                row.append(int(time.time()))
                continue
            var = _GLOBAL.match(expression)
            if var:
                value = self.facts.global_value(var.group("name"))
                if value is None:
                    return [err_packet(ER_UNKNOWN_SYSTEM_VARIABLE, "HY000",
                                       f"Unknown system variable '{var.group('name')}'")]
                row.append(value)
            elif expression.startswith("@"):
                row.append(self.variable(expression[1:]))
            elif re.fullmatch(r"-?\d+", expression):
                row.append(int(expression))
            elif expression[:1] in "'\"" and expression[-1:] == expression[:1]:
                row.append(expression[1:-1])
            else:
                return [err_packet(ER_NOT_SUPPORTED_YET, "42000",
                                   f"This source (rdma-bridge relay) does not answer: SELECT {expressions[:200]}")]
        return result_set(names, [tuple(row)])
