"""The binlog library's adaptations are checked against its installed version: an
untested release fails loudly at import, naming both versions and the fix."""

import pytest

from bridge.errors import ConfigError
from bridge.source import _compat


def test_the_installed_version_is_a_tested_one():
    assert _compat.VERSION in _compat.TESTED_VERSIONS


def test_an_untested_version_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"mysql-replication 1\.1\.0 is installed.*tested only with 1\.0\.17.*"
                                          r"install 'mysql-replication==1\.0\.17'"):
        _compat.check_version("1.1.0")


def test_the_adaptations_are_in_place():
    from pymysqlreplication.row_event import RowsEvent, TableMapEvent

    assert TableMapEvent.__init__ is _compat._cached_table_map_init
    assert RowsEvent._RowsEvent__read_time2 is _compat._read_time2
    assert _compat.charset_to_encoding("utf16") == "utf-16-be"  # MySQL's UTF-16 is big-endian
