"""The primary side's one-call paths, mixed into PrimaryNode (bridge.node.primary):
between transactions in binlog and relay apply modes (relay: each transaction framed whole
as the primary wrote it, the verbatim payload; without semi-sync for the lane, whose ACKs
are the ring's and relay's the replica server's), ``step`` first tries the ship lane
(bridge.source.lanes: the common case, dump socket to the replica's ring, in compiled
calls, semi-sync `received` ACKs included), then, where the lane does not run (rdma,
TLS on the ring's link, semi-sync `applied`, an ACK waiting), a run: the transactions
the dump's buffer holds whole framed into the ring by one call
(``RingProducer.place_run``) and published together. Everything else goes the
per-transaction way in ``step``. PrimaryNode owns the state this works on: the reader,
the member (its producer and link), the counters, the acks.
"""

from __future__ import annotations

import logging
import os
import time

from bridge.errors import SourceConnectionLost
from bridge.model import HEARTBEAT_TABLE
from bridge.node.member import Member
from bridge.ring.producer import PlacedRun
from bridge.source import lanes
from bridge.source.reader import BinlogReader
from bridge.wire import binlog

RUN_TXNS = 64  # transactions framed by one call at most
LANE_WAIT_MS = 20  # the ship lane returns at least this often (link, acks, progress, stop)

log = logging.getLogger(__name__)


def event_of(fmt: binlog.FormatDescription | None) -> bytes:
    """A FORMAT_DESCRIPTION's event bytes, b"" for none."""
    return fmt.event if fmt is not None else b""


class ShipLoop:
    """The one-call paths' methods, mixed into PrimaryNode."""

    _lane = _lane_remote = None  # the ship lane, and the ring it was built for
    _stall_ns = 0  # the dump's read timeout, for the lane's quiet spells
    _run_ns = 0  # when the last run's packets were read

    def _runs(self, reader: BinlogReader, member: Member) -> bool:
        """Whether the next transactions may go as a run (``RingProducer.place_run``):
        between transactions, in binlog or relay apply mode, with the binlog's
        FORMAT_DESCRIPTION already in the ring (a run's frames name none)."""
        return member.apply_mode in ("binlog", "relay") and not self.assembler.in_transaction and \
            (reader.format is member.format_sent or event_of(reader.format) == event_of(member.format_sent)) and \
            (reader.frame_file is None or len(reader.frame_file) < 256)

    def _ship_lane(self, reader: BinlogReader, member: Member) -> bool:
        """The ship lane (bridge.source.ship), where it runs: True when this step is done
        (it placed transactions, or the dump was quiet for its wait), False when the
        general path reads what comes next (not the lane's kind, or no lane here)."""
        lane = self._lane_for(reader, member)
        if lane is None:
            return False
        ack_file = reader.log_file.encode() if self.cfg.semi_sync != "off" else None
        tcp = lane.sock is not None
        if tcp:  # the answers the data connection waits for: the lane's to read while it runs
            lane.answers_in(0, *self._lane_remote.answers_to_lane())
        try:
            placed = reader.run_lane(lane, LANE_WAIT_MS, ack_file, int(self.acks.timeout_s * 1e6))
        finally:
            if tcp:  # the answers it read, and those still on their way (the one it asked for, if late)
                self._lane_remote.answers_from_lane(*lane.answers_out(0))
        if lane.asked is not None:  # the general path waits for that answer
            seq, position, asked_ns = lane.asked
            self.acks.handed_over((seq,), position, reader.log_file, asked_ns)
        if placed:  # the lane counted them as it published (lanes.ShipLane's ``counts``)
            self._lane_remote.lane_published(member.producer.write_seq)
            member.note_published()
            self.last_gtid = member.last_gtid = lane.gtid
            self.counts.lane_runs += 1
            lane.record_stages(self.stages)
            self._shipped(reader)
        if lane.ack_error:
            raise SourceConnectionLost(f"binlog stream from {self.cfg.source}: semi-sync ACK: "
                                       f"{os.strerror(lane.ack_error)}")
        if placed == 0 and lane.why == lanes.IDLE and time.monotonic_ns() - lane.reader.data_ns >= self._stall_ns:
            raise reader.stalled()  # quiet past the read timeout, not even the server's heartbeat
        return placed > 0 or lane.why == lanes.IDLE

    def _report_lane(self) -> None:
        """At the end: how often the compiled lane, woken by the dump or an answer, waited
        over 1 ms for the interpreter lock (another thread of this process running Python)."""
        lane = self._lane
        if lane is not None and lane.gil_wait_max_ns:
            log.info("ship lane: %d wakeups waited over 1 ms for the interpreter lock (the longest %.1f ms)",
                     lane.gil_waits, lane.gil_wait_max_ns / 1e6)

    def _lane_for(self, reader: BinlogReader, member: Member):
        """The ship lane of this reader, producer and ring: over shm, plain tcp or rdma, semi-sync
        `received` too (shm: its stores are the confirmation; tcp: it asks for the replica
        side's answer; rdma: the completion of its frames' write), while no ACK waits, where
        the dump's reader is the lane's; else None."""
        remote, producer = member.remote, member.producer
        if remote is None or self.acks or self.cfg.semi_sync not in ("off", "received") or \
                member.apply_mode == "relay" and self.cfg.semi_sync != "off":
            return None  # relay: an ACK is the replica server's own (bridge.node.relayprogress), not the ring's
        dump = reader.dump_reader
        if dump is None:
            return None
        lane = self._lane
        if lane is None or lane.reader is not dump or lane.producer is not producer or \
                self._lane_remote is not remote:
            target = remote.lane_target()
            if not lanes.takes(target) or self.cfg.semi_sync != "off" and not target.confirms:
                return None
            lane = self._lane = lanes.ShipLane(dump, producer, target.remote, target.doorbell, HEARTBEAT_TABLE,
                                               self.assembler.chunk_bytes, target.sock, self.counts, verbs=target.verbs)
            self._lane_remote = remote
            self._stall_ns = int(reader.read_timeout_s * 1e9)
        return lane

    def _place_run(self, packets: bytes, seq_id: int, semi_sync: bool) -> PlacedRun | None:
        self._run_ns = time.time_ns()  # the packets are read: the "place" stage starts
        return self.member.producer.place_run(packets, seq_id, semi_sync, self.assembler.chunk_bytes, HEARTBEAT_TABLE,
                                              RUN_TXNS, self.reader.frame_file)

    def _ship_run(self, run: PlacedRun, reader: BinlogReader, member: Member) -> None:
        """Common transactions the binlog held whole, framed into the mirror by one call:
        copied to the replica's ring and published together (one wakeup there)."""
        member.publish(run.placements, run.gtid, self.acks.confirm and reader.ack_wanted)
        self.stages.record("place", (time.time_ns() - self._run_ns) / 1000, run.frames)  # the run's, for each
        self.last_gtid = run.gtid
        self.counts.transactions_shipped += run.frames - run.heartbeats
        self.counts.heartbeats_shipped += run.heartbeats
        self.counts.taken_whole += run.frames
        self.counts.runs += 1
        self._shipped(reader)
