"""The apply lane: the replica side's common case in one call per group. Here: which
``Lane`` runs (compiled, bridge.apply.lane._lane, with its position in ``_position`` and
its waits in ``_io``; or its twin, bridge.apply.lane.lane, with ``mysqlpos``), when the
lane runs (``LaneRunner``), and what the applier and the ring learn from it.

The lane runs for one replica connection in binlog mode once the general path has
set that connection up (the primary's FORMAT_DESCRIPTION run, the BINLOG probes
done, the position taken as a row event), without TLS on it, and never while a
chunked transaction is open. It is built again when the connection or the format
changes. After an error answer or a lost connection the lane stays off until the
general path has applied the frames it gave back (it names the error, halts or
reconnects as always).
"""

from __future__ import annotations

import logging
import ssl

from bridge.apply.binlog import build
from bridge.apply.channel import Position
from bridge.apply.lane import lane as twin
from bridge.model import Gtid, GtidSet
from bridge.server import dbconn
from bridge.wire import native

log = logging.getLogger(__name__)
PART = "apply lane"
_compiled = native.pick(PART)
Lane = _compiled.Lane if _compiled is not None else twin.Lane
COMPILED = _compiled is not None
NOTHING, FAILED, LOST = twin.NOTHING, twin.FAILED, twin.LOST


class LaneRunner:
    """The lane of one Applier (single connection)."""

    def __init__(self, applier) -> None:
        self.applier = applier
        self.lane = self.last = None  # last: the lane whose run's results (counts, stages) are the latest
        self._key = None  # (socket, format event) the lane was built for
        self._position = None  # the Position the lane last made (or was set from)
        self._held_until = 0  # the general path applies through this seq first

    def run(self, consumer, max_txns: int, max_events: int, max_bytes: int, doorbell: int = -1,
            wait_ms: int = 0, receiver=None, sleeper=None, spin_us: int = 0, busy_ms: int = 0,
            interrupt_fd: int | None = None) -> int:
        """Apply groups through the lane (for up to ``wait_ms``, sleeping on ``doorbell``
        while the ring is empty, or holding the tcp data connection of ``receiver``, or over
        rdma on the queue pair ``sleeper``): the frames applied, 0 when the general path
        takes the next frame (or nothing came)."""
        applier = self.applier
        position = applier.position
        if position.applied_seq < self._held_until or not consumer.settled or not self._ready(position):
            return 0
        lane = self.last = self.lane
        got = lane.run(consumer.region, consumer.tail, consumer.expected_seq, consumer.epoch,
                       dbconn.raw_socket(applier.conn), max_txns, max_events, max_bytes, applier.max_query_bytes,
                       doorbell, wait_ms, receiver, sleeper, spin_us, busy_ms, interrupt_fd)
        if lane.groups:
            consumer.took_and_acked(lane.expected_seq - 1, lane.tail)
            gtids = GtidSet.parse(lane.gtids) if lane.mysql else \
                GtidSet(mariadb=tuple(Gtid(str(d), n, s) for d, s, n in lane.gtid_parts()))
            self._position = applier.position = Position(lane.seq, gtids)
        if got >= 0:
            return got
        self._held_until = lane.expected_seq + lane.given_back - 1
        self.lane = None
        if got == FAILED:
            applier.rollback()  # the general path applies the same frames again and names the error
        else:
            dbconn.force_close(applier.conn)  # the general path finds it lost and reconnects
        log.debug("apply lane: %s at seq %d; the general path takes seq %d..%d", f"error answer {lane.error[7:]!r}"
                  if got == FAILED else "connection lost", lane.expected_seq, lane.expected_seq, self._held_until)
        return lane.txns

    def _ready(self, position) -> bool:
        applier = self.applier
        rows, fmt, sock = applier.binlog_rows, applier.format, dbconn.raw_socket(applier.conn)
        if applier.mode != "binlog" or applier.chunk_open or fmt is None or sock is None or \
                isinstance(sock, ssl.SSLSocket) or not rows.ready_for(fmt):
            return False
        key = (sock, fmt.event)
        if self.lane is None or key != self._key:
            table = rows.position_table
            # a MySQL replica keeping the primary's GTIDs: each transaction with its own (bridge.apply.gtids)
            engines = applier.engines_known if applier.keeps_gtids else None
            self.lane = Lane(build.position_key(applier.channel.encode(), table.channel_bytes,
                                                     fmt.flavor.binlog_rows_v2),
                             rows.position_map, table.updated_at_digits, fmt.checksum_bytes == 4, fmt.server_id,
                             engines, build.update_type(fmt))
            self._key, self._position = key, None
        if position is not self._position:  # the general path moved it
            if not self.lane.set_position(position.applied_seq, position.gtid_set):
                log.debug("apply lane: off at seq %d, its GTID set is not one it carries (%d bytes)",
                          position.applied_seq, len(str(position.gtid_set)))
                self.lane = None
                return False
            self._position = position
        return True
