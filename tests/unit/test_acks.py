"""Pending semi-sync ACKs (bridge.source.acks): the newest covered request is
acknowledged, requests past the primary's timeout are skipped, never acknowledged."""

from hypothesis import given
from hypothesis import strategies as st

from bridge.source.acks import AckRequest, PendingAcks


def request(seq, deadline=100.0, position=None):
    return AckRequest((seq,), position if position is not None else seq * 100, "mariadb-bin.000001", deadline)


def queue(*requests):
    acks = PendingAcks()
    for r in requests:
        acks.add(r)
    return acks


def test_nothing_is_acknowledged_until_covered():
    acks = queue(request(3), request(5))
    assert acks.settle((2,), now=0.0) == (None, 0)
    assert len(acks) == 2 and acks.newest_seq() == 5


def test_one_ack_for_the_newest_covered_request_answers_the_older_ones():
    acks = queue(request(3), request(4), request(6))
    assert acks.settle((5,), now=0.0) == (request(4), 0)
    assert len(acks) == 1
    assert acks.settle((6,), now=0.0) == (request(6), 0)
    assert len(acks) == 0


def test_a_request_past_its_deadline_is_skipped_even_once_covered():
    acks = queue(request(3, deadline=1.0), request(4, deadline=2.0))
    assert acks.settle((0,), now=1.5) == (None, 1)  # the primary stopped waiting for seq 3
    assert acks.settle((9,), now=2.5) == (None, 1)  # covered too late: still no ACK
    assert len(acks) == 0


def test_skipped_and_acknowledged_in_one_settle():
    acks = queue(request(3, deadline=1.0), request(4, deadline=5.0), request(8, deadline=6.0))
    assert acks.settle((4,), now=2.0) == (request(4, deadline=5.0), 1)
    assert acks.next_deadline == 6.0


def test_drop_forgets_and_counts():
    acks = queue(request(1), request(2))
    assert acks.drop() == 2 and len(acks) == 0 and acks.newest_seq() == 0


@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 3)), max_size=30), st.integers(0, 60),
       st.floats(0, 10))
def test_never_acknowledges_an_uncovered_or_expired_request(steps, covered, now):
    seq, deadline, acks, added = 0, 0.0, PendingAcks(), []
    for dseq, ddeadline in steps:
        seq, deadline = seq + dseq, deadline + ddeadline
        added.append(request(seq, deadline))
        acks.add(added[-1])
    ack, skipped = acks.settle((covered,), now)
    assert ack is None or (ack.seqs[0] <= covered and ack.deadline >= now)
    assert skipped == sum(r.deadline < now for r in added)  # every expired one, none other
    left = added[len(added) - len(acks):]
    assert all(r.seqs[0] > covered and r.deadline >= now for r in left)  # what stays is neither
    if ack is not None:
        assert ack == max((r for r in added if r.seqs[0] <= covered and r.deadline >= now), key=added.index)


def test_a_quorum_of_replica_sides_covers_a_request():
    """Three replica sides, quorum 2: each covers in its own ring's numbering; one
    that does not count for a request (-1) never makes up the quorum."""
    acks = queue(AckRequest((10, 20, -1), 100, "f", 100.0), AckRequest((11, 21, 31), 200, "f", 100.0))
    assert acks.settle((10, 19, 99), now=0.0, quorum=2) == (None, 0)  # the third does not count for the first
    assert acks.settle((10, 20, 99), now=0.0, quorum=2)[0].position == 100
    assert acks.settle((11, 20, 31), now=0.0, quorum=2)[0].position == 200  # the first and the third
    acks = queue(AckRequest((11, 21, 31), 200, "f", 1.0))
    assert acks.settle((11, 0, 0), now=0.0, quorum=2) == (None, 0)
    assert acks.settle((11, 0, 0), now=2.0, quorum=2) == (None, 1)  # fewer than the quorum answered: skipped
    assert acks.newest_seq(2) == 0
    acks.add(AckRequest((5, -1, 7), 300, "f", 9.0))
    assert acks.newest_seq(1) == 0 and acks.newest_seq(2) == 7
