"""Consumer side of the ring (pure): polls the replica's ring at its tail.

A frame is present once it is whole at the tail: its seq is the next expected one, its
epoch the session's, its commit word (the trailer, written last) is there and its crc32c
matches (a frame still being written, a stale one of an earlier lap, does not check).
``write_seq`` says which frames must be there (every transport writes it after their
frames; over rdma only now and then: a placement is one write, docs/architecture.md,
"The ring"). It is read before the frame. A frame it covers that fails its check is looked
at again for ``CORRUPT_GRACE_S`` (where a NIC places a write's packets out of order, the
header's write can land before the frames' last bytes) and is then corrupt:
``CorruptFrame`` is raised; it is never applied.
"""

from __future__ import annotations

import time
from collections import deque

from bridge.errors import CorruptFrame
from bridge.ring.layout import (
    DATA_OFFSET,
    HEAD_AT,
    SIZE_AT,
    WRITE_SEQ_AT,
    read_ring_header,
    read_u32,
    read_u64,
    write_ack,
)
from bridge.wire.frame import EPOCH_MASK, MIN_FRAME_BYTES, Frame, FrameKind
from bridge.wire.native import hot

_KINDS = {int(k): k for k in FrameKind}
CORRUPT_GRACE_S = 0.1  # a published frame that fails its check is looked at again this long before it is corrupt


class RingConsumer:
    def __init__(self, region, expected_seq: int = 1, tail: int = 0, epoch: int = 0,
                 corrupt_grace_s: float = CORRUPT_GRACE_S) -> None:
        self.region = region
        self.corrupt_grace_s = corrupt_grace_s
        self.epoch = epoch & EPOCH_MASK  # frames of any other session are not present
        self.size = read_ring_header(region).size
        self.expected_seq = expected_seq
        self.tail = tail
        self._ends: deque[tuple[int, int]] = deque()  # (seq, tail after it), consumed not acked
        self.acked_seq, self.acked_tail = expected_seq - 1, tail
        self._late: tuple[int, float] | None = None  # (seq, since when) of a published frame that failed its check

    @property
    def published(self) -> bool:
        """The next frame is there for this consumer (``frame_ready``)."""
        return frame_ready(self.region, self.tail, self.expected_seq, self.epoch)

    @property
    def backlog_frames(self) -> int:
        """Frames there (published, or taken) but not yet acknowledged (applied)."""
        return max(read_u64(self.region, WRITE_SEQ_AT), self.expected_seq - 1) - self.acked_seq

    @property
    def backlog_bytes(self) -> int:
        published = read_u64(self.region, WRITE_SEQ_AT)
        if max(published, self.expected_seq - 1) <= self.acked_seq:
            return 0
        head = read_u32(self.region, HEAD_AT) if published >= self.expected_seq - 1 else self.tail
        used = (head - self.acked_tail) % self.size
        return used or self.size

    def poll(self) -> Frame | None:
        """The next frame, or None when it has not arrived yet."""
        published = read_u64(self.region, WRITE_SEQ_AT)
        got, at = next_frame(self.region, self.size, self.tail, self.expected_seq, self.epoch)
        if got is None:
            if published >= self.expected_seq:
                self._published_but_missing(published)
            return None  # not there yet: the common empty poll
        self._late = None
        kind, flags, payload, n = got
        self.tail = (at + n) % self.size
        self.expected_seq += 1
        self._ends.append((self.expected_seq - 1, self.tail))
        return Frame(_KINDS[kind], self.expected_seq - 1, payload, flags, self.epoch)

    def _published_but_missing(self, published: int) -> None:
        """The next frame failed its check though write_seq covers it: late (its last
        bytes still on their way) within the grace, corrupt after it."""
        now = time.monotonic()
        if self._late is None or self._late[0] != self.expected_seq:
            self._late = (self.expected_seq, now)
        if now - self._late[1] >= self.corrupt_grace_s:
            raise CorruptFrame(f"ring poll: seq {self.expected_seq} at offset {self.tail} failed its seq/commit/crc "
                               f"check though seq {published} is published, for {now - self._late[1]:.3f} s",
                               self.expected_seq)

    @property
    def settled(self) -> bool:
        """Every frame taken is acknowledged."""
        return not self._ends

    def took_and_acked(self, seq: int, tail: int) -> None:
        """Frames through ``seq`` were taken and acknowledged by someone else (the apply
        lane, bridge.apply.lane), ending at ``tail``."""
        self.expected_seq, self.tail = seq + 1, tail
        self.acked_seq, self.acked_tail = seq, tail

    def acknowledge(self, seq: int) -> None:
        """Tell the producer everything through ``seq`` is applied (frees its space)."""
        tail = None
        while self._ends and self._ends[0][0] <= seq:
            tail = self._ends.popleft()[1]
        if tail is not None:
            write_ack(self.region, seq, tail)
            self.acked_seq, self.acked_tail = seq, tail


def next_frame(region, size: int, tail: int, expected_seq: int, epoch: int, frame_at=hot.frame_at):
    """(``frame_at``'s answer, where the frame starts) for the frame of seq ``expected_seq``
    and session ``epoch`` at data offset ``tail`` of a ring of ``size`` bytes, after at
    most one PAD (or the implicit wrap where too few bytes are left for a frame), whole
    (its commit word there) and its crc right; (None, tail) where there is none.
    Compiled: ring_frame (bridge/wire/_frames.pxd)."""
    at = tail
    for _ in range(2):
        if size - at < MIN_FRAME_BYTES:
            at = 0
        got = frame_at(region, DATA_OFFSET + at, size - at, expected_seq, epoch)
        if got is None:
            return None, tail
        if got[0] != FrameKind.PAD:
            return got, at
        at = 0
    return None, tail  # two PADs in a row: not a frame


def frame_ready(region, tail: int, expected_seq: int, epoch: int, frame_at=hot.frame_at) -> bool:
    """The ring's next frame is there for someone to take: published (write_seq reached it;
    one that then fails its check is corrupt, which ``poll`` says), or whole by its own
    check. Compiled: ring_ready (bridge/wire/_frames.pxd)."""
    return read_u64(region, WRITE_SEQ_AT) >= expected_seq or \
        next_frame(region, read_u32(region, SIZE_AT), tail, expected_seq, epoch, frame_at)[0] is not None
