"""How far the replica is behind the primary, as the primary side sees it once a
second: transactions and bytes between the primary's binlog position and what the
replica committed (not yet read from the binlog, plus read but not yet applied), the
rate the replica applies at, and when it will have caught up at that rate.

A thread polls the primary (its GTID position and binlog status, by bridge.server.flavor, and, when the
reader is on an older binlog file, ``SHOW BINARY LOGS`` for the sizes in between);
``figures`` is the pure part. Heartbeat lag (seconds behind) is the replica side's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import pymysql

from bridge.config import MysqlUrl
from bridge.errors import BridgeError
from bridge.model import Gtid, GtidSet
from bridge.server.flavor import Flavor
from bridge.source.preflight import connect

log = logging.getLogger(__name__)
RATE_WINDOW_S = 10.0  # the apply and write rates are averaged over this long


@dataclass(frozen=True, slots=True)
class Reading:
    """What the primary side knows of itself at one moment."""

    last_gtid: str  # the last transaction read from the binlog and placed in the ring
    log_file: str  # the binlog file and offset the reader is at
    log_pos: int
    backlog_frames: int  # placed in the ring, not yet committed by the replica
    backlog_bytes: int
    acked_seq: int  # the replica committed every frame up to this one


@dataclass(frozen=True, slots=True)
class Primary:
    """What the primary says of its binlog at the same moment."""

    gtids: GtidSet
    log_file: str
    log_pos: int
    file_sizes: dict[str, int]  # binlog file -> size, from the reader's file on (empty when both are on one)


def unread_transactions(primary: GtidSet, last_gtid: str) -> int:
    """Transactions of the primary's binlog after ``last_gtid`` (MariaDB: per domain, in
    the domain of the last one read; MySQL: the intervals' ends of that source)."""
    if not last_gtid:
        return 0
    last = Gtid.parse(last_gtid)
    if last.is_mariadb:
        have = next((g for g in primary.mariadb if g.domain == last.domain), None)
        return max(0, have.seq - last.seq) if have else 0
    ends = [end for uuid, intervals in primary.mysql if uuid == last.domain for _, end in intervals]
    return max(0, max(ends, default=last.seq) - last.seq)


def unread_bytes(primary: Primary, reading: Reading) -> int:
    if primary.log_file == reading.log_file or not reading.log_file:
        return max(0, primary.log_pos - reading.log_pos)
    files = sorted(f for f in primary.file_sizes if reading.log_file <= f < primary.log_file)
    return max(0, sum(primary.file_sizes[f] for f in files) - reading.log_pos) + primary.log_pos


CAUGHT_UP_S = 0.1  # a backlog of this long of the primary's writes, kept pace with, is caught up (in flight)


def figures(primary: Primary, reading: Reading, apply_rate: float | None, write_rate: float | None) -> dict:
    """The status document's ``behind`` section. A replica that keeps pace with the
    primary and holds all but what is in flight (two transactions, or a tenth of a
    second of the primary's writes) is caught up, ETA 0: the heartbeat rows alone keep a
    transaction in flight at any moment, also when the primary is idle."""
    txns = unread_transactions(primary.gtids, reading.last_gtid) + reading.backlog_frames
    eta = None
    keeping_pace = apply_rate is not None and write_rate is not None and apply_rate >= write_rate * 0.95
    if txns == 0 or (keeping_pace and txns <= max(2.0, write_rate * CAUGHT_UP_S)):
        eta = 0.0
    elif apply_rate is not None and write_rate is not None and apply_rate > write_rate:
        eta = round(txns / (apply_rate - write_rate), 1)
    return {"transactions": txns, "bytes": unread_bytes(primary, reading) + reading.backlog_bytes,
            "primary_transactions": total_seq(primary.gtids),
            "apply_rate_tps": None if apply_rate is None else round(apply_rate, 1),
            "write_rate_tps": None if write_rate is None else round(write_rate, 1), "catch_up_eta_s": eta}


class Rate:
    """Events per second over the last RATE_WINDOW_S of (time, count) samples."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, count: int) -> float | None:
        self._samples.append((now, count))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW_S:
            self._samples.popleft()
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else None


def total_seq(gtids: GtidSet) -> int:
    """A number that grows by one per transaction the primary writes (the write rate)."""
    return sum(g.seq for g in gtids.mariadb) + sum(end for _, intervals in gtids.mysql for _, end in intervals)


class BehindMonitor:
    """The thread; ``status()`` is the latest figures (None until the first poll)."""

    def __init__(self, url: MysqlUrl, reading: Callable[[], Reading | None], poll_s: float = 1.0) -> None:
        self.url, self._reading, self.poll_s = url, reading, poll_s
        self._figures: dict | None = None
        self._apply, self._write = Rate(), Rate()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="behind-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def status(self) -> dict | None:
        return self._figures

    def _run(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                conn = conn or connect(self.url, "primary (behind monitor)")
                self._poll(conn)
            except (pymysql.MySQLError, BridgeError) as exc:
                log.debug("behind monitor: %s", exc)
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(self.poll_s)
        if conn is not None:
            conn.close()

    def _poll(self, conn) -> None:
        reading = self._reading()
        if reading is None:  # no session yet
            return
        flavor = Flavor.of(conn)
        with conn.cursor() as cur:
            cur.execute(flavor.gtid_position_sql)
            gtids = GtidSet.parse(cur.fetchone()[0])
            cur.execute(flavor.binlog_status)
            row = cur.fetchone()
            sizes = {}
            if row and reading.log_file and row[0] != reading.log_file:
                cur.execute("SHOW BINARY LOGS")
                sizes = {r[0]: int(r[1]) for r in cur.fetchall()}
        now = time.monotonic()
        primary = Primary(gtids, row[0] if row else "", int(row[1]) if row else 0, sizes)
        self._figures = figures(primary, reading, self._apply.add(now, reading.acked_seq),
                                self._write.add(now, total_seq(gtids)))

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
