"""One writer per ring (bridge.node.fencing): who the replica side lets feed a channel."""

import pytest

from bridge.errors import ChannelBusy, Fenced
from bridge.node.fencing import FENCED_KEPT, WriterSeat


def hello(writer_id, take_over=False):
    return {"writer": {"id": writer_id, "host": "h", "pid": 1, "source": "s", "server_id": 7}, "take_over": take_over}


def test_a_second_writer_is_refused_unless_it_takes_over():
    seat = WriterSeat("c")
    assert seat.admit(hello("a")) is None
    assert seat.admit(hello("a")) is None  # the same one coming back
    with pytest.raises(ChannelBusy, match="--take-over"):
        seat.admit(hello("b"))
    assert seat.admit(hello("b", take_over=True)).id == "a"
    assert seat.current.id == "b"


@pytest.mark.parametrize("take_over", [False, True])
def test_a_fenced_writer_that_comes_back_is_told_it_was_fenced(take_over):
    """Its link may go down before it reads the fence message: its retry must not be
    answered 'busy' (which suggests --take-over), nor take the channel back."""
    seat = WriterSeat("c")
    seat.admit(hello("a", take_over=True))
    seat.admit(hello("b", take_over=True))
    with pytest.raises(Fenced, match="took channel 'c' over"):
        seat.admit(hello("a", take_over=take_over))
    assert seat.current.id == "b"
    seat.gone("b")  # even once the newer writer is gone, the fenced process stays out
    with pytest.raises(Fenced):
        seat.admit(hello("a", take_over=take_over))
    assert seat.admit(hello("c")) is None  # a new process (a restart) may feed it


def test_the_memory_of_fenced_writers_is_bounded():
    seat = WriterSeat("c")
    for n in range(FENCED_KEPT + 10):
        seat.admit(hello(f"w{n}", take_over=True))
    assert len(seat.fenced_by) == FENCED_KEPT
    with pytest.raises(Fenced):
        seat.admit(hello(f"w{FENCED_KEPT}"))


def test_a_hello_that_names_no_writer_is_a_protocol_error():
    from bridge.errors import RemoteProtocolError

    for hello_msg in ({}, {"writer": "x"}, {"writer": {"host": "h"}}):
        with pytest.raises(RemoteProtocolError, match="no writer named"):
            WriterSeat("c").admit(hello_msg)
