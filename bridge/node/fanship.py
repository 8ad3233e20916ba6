"""The fan-out's one-call paths, mixed into FanOutNode (bridge.node.fanout), as
bridge.node.shipping's are into PrimaryNode: over shm or plain tcp, semi-sync off or
`received`, the ship lane feeding every member's ring in one compiled call (``ShipLane``'s
further rings; the ACK from the same call once the quorum's rings hold the transaction,
over tcp once that many replica sides answered that they do); else,
where the dump's buffer holds common transactions whole, one compiled framing call per
member (``RingProducer.place_run``: the same packets, so the same transactions). A member
short of ring space gets what it lacks framed one by one into its queue. FanOutNode owns
the state this works on: the members, the lock, the reader, the counters.
"""

from __future__ import annotations

import time

from bridge.errors import TransportError
from bridge.model import HEARTBEAT_TABLE, RowEvents, Transaction
from bridge.node.member import STREAMING, Member
from bridge.node.shipping import LANE_WAIT_MS, RUN_TXNS, event_of
from bridge.source import lanes
from bridge.wire.codec import encode_transaction
from bridge.wire.frame import FrameKind
from bridge.wire.native import hot


class FanShipLoop:
    """The one-call paths' methods, mixed into FanOutNode."""

    _fan_key: tuple | None = None  # what the fan-out's ship lane was built for
    _fan_lane_obj = None

    def _lane_everywhere(self, reader) -> bool:
        """The ship lane feeding every member's ring in one compiled call (its further
        rings, bridge.source.ship), where it can: over shm or plain tcp, semi-sync off or
        `received` with no ACK waiting, every member streaming with nothing queued and the
        binlog format in force sent. True when this step is done (transactions placed, or
        the dump quiet for the lane's wait)."""
        lane = self._fan_lane(reader)
        if lane is None:
            return False
        streaming, tcp = self.members, lane.sock is not None
        ack_file = reader.log_file.encode() if self.cfg.semi_sync == "received" else None
        with self._lock:  # no catch-up runs now (the lane is only used without one): nothing waits on it
            failing = streaming[0]  # whose replica side a TransportError speaks of
            try:
                # tcp: the answers each data connection waits for are the lane's to read while it runs
                for k, member in enumerate(streaming if tcp else ()):
                    failing = member  # found closed now: only it leaves
                    lane.answers_in(k, *member.remote.answers_to_lane())
                failing = streaming[0]  # in the run: the first ring's doorbell or connection
                placed = reader.run_lane(lane, LANE_WAIT_MS, ack_file, int(self.acks.timeout_s * 1e6))
            except TransportError as exc:
                self._detach(failing, str(exc))
                return True
            finally:
                for k, member in enumerate(streaming if tcp else ()):
                    if member.remote is not None:
                        member.remote.answers_from_lane(*lane.answers_out(k))
            if lane.asked is not None:  # fewer rings than the quorum hold it: the general path counts them
                missing = {i + 1 for i, _, _ in lane.owed} | {i + 1 for i in lane.gone}
                self.acks.handed_over(tuple(-1 if i in missing else m.producer.write_seq
                                            for i, m in enumerate(streaming)), lane.asked[1], reader.log_file,
                                      lane.asked[2])
            if placed:
                for member in streaming:
                    member.last_gtid = lane.gtid
                    member.remote.lane_published(member.producer.write_seq)
                    member.note_published()
                self.last_gtid = lane.gtid
                self.counts.lane_runs += 1
                lane.record_stages(self.stages)
                self._passed(reader)
            for i, packets, seq_id in lane.owed:
                self._queue_rest(streaming[i + 1], packets, 0, seq_id, False)
        for i in lane.gone:
            self._detach(streaming[i + 1], "its data connection failed: the replica side is gone" if tcp else
                         "its doorbell failed: the replica side is gone")
        if placed == 0 and lane.why == lanes.IDLE and time.monotonic_ns() - lane.reader.data_ns >= self._stall_ns:
            raise reader.stalled()  # quiet past the read timeout, not even the server's heartbeat
        return placed > 0 or lane.why == lanes.IDLE

    def _fan_lane(self, reader):
        """The lane for the members as they are now, or None where it cannot run (TLS on a
        link, links of two kinds)."""
        members = self.members
        if self.cfg.semi_sync not in ("off", "received") or self.acks or len(members) - 1 > lanes.MAX_RINGS or \
                any(m.state != STREAMING or m.queue or m.parked for m in members):
            return None
        dump, fmt = reader.dump_reader, event_of(reader.format)
        if dump is None or any(event_of(m.format_sent) != fmt for m in members):
            return None
        key = (dump, *((m.producer, m.remote) for m in members))
        if self._fan_key != key:
            targets = [m.remote.lane_target() if m.remote is not None else None for m in members]
            if any(not lanes.takes(t) or (t.sock is None) != (targets[0].sock is None) or
                   (t.verbs is None) != (targets[0].verbs is None) for t in targets):
                return None  # TLS, pyverbs' queue pair, or rings of two kinds: the runs below
            first = targets[0]
            self._fan_lane_obj = lanes.ShipLane(
                dump, members[0].producer, first.remote, first.doorbell, HEARTBEAT_TABLE, self.assembler.chunk_bytes,
                first.sock, self.counts,
                [(m.producer, t.remote, t.doorbell, t.sock, t.verbs) for m, t in zip(members[1:], targets[1:])],
                verbs=first.verbs)
            self._fan_lane_obj.quorum = self.acks.quorum
            self._fan_key = key
            self._stall_ns = int(reader.read_timeout_s * 1e9)
        return self._fan_lane_obj

    def _run_everywhere(self, reader) -> bool:
        """The transactions the dump's buffer holds whole, framed by one compiled call per
        streaming member (``RingProducer.place_run``: the same packets, so the same
        transactions), each member's published together; True when a run went. Only
        where every streaming member was sent the binlog format in force and has
        nothing queued. A member whose ring had space for part of the run gets the
        rest framed one by one into its queue."""
        placed: dict[Member, object] = {}
        locked = False

        def place(packets, seq_id: int, semi_sync: bool):
            nonlocal locked
            self._lock.acquire()  # only once the packets are here: the wait for them holds nothing
            locked = True
            self._run_ns = time.time_ns()
            streaming = [m for m in self.members if m.state == STREAMING]
            fmt = event_of(reader.format)
            if not streaming or any(m.queue or event_of(m.format_sent) != fmt for m in streaming):
                return None
            first = streaming[0].producer.place_run(packets, seq_id, semi_sync, self.assembler.chunk_bytes,
                                                    HEARTBEAT_TABLE, RUN_TXNS)
            if first is None:
                return None
            placed[streaming[0]] = first
            whole = packets[:first.taken]
            for member in streaming[1:]:
                run = member.producer.place_run(whole, seq_id, semi_sync, self.assembler.chunk_bytes,
                                                HEARTBEAT_TABLE, first.frames)
                placed[member] = run
                done = run.taken if run is not None else 0
                if done < first.taken:
                    self._queue_rest(member, whole, done, run.seq_id if run is not None else seq_id, semi_sync)
            return first

        try:
            first = reader.take_run(place)
            if first is None:
                return False
            confirm = self.acks.confirm and reader.ack_wanted
            for member, run in placed.items():
                if run is not None:
                    self._publish_run(member, run, confirm)
            self.last_gtid = first.gtid
            self._passed(reader)
        finally:
            if locked:
                self._lock.release()
        self.stages.record("place", (time.time_ns() - self._run_ns) / 1000, first.frames)
        self.counts.transactions_shipped += first.frames - first.heartbeats
        self.counts.heartbeats_shipped += first.heartbeats
        self.counts.runs += 1
        return True

    def _publish_run(self, member: Member, run, confirm: bool) -> None:
        """A member's part of a run, copied to its ring and published (detached on a failure)."""
        try:
            if member.remote is None:
                raise TransportError(f"link to replica {member.name} lost")
            member.publish(run.placements, run.gtid, confirm)
        except TransportError as exc:
            self._detach(member, str(exc))

    def _queue_rest(self, member: Member, packets, start: int, seq_id: int, semi_sync: bool) -> None:
        """What a member's ring had no space for, of a run the first member took whole:
        framed transaction by transaction into its queue."""
        while start < len(packets):
            scanned = hot.scan_transaction(packets[start:], seq_id, semi_sync, self.assembler.chunk_bytes, True)
            if scanned is None:  # cannot be: the first member's call framed these same packets
                self._detach(member, "a run it could not frame")
                return
            taken, seq_id, gtid, data, tables, events, _, _ = scanned
            now = time.time_ns()
            member.enqueue(FrameKind.TXN, encode_transaction(Transaction(gtid, (RowEvents(data, tables, events),)),
                                                           (now, now)), gtid)
            start += taken
