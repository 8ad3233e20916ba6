import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import __version__
from bridge.errors import RemoteProtocolError, VersionSkew
from bridge.wire import control, placement


def test_messages_survive_arbitrary_splits():
    stream = b"".join(control.encode_message({"type": "m", "n": i}) for i in range(20))
    dec = control.MessageDecoder()
    got = []
    for i in range(0, len(stream), 3):
        got += dec.feed(stream[i:i + 3])
    assert [m["n"] for m in got] == list(range(20))


def test_oversized_message_is_refused_before_reading_it():
    with pytest.raises(RemoteProtocolError, match="limit"):
        control.MessageDecoder(max_bytes=100).feed((101).to_bytes(4, "little"))


def test_version_skew_names_both_releases_and_says_to_upgrade_both():
    msg = {**control.hello("control"), "version": 99, "release": "9.9.9"}
    with pytest.raises(VersionSkew) as skew:
        control.check_hello(msg)
    text = str(skew.value)
    assert "rdma-bridge 9.9.9 (wire protocol version 99)" in text
    assert f"rdma-bridge {__version__} (protocol version {control.PROTOCOL_VERSION})" in text
    assert "upgrade both" in text


def test_version_skew_with_a_peer_that_names_no_release():
    msg = {**control.hello("control"), "version": 5}
    del msg["release"]
    with pytest.raises(VersionSkew, match="an older rdma-bridge \\(wire protocol version 5\\)"):
        control.check_hello(msg)


def test_every_opening_message_carries_the_release():
    for msg in (control.hello("data"), control.challenge(), control.welcome(auth="")):
        assert (msg["version"], msg["release"]) == (control.PROTOCOL_VERSION, __version__)


def test_peer_error_is_reported():
    with pytest.raises(RemoteProtocolError, match="refused by peer: nope"):
        control.check_hello({"type": "error", "reason": "nope"})


@given(st.binary(max_size=300))
@settings(max_examples=500)
def test_control_garbage_is_a_protocol_error_or_nothing(data):
    try:
        control.MessageDecoder().feed(data)
    except RemoteProtocolError:
        pass


def test_placement_outside_region_is_refused():
    with pytest.raises(RemoteProtocolError, match="outside"):
        placement.parse_head(placement.encode_write(4000, b"x" * 200)[:placement.HEAD.size], 4096)


def test_answer_carries_nothing_and_its_reply_is_placed_then_applied():
    assert placement.parse_head(placement.ANSWER, 4096) == (placement.Op.ANSWER, 0, 0, 0)
    both = placement.encode_publish(9, 128, answer=True)
    assert placement.parse_head(both[:placement.HEAD.size], 4096) == (placement.Op.PUBLISH_ANSWER, 128, 8, 8)
    assert placement.REPLY.unpack(placement.encode_reply(7, 5)) == (7, 5)
    with pytest.raises(RemoteProtocolError, match="ANSWER carries"):
        placement.parse_head(placement.HEAD.pack(placement.Op.ANSWER, 8, 16), 4096)


def test_the_retired_read_and_fence_ops_are_unknown():
    for op in (3, 4):
        with pytest.raises(RemoteProtocolError, match=f"unknown op {op}"):
            placement.parse_head(placement.HEAD.pack(op, 0, 0), 4096)


def test_a_protocol_7_peer_is_refused():
    """Protocol 8 frames end in a commit word that a protocol-7 consumer does not expect
    (and a protocol-7 producer does not write): the two never share a ring."""
    msg = {**control.hello("data"), "version": 7, "release": "0.0.7"}
    with pytest.raises(VersionSkew, match="wire protocol version 7.*protocol version 8.*upgrade both"):
        control.check_hello(msg)
