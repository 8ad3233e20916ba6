"""Consumer side of the ring (pure): polls the replica's ring at its tail.

A frame is present once ``write_seq`` has reached it (every transport publishes
after placing), its seq is the next expected one and its crc32c matches.
``write_seq`` is read before the frame: a published frame that fails its check is
corrupt and ``CorruptFrame`` is raised; it is never applied.
"""

from __future__ import annotations

from collections import deque

from bridge.errors import CorruptFrame
from bridge.ring.layout import DATA_OFFSET, HEAD_AT, WRITE_SEQ_AT, read_ring_header, read_u32, read_u64, write_ack
from bridge.wire.frame import EPOCH_MASK, HEADER_BYTES, Frame, FrameKind
from bridge.wire.native import hot

_KINDS = {int(k): k for k in FrameKind}


class RingConsumer:
    def __init__(self, region, expected_seq: int = 1, tail: int = 0, epoch: int = 0) -> None:
        self.region = region
        self.epoch = epoch & EPOCH_MASK  # frames of any other session are not present
        self.size = read_ring_header(region).size
        self.expected_seq = expected_seq
        self.tail = tail
        self._ends: deque[tuple[int, int]] = deque()  # (seq, tail after it), consumed not acked
        self.acked_seq, self.acked_tail = expected_seq - 1, tail

    @property
    def published(self) -> bool:
        """A frame this consumer has not taken yet is published."""
        return read_u64(self.region, WRITE_SEQ_AT) >= self.expected_seq

    @property
    def backlog_frames(self) -> int:
        """Frames published but not yet acknowledged (applied)."""
        return max(0, read_u64(self.region, WRITE_SEQ_AT) - self.acked_seq)

    @property
    def backlog_bytes(self) -> int:
        if not self.backlog_frames:
            return 0
        used = (read_u32(self.region, HEAD_AT) - self.acked_tail) % self.size
        return used or self.size

    def poll(self) -> Frame | None:
        """The next frame, or None when it has not arrived yet."""
        published = read_u64(self.region, WRITE_SEQ_AT)
        if published < self.expected_seq:
            return None  # the common empty poll: no frame header read
        for _ in range(2):  # at most one PAD (or implicit wrap) before a frame
            if self.size - self.tail < HEADER_BYTES:
                self.tail = 0
            frame = self._frame_at_tail()
            if frame is None:
                raise CorruptFrame(f"ring poll: seq {self.expected_seq} at offset {self.tail} failed its "
                                   f"seq/crc check though seq {published} is published", self.expected_seq)
            if frame.kind != FrameKind.PAD:
                self.expected_seq += 1
                self._ends.append((frame.seq, self.tail))
                return frame
            self.tail = 0
        raise CorruptFrame(f"ring poll: two PAD frames in a row at seq {self.expected_seq}", self.expected_seq)

    def _frame_at_tail(self) -> Frame | None:
        got = hot.frame_at(self.region, DATA_OFFSET + self.tail, self.size - self.tail, self.expected_seq, self.epoch)
        if got is None:
            return None
        kind, flags, payload, n = got
        if kind != FrameKind.PAD:
            self.tail = (self.tail + n) % self.size
        return Frame(_KINDS[kind], self.expected_seq, payload, flags, self.epoch)

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
