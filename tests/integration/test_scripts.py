"""Scripts (several statements, one round trip) on the real replica server: every
answer read, the first error named, the connection usable after it, whatever the
answers weigh (the read holds its wakeup back for all of them: SO_RCVLOWAT)."""

import socket
import threading
import time

import pytest

from bridge.apply.connection import connect, rollback, run_script
from bridge.errors import ApplyError, TargetConnectionLost
from bridge.lab.workload import connect as admin_connect


@pytest.fixture
def conn(urls):
    c, _ = connect(urls["replica"])
    yield c
    c.close()


def lowat(c) -> int:
    return c._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


def select_one(c, query):
    with c.cursor() as cur:
        cur.execute(query)
        return cur.fetchone()[0]


def test_every_answer_is_read_and_the_socket_wakes_on_each_byte_again(conn):
    run_script(conn, "four", [b"SET @a = 1", b"SET @a = @a + 1", b"DO 1", b"SET @a = @a * 10"])
    assert select_one(conn, "SELECT @a") == 20
    assert lowat(conn) == 1


@pytest.mark.parametrize("failing", [0, 2])
def test_a_short_error_answer_is_named_and_the_connection_goes_on(conn, failing):
    """One ERR packet of a few bytes weighs less than the OKs expected: the wait gives
    up after its bound and the error is read as usual (no hang, nothing left unread)."""
    statements = [b"SET @b = 1", b"SET @b = 2", b"DO 1", b"DO 1"]
    statements[failing] = b"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'x'"
    with pytest.raises(ApplyError) as err:
        run_script(conn, "signal", statements, lambda i: f" (statement {i})")
    assert err.value.code == 1644 and f"(statement {failing}): error 1644: x" in str(err.value)
    rollback(conn, "replica")
    assert select_one(conn, "SELECT @b") == (2 if failing == 2 else None)
    assert lowat(conn) == 1
    run_script(conn, "after", [b"SET @b = 3", b"DO 1"])
    assert select_one(conn, "SELECT @b") == 3


def test_a_connection_killed_mid_script_is_lost_not_hung(conn, urls):
    thread_id = select_one(conn, "SELECT CONNECTION_ID()")

    def kill():
        time.sleep(0.3)
        admin = admin_connect(urls["replica_admin"])
        with admin.cursor() as cur:
            cur.execute(f"KILL {thread_id}")
        admin.close()

    killer = threading.Thread(target=kill)
    killer.start()
    with pytest.raises(TargetConnectionLost):
        run_script(conn, "sleep", [b"DO SLEEP(30)", b"DO 1", b"DO 1"])
    killer.join()
