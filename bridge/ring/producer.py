"""Producer side of the ring (pure): lays frames into the primary's local mirror.

The local mirror has the same offsets as the replica's ring, so it is both the
source buffer for one-sided writes and the retransmission buffer: nothing past
the replica's ack_seq is overwritten. ``append`` returns the placements (region
offset, length) the transport must copy to the remote ring, in order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from bridge.errors import LocalProtocolError, RingFull
from bridge.ring.layout import DATA_OFFSET, check_ring_bytes
from bridge.wire.frame import HEADER_BYTES, MIN_FRAME_BYTES, Frame, FrameKind, encode_frame, frame_bytes
from bridge.wire.native import hot


@dataclass(frozen=True, slots=True)
class Placement:
    offset: int  # region offset (DATA_OFFSET + data offset)
    length: int


@dataclass(frozen=True, slots=True)
class PlacedRun:
    """What ``RingProducer.place_run`` placed, and what it took of the packets."""
    taken: int  # bytes of the packets
    seq_id: int  # the next packet's number
    frames: int  # transactions placed, one frame each
    heartbeats: int  # of them, writes of the heartbeat row alone
    gtid: str  # the last one's
    commit_position: int  # its XID's next-event position
    ack: int  # the binlog position the last one's events asked a semi-sync ACK for, or -1
    placements: list[Placement]  # what the transport copies to the remote ring, in order


class RingProducer:
    def __init__(self, size: int, next_seq: int = 1, head: int = 0, epoch: int = 0, region=None) -> None:
        """``region``: writable memory of DATA_OFFSET + ``size`` bytes, zeroed, to frame into
        (the rdma transport's registered mirror: its one-sided writes read the frames where
        they were framed, with no copy); None: a buffer of its own."""
        self.size = check_ring_bytes(size)
        self.epoch = epoch  # the session's: every frame carries it
        if region is not None and len(region) != DATA_OFFSET + size:
            raise LocalProtocolError(f"ring producer: a region of {len(region)} bytes for a {size}-byte ring")
        self.region = region if region is not None else bytearray(DATA_OFFSET + size)
        self.head = head
        self.next_seq = next_seq
        self.used = 0
        # (seq, bytes incl. the gap before it, region offset, payload length, kind, flags)
        self._inflight: deque[tuple[int, int, int, int, FrameKind, int]] = deque()

    @property
    def write_seq(self) -> int:
        return self.next_seq - 1

    @property
    def max_frame_bytes(self) -> int:
        """Half the ring: a frame this size always fits once the ring drains."""
        return self.size // 2

    def append(self, kind: FrameKind, payload: bytes, flags: int = 0) -> list[Placement]:
        need = frame_bytes(len(payload))
        if need > self.max_frame_bytes:
            raise LocalProtocolError(
                f"ring append: seq {self.next_seq} frame of {need} bytes exceeds half the "
                f"{self.size}-byte ring; raise --ring-bytes")
        gap = self.size - self.head if self.head + need > self.size else 0
        if gap + need > self.size - self.used:
            raise RingFull(f"ring append: seq {self.next_seq} needs {gap + need} bytes, "
                           f"{self.size - self.used} free (acked through {self._acked_through()})")
        seq = self.next_seq
        placements = [self._pad(gap, seq)] if gap else []
        placed = self._place(kind, seq, payload, flags)
        placements.append(placed)
        self._inflight.append((seq, gap + need, placed.offset, len(payload), kind, flags))
        self.used += gap + need
        self.next_seq += 1
        return [p for p in placements if p is not None]

    def place_run(self, packets, seq_id: int, semi_sync: bool, max_bytes: int, heartbeat: tuple[str, str],
                  max_txns: int, file: bytes | None = None) -> PlacedRun | None:
        """Common transactions whole in a binlog dump's buffered ``packets`` framed
        into the mirror in one call (``place_run`` of the hot path: what it takes and
        where it stops), each a TXN frame of the compact payload (``file``, relay apply
        mode: of the verbatim payload naming that binlog file), as ``append`` would
        place them one by one. None: nothing placed (the caller reads event by event)."""
        run = hot.place_run(packets, seq_id, semi_sync, max_bytes, self.region, DATA_OFFSET, self.head,
                            self.size - self.used, self.next_seq, self.epoch, heartbeat, max_txns, file)
        if run is None:
            return None
        taken, seq_id, entries, head, heartbeats, gtid, commit, ack = run
        first = self.head
        self.placed(entries, head)
        # what changed in the mirror, in order: one span, or two where the run wrapped
        spans = [(DATA_OFFSET + first, head - first)] if head > first else \
            [(DATA_OFFSET + first, self.size - first), (DATA_OFFSET, head)]
        return PlacedRun(taken, seq_id, len(entries), heartbeats, gtid, commit, ack,
                         [Placement(at, n) for at, n in spans if n])

    def placed(self, entries: list, head: int) -> None:
        """Frames placed into the mirror from ``head`` on by a compiled path (``place_run``,
        the ship lane): their ring entries, in seq order, and the head after them."""
        self._inflight.extend(entries)
        for entry in entries:
            self.used += entry[1]
        self.next_seq += len(entries)
        self.head = head

    def _pad(self, gap: int, seq: int) -> Placement | None:
        """Fill the end of the data area; the PAD carries the seq of the frame after it.
        A gap shorter than a frame of no payload is an implicit wrap both ends know."""
        at = self.head
        self.head = 0
        if gap < MIN_FRAME_BYTES:
            return None
        data = encode_frame(Frame(FrameKind.PAD, seq, bytes(gap - MIN_FRAME_BYTES), 0, self.epoch))
        return self._copy(at, data)

    def _place(self, kind: FrameKind, seq: int, payload: bytes, flags: int) -> Placement:
        """Header, payload and commit word straight into the mirror (no whole-frame copy
        first: a chunk's payload may be a megabyte). The padding bytes are left as they
        are: the crc covers only header and payload."""
        start = DATA_OFFSET + self.head
        size = hot.place_frame(self.region, start, kind, flags, seq, self.epoch, payload)
        self.head = (self.head + size) % self.size
        return Placement(start, size)

    def _copy(self, at: int, data: bytes) -> Placement:
        start = DATA_OFFSET + at
        self.region[start:start + len(data)] = data
        return Placement(start, len(data))

    def acknowledge(self, ack_seq: int) -> None:
        """Free the space of every frame at or below ack_seq."""
        while self._inflight and self._inflight[0][0] <= ack_seq:
            self.used -= self._inflight.popleft()[1]

    def unacked(self, after_seq: int) -> list[Frame] | None:
        """The frames after ``after_seq`` for a resend in a new session, or None when
        the ring no longer holds all of them (the caller re-reads the binlog)."""
        frames = [self._frame_at(*entry) for entry in self._inflight if entry[0] > after_seq]
        first = frames[0].seq if frames else self.next_seq
        return frames if first == after_seq + 1 and after_seq < self.next_seq else None

    def _frame_at(self, seq: int, _used: int, offset: int, length: int, kind: FrameKind, flags: int) -> Frame:
        """The ring itself is the retransmission buffer: no second copy is kept."""
        start = offset + HEADER_BYTES
        return Frame(kind, seq, bytes(self.region[start:start + length]), flags, self.epoch)

    def _acked_through(self) -> int:
        return self._inflight[0][0] - 1 if self._inflight else self.write_seq

    @property
    def oldest_unacked(self) -> int | None:
        """The seq of the oldest frame the replica has not acknowledged, None when none
        (read from another thread too: the node's may empty it meanwhile)."""
        try:
            return self._inflight[0][0]
        except IndexError:
            return None

    @property
    def backlog_frames(self) -> int:
        return len(self._inflight)
