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


def test_mariadb_11_uca1400_ids_name_their_character_set():
    """MariaDB 11's default utf8mb4 collation (2304) and its siblings: the library's id
    table lacks them and read such columns as utf8 (UCS-2 and UTF-16/32 text too)."""
    from bridge.source import _compat

    assert [_compat.mariadb_uca1400_charset(i) for i in (2048, 2304, 2560, 2816, 3072, 2309)] == \
        ["utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32", "utf8mb4"]
    assert _compat.mariadb_uca1400_charset(45) is None and _compat.mariadb_uca1400_charset(3328) is None
    assert _compat.charset_to_encoding(_compat.mariadb_uca1400_charset(2560)) == "utf-16-be"
