"""The pt-heartbeat row's format (--heartbeat-table): ts as pt-heartbeat --utc writes it
(its Perl ts(): UTC, 'T', six digits), and a table name that cannot become SQL."""

import shutil
import subprocess

import click
import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.cli.options import heartbeat_table_param
from bridge.source.heartbeat import PT_CREATE, pt_timestamp


def test_ts_is_utc_with_microseconds_as_pt_heartbeat_writes_it():
    assert pt_timestamp(1_700_000_000_123_456) == "2023-11-14T22:13:20.123456"
    assert pt_timestamp(1_700_000_000_000_001) == "2023-11-14T22:13:20.000001"
    assert len(pt_timestamp(4_102_444_799_999_999)) == 26  # the column is VARCHAR(26)
    assert "ts VARCHAR(26) NOT NULL, server_id INT UNSIGNED NOT NULL PRIMARY KEY" in PT_CREATE


@pytest.mark.skipif(shutil.which("perl") is None, reason="no perl")
def test_ts_matches_pt_heartbeats_own_perl_formatting():
    """pt-heartbeat's ts() (sprintf of gmtime, then the fraction), run by perl."""
    script = ('my @t = gmtime(1700000000); printf("%d-%02d-%02dT%02d:%02d:%02d", $t[5]+1900, $t[4]+1, $t[3], '
              '$t[2], $t[1], $t[0]); my $us = sprintf("%.6f", 0.123456); $us =~ s/^0\\././; print $us;')
    assert subprocess.run(["perl", "-e", script], capture_output=True, text=True, check=True).stdout == \
        pt_timestamp(1_700_000_000_123_456)


@pytest.mark.parametrize("bad", ["pt_heartbeat", "a.b.c", "a;DROP.t", "db.`t`", "db. t", ".t"])
def test_a_table_name_that_is_not_schema_dot_table_is_refused(bad):
    with pytest.raises(click.BadParameter, match="is not SCHEMA.TABLE"):
        heartbeat_table_param(None, None, bad)


def test_a_bad_table_name_is_a_usage_error_naming_the_option():
    result = CliRunner().invoke(main, ["start-primary", "--source", "mysql://u@127.0.0.1:1", "--replica",
                                       "127.0.0.1:2", "--heartbeat-table", "percona"])
    assert result.exit_code == 2 and "--heartbeat-table" in result.output
    assert heartbeat_table_param(None, None, "percona.heartbeat") == "percona.heartbeat"


def test_a_table_without_a_heartbeat_to_write_it_is_refused():
    result = CliRunner().invoke(main, ["start-primary", "--source", "mysql://u@127.0.0.1:1", "--replica",
                                       "127.0.0.1:2", "--heartbeat-table", "rdma_bridge.pt_heartbeat",
                                       "--heartbeat-interval", "0"])
    assert result.exit_code == 2 and "needs a --heartbeat-interval above 0" in result.output
