"""Preflight checks of the primary: refuse settings that make row replication
unsafe, each with the setting and the fix in the message; and check that the
primary can still serve a resume position.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pymysql

from bridge.config import MysqlUrl, tls_refusal
from bridge.errors import BinlogPurged, PreflightError, SourceConnectionLost, SourceError
from bridge.model import GtidSet
from bridge.server import dbconn, errorcodes
from bridge.server.flavor import Flavor

REQUIRED = (
    ("log_bin", "ON", "start the primary with log_bin=mysql-bin"),
    ("binlog_format", "ROW", "set binlog_format=ROW (SET GLOBAL binlog_format='ROW' and in my.cnf)"),
    ("binlog_row_image", "FULL", "set binlog_row_image=FULL"),
    ("binlog_row_metadata", "FULL", "set binlog_row_metadata=FULL: with MINIMAL, column names and "
                                    "ENUM values are lost and columns are mislabelled after DDL"),
)


def connect(url: MysqlUrl, what: str, **kwargs) -> pymysql.Connection:
    try:
        return dbconn.connect(url, read_timeout=30, autocommit=True, **kwargs)
    except pymysql.MySQLError as exc:
        refused = tls_refusal(exc)  # no retry mends a certificate
        lost = errorcodes.code_of(exc) in errorcodes.CONNECTION_LOST  # worth a retry
        error = SourceConnectionLost if lost and not refused else SourceError
        raise error(f"connect to {what} {url}: {refused or (exc.args[-1] if exc.args else exc)}") from exc


SETTINGS = ("log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "server_id",
            "version", "gtid_binlog_pos", "gtid_executed", "gtid_purged", "gtid_strict_mode", "gtid_mode",
            "log_bin_compress", "binlog_row_value_options", "binlog_checksum", "server_uuid", "gtid_domain_id")
# MariaDB's compressed events (log_bin_compress) cannot be applied by the replica's BINLOG
# statement, nor decoded by the reader. (MySQL's compressed transactions are read: the
# stream gives their events back uncompressed, bridge.wire.compressed.)
UNSUPPORTED = (("log_bin_compress", "set log_bin_compress=OFF (compressed binlog events cannot be replicated by "
                                    "the bridge)"),)


def read_settings(conn) -> dict[str, str]:
    """The primary's global variables that matter; '' for one this server lacks."""
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (%s)" % ",".join(["%s"] * len(SETTINGS)),
                    SETTINGS)
        found = dict(cur.fetchall())
    return {name: str(found.get(name, "")) for name in SETTINGS}


@dataclass(frozen=True, slots=True)
class Setting:
    """One of the primary's settings as the bridge needs it (the preflight refuses a
    primary with one not ``ok``; doctor shows each)."""

    name: str
    have: str
    ok: bool
    fix: str = ""

    @property
    def problem(self) -> str:
        return f"{self.name} is {self.have}: {self.fix}"


def setting_checks(settings: dict[str, str]) -> list[Setting]:
    """Every setting of the primary that decides whether the bridge can read it."""
    out = [Setting(name, settings[name] or "(unset)", settings[name].upper() == want,
                   f"need {want}: {fix}") for name, want, fix in REQUIRED]
    out += [Setting(name, settings[name], settings[name].upper() != "ON", fix) for name, fix in UNSUPPORTED
            if settings[name]]
    flavor = Flavor.from_version(settings["version"])
    if settings["binlog_row_value_options"] or flavor.logs_partial_json:
        partial = "PARTIAL_JSON" in settings["binlog_row_value_options"].upper()
        out.append(Setting("binlog_row_value_options", settings["binlog_row_value_options"] or "''", not partial,
                           "SET GLOBAL binlog_row_value_options='' (and in my.cnf): the bridge needs full row "
                           "images, not partial JSON updates"))
    if flavor.needs_gtid_mode:
        on = settings["gtid_mode"].upper() == "ON"
        out.append(Setting("gtid_mode", settings["gtid_mode"] or "OFF", on,
                           "need ON: the bridge positions by GTID; set enforce_gtid_consistency=ON, then gtid_mode "
                           "step by step to ON (docs/operations.md, MySQL)"))
    return out


def check_primary(settings: dict[str, str], our_server_id: int, url: MysqlUrl) -> None:
    problems = [s.problem for s in setting_checks(settings) if not s.ok]
    if int(settings["server_id"]) == our_server_id:
        problems.append(f"server_id clash: the primary's server_id is {our_server_id}; pass another --server-id")
    if problems:
        raise PreflightError(f"preflight of primary {url}: " + "; ".join(problems))


def check_server_id_free(conn, our_server_id: int, url: MysqlUrl, report_as: str, grace_s: float = 0.0) -> None:
    """Two replicas with one server_id make the primary drop one of them, back and
    forth. A registration under our own name is a previous run of this bridge that
    the primary has not reaped yet: the new stream replaces it. Another name may be a
    bridge that just stopped (its dump thread lives until its next heartbeat fails):
    it is given ``grace_s`` to go before the clash is refused."""
    deadline = time.monotonic() + grace_s
    while True:
        with conn.cursor() as cur:
            cur.execute(Flavor.of(conn).show_replicas)
            others = [host for server_id, host, *_ in cur.fetchall()
                      if int(server_id) == our_server_id and host != report_as]
        if not others:
            return
        if time.monotonic() >= deadline:
            raise PreflightError(f"preflight of primary {url}: server_id {our_server_id} is already used by "
                                 f"replica {others[0]!r}; pass another --server-id")
        time.sleep(0.1)


def check_position(settings: dict[str, str], resume: GtidSet, url: MysqlUrl) -> None:
    """A GTID in a domain the primary does not know is silently accepted by MariaDB
    and streams from the start; a position ahead of the primary is a different
    history. Both are refused here (MySQL refuses both itself, error 1236)."""
    primary = GtidSet.parse(settings["gtid_binlog_pos"])
    for g in resume.mariadb:
        have = next((p for p in primary.mariadb if p.domain == g.domain), None)
        if have is None:
            raise SourceError(f"resume from {resume} on {url}: domain {g.domain} is not in the primary's "
                              f"binlog position {primary or '(empty)'}")
        if g.seq > have.seq:
            raise SourceError(f"resume from {resume} on {url}: replica is ahead of the primary "
                              f"({g} > {have}); it replicated another history")


def binlog_start(conn) -> str:
    """The GTID state before the primary's oldest binlog, i.e. what was purged ('' when
    nothing was): MariaDB's from its oldest binlog, MySQL's ``gtid_purged``."""
    if Flavor.of(conn).is_mysql:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_purged")
            return str(cur.fetchone()[0] or "")
    try:
        with conn.cursor() as cur:
            if not cur.execute("SHOW BINARY LOGS"):
                return ""
            first = cur.fetchone()[0]
            cur.execute("SELECT BINLOG_GTID_POS(%s, 4)", (first,))
            row = cur.fetchone()
    except pymysql.MySQLError:  # MySQL has no BINLOG_GTID_POS; a missing privilege is the dump's to report
        return ""
    return str(row[0] or "") if row else ""


def check_not_purged(start: GtidSet, resume: GtidSet, url: MysqlUrl) -> None:
    """Refuse, with the missing range, a resume position older than the primary's
    oldest binlog: those transactions are gone, and no retry brings them back."""
    missing = []
    for first in start.mariadb:
        have = next((g.seq for g in resume.mariadb if g.domain == first.domain), 0)
        if first.seq > have:
            missing.append(f"domain {first.domain}: seq {have + 1} to {first.seq}")
    missing += [str(part) for part in start.minus(resume).parts()]  # MySQL: gtid_purged not applied
    if missing:
        raise BinlogPurged(f"resume from {resume or '(the start of the binlog)'} on {url}: the primary's binlogs "
                           f"start after {start}, the transactions in between were purged ({'; '.join(missing)}); "
                           "the replica cannot catch up from this primary: copy its data again (docs/operations.md, "
                           "step 4) and start the channel at the copy's GTID position")
