"""Privileges from SHOW GRANTS rows (bridge.server.grants), as MariaDB and MySQL print them:
by name on *.*, never by a substring of the row."""

import pytest

from bridge.apply import modes
from bridge.server.flavor import Flavor
from bridge.server.grants import global_privileges, holds

MARIADB = Flavor.from_version("10.11.6-MariaDB-0+deb12u1")
MYSQL = Flavor.from_version("9.7.0")


def test_an_account_named_like_a_privilege_does_not_hold_it():
    rows = ["GRANT SELECT, INSERT ON *.* TO `superuser`@`127.0.0.1` IDENTIFIED BY PASSWORD '*0A1B'",
            "GRANT USAGE ON *.* TO 'binlog replay'@'%'"]
    privileges = global_privileges(rows)
    assert privileges == {"SELECT", "INSERT", "USAGE"}
    assert not holds(privileges, ("SUPER",)) and not holds(privileges, ("BINLOG REPLAY",))
    assert modes.missing(privileges, "binlog", MARIADB) == ["BINLOG REPLAY", "SET USER"]


def test_a_grant_on_one_schema_is_not_a_grant_on_every_schema():
    rows = ["GRANT USAGE ON *.* TO `app`@`%`",
            "GRANT SELECT, INSERT, CREATE ON `rdma_bridge`.* TO `app`@`%` WITH GRANT OPTION",
            "GRANT SUPER ON `app`.`t` TO `app`@`%`"]
    privileges = global_privileges(rows)
    assert privileges == {"USAGE"}
    assert not holds(privileges, ("INSERT",)) and "GRANT OPTION" not in privileges


def test_a_longer_privilege_does_not_stand_for_a_shorter_one():
    privileges = global_privileges(["GRANT REPLICATION SLAVE ADMIN, CREATE USER ON *.* TO `r`@`h`"])
    assert not holds(privileges, ("REPLICATION SLAVE",)) and not holds(privileges, ("CREATE",))
    assert holds(privileges, ("CREATE USER",))


@pytest.mark.parametrize("row,expected", [
    ("GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION", {"ALL PRIVILEGES", "GRANT OPTION"}),
    ("GRANT BINLOG REPLAY,   SET USER ON *.* TO 'rdma_apply'@'127.0.0.1'", {"BINLOG REPLAY", "SET USER"}),
    ("grant super on *.* to `a`@`b` with max_user_connections 5 grant option", {"SUPER", "GRANT OPTION"}),
    ("GRANT `reader` TO `app`@`%`", set()),  # a role: its privileges come with SET ROLE, not counted
    ("GRANT PROXY ON ''@'%' TO 'root'@'localhost' WITH GRANT OPTION", set()),
])
def test_rows_as_the_servers_print_them(row, expected):
    assert global_privileges([row]) == expected


def test_all_privileges_hold_everything_but_the_grant_option():
    privileges = global_privileges(["GRANT ALL PRIVILEGES ON *.* TO `a`@`b`"])
    assert holds(privileges, ("BINLOG REPLAY", "SUPER")) and modes.missing(privileges, "binlog", MARIADB) == []
    assert not holds(privileges, ("GRANT OPTION",))


def test_a_mysql_applier_needs_each_of_mysqls_own_privileges():
    """MySQL names them apart (dynamic privileges), and 8.2+ asks for one more to keep a
    definer the replica lacks."""
    nothing = global_privileges(["GRANT SELECT, INSERT ON *.* TO `a`@`%`"])
    assert modes.missing(nothing, "binlog", MYSQL) == ["REPLICATION_APPLIER", "SET_ANY_DEFINER",
                                                         "ALLOW_NONEXISTENT_DEFINER"]
    granted = global_privileges(["GRANT SELECT ON *.* TO `a`@`%`",
                                 "GRANT ALLOW_NONEXISTENT_DEFINER,REPLICATION_APPLIER,SET_ANY_DEFINER ON *.* TO `a`@`%`"])
    assert modes.missing(granted, "binlog", MYSQL) == [] and modes.missing(granted, "sql", MYSQL) == []
