"""PyMySQL's private parts are used only through bridge.server.dbconn (and the binlog stream's
own Connection subclass), and only with a PyMySQL the tests passed against."""

import re
from pathlib import Path

import pytest

from bridge.errors import ConfigError
from bridge.server import dbconn

PRIVATE = re.compile(r"\._(rfile|next_seq_id|execute_command|read_packet|write_bytes|force_close|read_timeout)\b|"
                     r"\bconn\._sock\b")
ALLOWED = {"bridge/server/dbconn.py", "bridge/source/stream.py"}


def test_the_installed_pymysql_is_a_tested_one():
    assert ".".join(dbconn.VERSION.split(".")[:2]) in dbconn.TESTED_SERIES


@pytest.mark.parametrize("version", ["2.0.0", "1.1.1", "1.3.0"])
def test_an_untested_pymysql_is_refused_naming_both(version):
    with pytest.raises(ConfigError, match=f"PyMySQL {re.escape(version)} is installed.*tested only with"):
        dbconn.check_version(version)


def test_no_other_module_reaches_into_pymysql():
    root = Path(__file__).resolve().parents[2]
    users = sorted(str(path.relative_to(root)) for path in (root / "bridge").rglob("*.py")
                   if PRIVATE.search(path.read_text()) and str(path.relative_to(root)) not in ALLOWED)
    assert not users, f"PyMySQL's private parts used outside bridge.server.dbconn: {users}"


def test_every_connection_to_a_server_is_made_by_one_factory():
    root = Path(__file__).resolve().parents[2]
    makes = re.compile(r"pymysql\.connect\(|\(pymysql\.(connections\.)?Connection\):")  # a call, or a subclass
    makers = sorted(str(path.relative_to(root)) for path in (root / "bridge").rglob("*.py")
                    if makes.search(path.read_text()))
    # the sandbox: root over its servers' own sockets; the binlog dump's connection class
    assert makers == ["bridge/lab/runners.py", "bridge/server/dbconn.py", "bridge/source/stream.py"]
