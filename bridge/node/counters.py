"""What each side counts, as one object per side instead of a handful of node
attributes; the field names are the status document's keys (bridge.ops.statusdoc)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class ReplicaCounts:
    transactions_applied: int = 0  # user transactions (heartbeat rows apart)
    heartbeats_applied: int = 0
    rows_applied: int = 0  # decoded rows (sql apply mode)
    row_events_applied: int = 0  # raw row events (binlog apply mode)
    groups_applied: int = 0  # replica transactions that applied a group of ring transactions
    corrupt_frames: int = 0
    reconnects: int = 0  # to the replica server
    largest_group: int = 0  # the most ring transactions one replica transaction took (not in the document)
    lane_groups: int = 0  # groups the apply lane applied (bridge.apply.lane; not in the document)

    def lane_groups_applied(self, groups: int, txns: int, beats: int, events: int, largest: int) -> None:
        self.transactions_applied += txns - beats
        self.heartbeats_applied += beats
        self.row_events_applied += events
        self.groups_applied += groups
        self.lane_groups += groups
        if largest > self.largest_group:
            self.largest_group = largest

    def status(self) -> dict:
        out = asdict(self)
        del out["largest_group"], out["lane_groups"]
        return out


@dataclass
class PrimaryCounts:
    transactions_shipped: int = 0  # user transactions (heartbeat rows apart)
    heartbeats_shipped: int = 0
    frames_resent: int = 0
    binlog_reopens: int = 0
    reconnects: int = 0
    acks_sent: int = 0  # semi-sync (in the document's semi_sync part)
    acks_skipped: int = 0  # applied mode: the replica did not commit within the primary's timeout
    taken_whole: int = 0  # read in one call (BinlogReader.next_transaction/rest_of_transaction; not in the document)
    runs: int = 0  # calls that framed transactions straight into the ring (RingProducer.place_run; not either)
    lane_runs: int = 0  # ship lane calls that placed transactions (bridge.source.ship; not either)

    def status(self) -> dict:
        out = asdict(self)
        del out["acks_sent"], out["acks_skipped"], out["taken_whole"], out["runs"], out["lane_runs"]
        return out
