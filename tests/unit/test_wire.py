"""The two fixed layouts every other wire test builds on, as byte literals: a ring frame's
24-byte header and 8-byte commit word (bridge.wire.frame) and the tcp transport's placement messages
(bridge.wire.placement), with the refusals a receiver makes of a head."""

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.errors import LocalProtocolError, RemoteProtocolError
from bridge.wire import frame, placement
from bridge.wire.frame import Frame, FrameKind
from bridge.wire.placement import Op


def test_a_frame_header_is_kind_flags_reserved_length_seq_crc_epoch_little_endian():
    encoded = frame.encode_frame(Frame(FrameKind.TXN, seq=0x0102030405060708, payload=b"abc", flags=2, epoch=9))
    assert encoded[:16] == bytes.fromhex("01 02 0000 03000000 0807060504030201")
    assert encoded[20:24] == bytes.fromhex("09000000")
    unchecked = encoded[:16] + bytes(4) + encoded[20:24]  # the crc covers the header with its crc field zero
    assert encoded[16:20] == crc32c.crc32c(b"abc", crc32c.crc32c(unchecked)).to_bytes(4, "little")
    assert encoded[24:32] == b"abc" + bytes(5)  # the payload, padded to 8
    assert encoded[32:] == bytes.fromhex("08070605 09000000")  # the commit word: the seq's low 32 bits, the epoch


@given(st.binary(max_size=200), st.integers(0, 2**64 - 1), st.integers(0, 2**40))
def test_a_frame_occupies_its_aligned_size_and_keeps_the_epoch_s_low_32_bits(payload, seq, epoch):
    encoded = frame.encode_frame(Frame(FrameKind.CHUNK, seq, payload, epoch=epoch))
    assert len(encoded) == frame.frame_bytes(len(payload)) == (24 + len(payload) + 7) // 8 * 8 + 8
    assert frame.HEADER.unpack_from(encoded)[3:5] == (len(payload), seq)
    assert int.from_bytes(encoded[20:24], "little") == epoch & 0xFFFFFFFF
    assert frame.TRAILER.unpack_from(encoded, len(encoded) - 8) == (seq & 0xFFFFFFFF, epoch & 0xFFFFFFFF)


def test_a_payload_over_the_limit_is_refused_before_it_is_framed():
    class Huge(bytes):
        def __len__(self):
            return frame.MAX_PAYLOAD_BYTES + 1

    with pytest.raises(LocalProtocolError, match="seq 7 payload"):
        frame.encode_header(Frame(FrameKind.TXN, 7, Huge()))


def test_placement_messages_as_they_go_on_the_wire():
    assert placement.encode_write(64, b"xy") == bytes.fromhex("01 40000000 02000000") + b"xy"
    assert placement.encode_publish(5, 128) == bytes.fromhex("02 80000000 08000000 0500000000000000")
    assert placement.encode_publish(5, 128, answer=True)[0] == Op.PUBLISH_ANSWER
    assert placement.ANSWER == bytes.fromhex("05 00000000 00000000")
    assert placement.encode_reply(3, 2) == bytes.fromhex("0300000000000000 0200000000000000")


@pytest.mark.parametrize("head, body", [((Op.WRITE, 100, 28), 28), ((Op.PUBLISH, 8, 8), 8),
                                        ((Op.PUBLISH_ANSWER, 0, 8), 8), ((Op.ANSWER, 0, 0), 0)])
def test_a_head_the_receiver_carries_out(head, body):
    assert placement.parse_head(placement.HEAD.pack(*head), 128) == (*head, body)


@pytest.mark.parametrize("head, why", [((3, 0, 8), "unknown op 3"), ((9, 0, 0), "unknown op 9"),
                                       ((Op.WRITE, 100, 29), "WRITE of 29 bytes at 100 outside the 128-byte region"),
                                       ((Op.PUBLISH, 0, 4), "PUBLISH carries 4 bytes, expected 8"),
                                       ((Op.ANSWER, 1, 0), "ANSWER carries offset 1 and length 0, expected none")])
def test_a_head_the_receiver_refuses_names_what_is_wrong(head, why):
    with pytest.raises(RemoteProtocolError, match=why):
        placement.parse_head(placement.HEAD.pack(*head), 128)
