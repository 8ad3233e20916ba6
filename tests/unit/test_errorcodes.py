"""One table of server error numbers (bridge.server.errorcodes): a connection that is gone is
the same set for the binlog stream, the primary's preflight and the applier, so a dump
thread killed on the primary (1927) or a server shutting down (1053) is a reconnect
everywhere, not a stop."""

from types import SimpleNamespace

import pymysql
import pytest

from bridge.apply.connection import apply_error
from bridge.config import MysqlUrl
from bridge.errors import SourceConnectionLost, SourceError, TargetConnectionLost
from bridge.lab.ports import free_port
from bridge.server import errorcodes
from bridge.source import preflight
from bridge.source.reader import BinlogReader


@pytest.mark.parametrize("code", sorted(errorcodes.CONNECTION_LOST))
def test_a_lost_connection_is_retried_on_both_sides(code):
    exc = pymysql.OperationalError(code, "gone")
    assert type(BinlogReader._stream_error(SimpleNamespace(url="mysql://r@h:1"), exc)) is SourceConnectionLost
    assert isinstance(apply_error("apply", exc), TargetConnectionLost)


def test_other_errors_are_not_a_lost_connection():
    exc = pymysql.OperationalError(1236, "could not find first log file name in binary log index file")
    assert type(BinlogReader._stream_error(SimpleNamespace(url="mysql://r@h:1"), exc)) is SourceError
    assert not isinstance(apply_error("apply", pymysql.OperationalError(1062, "duplicate")), TargetConnectionLost)
    assert errorcodes.code_of(ValueError("no number")) == 0


def test_an_unreachable_primary_is_retried():
    with pytest.raises(SourceConnectionLost, match="connect to primary"):
        preflight.connect(MysqlUrl.parse(f"mysql://u:p@127.0.0.1:{free_port()}"), "primary")


def test_session_end_codes_travel_as_their_names_and_an_unknown_one_is_an_error():
    from bridge.errors import ChannelBusy, EndCode, Fenced, StartRefused
    from bridge.wire import control

    for refusal in (ChannelBusy, Fenced, StartRefused):
        msg = control.error("no", refusal.end_code)
        assert msg["code"] == refusal.end_code.value and type(msg["code"]) is str  # plain JSON
        with pytest.raises(refusal):
            control.raise_refusal(msg)
    assert EndCode.of("bad_frame") is EndCode.BAD_FRAME and EndCode.of("something new") is EndCode.ERROR
    assert EndCode.of(1062) is EndCode.ERROR  # a server error number is not a session-end code


def test_only_a_server_answer_on_a_live_connection_is_asked_about():
    from bridge.server.errorcodes import answered

    assert answered(1105) and answered(1062) and answered(3140) and answered(4025)
    assert not answered(0) and not answered(2013) and not answered(2006) and not answered(1053)
