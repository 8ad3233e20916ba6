"""bridge.server.flavor is the one place that tells MariaDB from MySQL: what differs is a
question to a ``Flavor``, and no other module compares a flavor's name (the lab's image
building names the server a container runs, by the same constants)."""

import re
from pathlib import Path

import pytest

from bridge.apply import modes
from bridge.server.flavor import MARIADB, MYSQL, Flavor
from bridge.wire.binlog import FormatDescription

ROOT = Path(__file__).resolve().parents[2]
THE_ONE_PLACE = {"bridge/server/flavor.py", "bridge/lab/images.py"}
NAME = r"""["'](?:mariadb|mysql)["']"""
# a flavor's name compared, looked up or searched for: == "mysql", "mariadb" in ..., {"mysql": ...}
COMPARED = re.compile(rf"(?:==|!=)\s*{NAME}|{NAME}\s*(?:==|!=|in\b)|{NAME}\s*:", re.IGNORECASE)
SOURCES = sorted(p for p in (ROOT / "bridge").rglob("*") if p.suffix in (".py", ".pyx", ".pxi"))

MARIADB_10 = Flavor.from_version("10.11.6-MariaDB-0+deb12u1")
MARIADB_11 = Flavor.from_version("11.8.3-MariaDB-0+deb13u1")
MYSQL_9 = Flavor.from_version("9.7.0")


def test_no_module_but_flavor_compares_a_flavor_name():
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in SOURCES
             if str(p.relative_to(ROOT)) not in THE_ONE_PLACE
             for n, line in enumerate(p.read_text().splitlines(), 1) if COMPARED.search(line)]
    assert not found, "ask bridge.server.flavor.Flavor instead:\n" + "\n".join(found)


@pytest.mark.parametrize("line", ['if kind == "mysql":', "x = 'MariaDB' in version", '{"mariadb": 1}',
                                  'flavor != "mariadb"'])
def test_the_scan_finds_each_way_of_comparing(line):
    assert COMPARED.search(line)


@pytest.mark.parametrize("line", ['SYSTEM = ("mysql", "sys")', 'parts.scheme not in ("mysql", "mariadb")',
                                  'name = "mysql"', "GRANT ... ON mysql.* TO"])
def test_the_scan_leaves_a_name_that_is_not_compared(line):
    assert not COMPARED.search(line)


def test_a_stream_s_format_names_its_flavor():
    body = bytes(19 + 2) + b"9.7.0".ljust(50, b"\0") + bytes(4 + 1) + bytes(5)
    fmt = FormatDescription(body, "9.7.0", 0)
    assert fmt.flavor is Flavor.from_version("9.7.0") and fmt.flavor.binlog_rows_v2
    assert not FormatDescription(body, MARIADB_11.name, 0).flavor.binlog_rows_v2


def test_what_differs_is_asked_of_the_flavor():
    assert (MARIADB_10.kind, MYSQL_9.kind) == (MARIADB, MYSQL)
    assert MYSQL_9.keeps_gtids("on_permissive") and not MYSQL_9.keeps_gtids("OFF")
    assert not MARIADB_11.keeps_gtids("ON")  # MariaDB's GTIDs are its own domain-server-seq, always kept
    assert MYSQL_9.needs_gtid_mode and MYSQL_9.logs_partial_json and not MARIADB_10.needs_gtid_mode
    assert MARIADB_10.snapshot_position and not MYSQL_9.snapshot_position
    assert (MARIADB_10.name, MYSQL_9.name) == ("mariadb-10.11", "mysql-9.7")


def test_the_applier_privileges_of_each_flavor():
    assert modes.missing(frozenset(), "binlog", MARIADB_11) == ["BINLOG REPLAY", "SET USER"]
    assert modes.missing(frozenset(), "sql", MARIADB_11) == ["SET USER"]
    assert modes.missing(frozenset(), "binlog", MYSQL_9) == ["REPLICATION_APPLIER", "SET_ANY_DEFINER",
                                                              "ALLOW_NONEXISTENT_DEFINER"]
    assert modes.missing(frozenset({"SUPER"}), "binlog", MYSQL_9) == []


def test_a_version_string_is_read_once():
    assert Flavor.from_version("10.11.6-MariaDB-log") is Flavor.from_version("10.11.6-MariaDB-log")
