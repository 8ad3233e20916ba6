"""The tcp receiver's two twins (bridge.transport.receiver): the compiled loop and the
Python one get the same message streams over real loopback sockets and must leave
the same ring bytes, send the same answers, ring the doorbell alike and end with the
same error, word for word: well-formed streams (hypothesis), damaged heads,
connections closed mid-message."""

import os
import socket
import struct
import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.ring.layout import ACK_SEQ_AT, WAITING_AT, init_region, region_bytes
from bridge.transport import receiver
from bridge.transport.doorbell import Doorbell
from bridge.wire import placement

try:  # imported here, not through receiver's pick: the twin-only run (RDMA_BRIDGE_PURE_PYTHON) compares too
    from bridge.transport import _receiver as compiled
except ImportError:
    compiled = None

RING = 4096
SIZE = region_bytes(RING)


def test_the_compiled_loop_is_built_and_ends_in_the_same_words():
    assert compiled is not None, "pip install did not build bridge/transport/_receiver.pyx (a C compiler and " \
        "Python headers?)"
    assert (compiled.ENDED_CLOSED, compiled.ENDED_OS_ERROR, compiled.ENDED_BAD_HEAD, compiled.ENDED_DOORBELL) == \
        (receiver.ENDED_CLOSED, receiver.ENDED_OS_ERROR, receiver.ENDED_BAD_HEAD, receiver.ENDED_DOORBELL)


def compiled_serve(sock, region, doorbell):
    if compiled is None:
        pytest.skip("the compiled loop is not built (test_the_compiled_loop_is_built says so)")
    code, a, b, c = compiled.Receiver(sock.fileno(), region, doorbell.fd).serve()
    raise receiver.ended(code, a, b, c, sock, len(region))


def run(serve, stream: bytes, waiting: bool = False, acked: int = 0, ring: int = RING):
    """(ring bytes, answers, doorbell rung, the error it ended with) after ``stream``."""
    region = memoryview(bytearray(region_bytes(ring)))
    init_region(region, ring)
    struct.pack_into("<Q", region, ACK_SEQ_AT, acked)
    struct.pack_into("<I", region, WAITING_AT, int(waiting))
    bell = Doorbell.eventfd()
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname()[:2])
    conn, _ = server.accept()
    server.close()
    ended = []

    def target():
        try:
            serve(conn, region, bell)
        except Exception as exc:  # the test compares whatever it ends with
            ended.append(exc)
    thread = threading.Thread(target=target)
    thread.start()
    client.sendall(stream)
    client.shutdown(socket.SHUT_WR)
    thread.join(30)
    conn.close()  # as the ring host does once serve returns
    answers = b""
    while chunk := client.recv(65536):
        answers += chunk
    client.close()
    try:
        rung = int.from_bytes(os.read(bell.fd, 8), "little")
    except BlockingIOError:
        rung = 0
    bell.close()
    error = ended[0] if ended else None
    return bytes(region), answers, rung, (type(error).__name__, str(error).split(": ", 1)[-1])


def both(stream: bytes, **kw):
    twin, native = run(receiver.serve_twin, stream, **kw), run(compiled_serve, stream, **kw)
    assert native == twin
    return twin


write = placement.encode_write
publish = placement.encode_publish
ANSWER = placement.ANSWER


def test_a_transaction_is_placed_published_answered_and_rung_alike():
    region, answers, rung, ended = both(write(64, b"frame" * 10) + publish(1, 50, answer=True), waiting=True,
                                        acked=0)
    assert region[64:114] == b"frame" * 10
    assert placement.REPLY.unpack(answers) == (1, 0)
    assert rung == 1
    assert ended[0] == "TransportError" and "connection closed after 0 of 9 bytes" in ended[1]


def test_answers_say_placed_and_applied_and_nobody_is_rung_who_does_not_wait():
    stream = ANSWER + write(64, b"a" * 8) + publish(1, 8) + ANSWER + publish(2, 16, answer=True)
    _, answers, rung, _ = both(stream, acked=1)
    assert list(placement.REPLY.iter_unpack(answers)) == [(0, 1), (1, 1), (2, 1)]
    assert rung == 0


@pytest.mark.parametrize("head", [
    placement.HEAD.pack(9, 0, 0),  # unknown op
    placement.HEAD.pack(3, 64, 8),  # protocol version 3's READ
    placement.HEAD.pack(placement.Op.WRITE, SIZE - 4, 8),  # past the region
    placement.HEAD.pack(placement.Op.PUBLISH, 0, 4),  # a seq of the wrong size
    placement.HEAD.pack(placement.Op.PUBLISH_ANSWER, 0, 16),
    placement.HEAD.pack(placement.Op.ANSWER, 8, 0),  # an answer carries nothing
])
def test_a_bad_head_ends_both_with_the_same_refusal(head):
    region, answers, _, ended = both(write(64, b"before") + publish(1, 8) + head + write(128, b"never"))
    assert ended[0] == "RemoteProtocolError"
    assert region[64:70] == b"before" and b"never" not in region


@pytest.mark.parametrize("cut", [3, 9 + 20, 9 + 300 + 5, 9 + 300 + 9 + 4])
def test_a_connection_closed_mid_message_ends_both_alike(cut):
    stream = write(64, bytes(range(256)) + b"x" * 44) + publish(1, 300, answer=True)
    *_, ended = both(stream[:cut])
    assert ended[0] == "TransportError" and "connection closed after" in ended[1]


def test_a_write_larger_than_the_buffer_goes_straight_into_the_ring():
    body = bytes(range(256)) * 1024  # 256 KiB, four times the receive buffer
    region, *_ = both(write(64, body) + publish(1, len(body), answer=True), ring=1 << 20)
    assert region[64:64 + len(body)] == body


messages = st.one_of(
    st.builds(lambda at, data: write(64 + at, data), st.integers(0, RING - 200), st.binary(max_size=190)),
    st.builds(lambda seq, head, answer: publish(seq, head, answer=answer), st.integers(0, 2**64 - 1),
              st.integers(0, 2**32 - 1), st.booleans()),
    st.just(ANSWER))


@given(st.lists(messages, max_size=40), st.booleans(), st.integers(0, 2**64 - 1))
@settings(max_examples=60, deadline=None)
def test_any_well_formed_stream_leaves_the_same_ring_and_answers(stream, waiting, acked):
    both(b"".join(stream), waiting=waiting, acked=acked)


def test_pure_python_is_chosen_by_the_environment():
    script = ("from bridge.transport import receiver; from bridge.wire import native\n"
              "print(receiver.COMPILED, native.choice(receiver.PART).why_pure)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "RDMA_BRIDGE_PURE_PYTHON": "1"}, check=True).stdout
    assert out.startswith("False RDMA_BRIDGE_PURE_PYTHON is set")
