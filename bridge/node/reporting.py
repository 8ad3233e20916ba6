"""What the primary side reports, read by other threads than the node's own (see
PrimaryNode's docstring: each takes a local reference first and only reads): its status
document (the metrics thread), where it reads the binlog (the behind monitor) and why
semi-sync went async (the semi-sync monitor)."""

from __future__ import annotations

from bridge.node import realtime
from bridge.ops.statusdoc import PrimaryStatus
from bridge.source.behind import Reading


def reading(node) -> Reading | None:
    """Where this side is, for the behind monitor (its thread): None without a session."""
    reader, producer = node.reader, node.member.producer
    if reader is None or producer is None:
        return None
    return Reading(node.last_gtid, reader.log_file, reader.commit_pos, producer.backlog_frames, producer.used,
                   producer.write_seq - producer.backlog_frames)


def degradation_reason(node) -> str:
    """Why semi-sync went async, as this bridge sees it at the moment of the switch."""
    if node._stop.is_set():
        return "bridge stopped"
    link = node.member.link
    if link is None or link.remote is None or link.down:
        return "link down"
    if node.member.waiting_for_space:
        return "backpressure"
    return "ack timeout"


def routed(remote) -> dict:
    """``{"rdma": where its queue pair runs}`` for a ring written over rdma, else nothing."""
    route = getattr(remote, "route", None)
    return {"rdma": route} if route else {}


def primary_status(node) -> PrimaryStatus:
    member = node.member
    producer = member.producer
    return {"role": "primary", "source": str(node.cfg.source),
            "replica": member.name, "transport": member.transport,
            "apply_mode": member.apply_mode,
            "connected": member.remote is not None, "last_gtid": node.last_gtid,
            "apply_stopped": member.apply_stopped, "replica_delay_s": member.replica_delay_s,
            "scheduling": realtime.scheduling(), "behind": node.behind.status(),
            "counters": {**node.counts.status(),
                         "ring_backlog_frames": producer.backlog_frames if producer else 0,
                         "ring_backlog_bytes": producer.used if producer else 0},
            "heartbeat": node.heartbeat.status() if node.heartbeat else None,
            "semi_sync": {"mode": node.cfg.semi_sync, "acks_sent": node.counts.acks_sent,
                          "acks_skipped": node.counts.acks_skipped, **node.semi_sync.status()}
            if node.semi_sync else {"mode": "off"},
            "stages": node.stages.summary(), **routed(member.remote)}
