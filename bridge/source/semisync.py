"""Semi-sync replication form as a first-class signal (semi-sync silently
degrades to async after an ACK timeout, and nobody notices for hours).

``SemiSyncMonitor`` polls the primary's ``Rpl_semi_sync_master_status`` (MySQL's
source plugin: ``Rpl_semi_sync_source_status``; bridge.server.flavor names them) and its
counters and keeps: the current form (sync/async), how long the current async streak
is, the total async time, the number of degradations by reason, and the last reason
and time. The reason comes from the bridge's own view at the moment of the switch
(``reason_hint``): ``link down``, ``backpressure`` (the ring stayed full, so nothing
could be acknowledged), ``bridge stopped`` (found async when this bridge started: it
was not there to acknowledge), else ``ack timeout``. Every switch is logged.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

import pymysql

from bridge.config import MysqlUrl
from bridge.errors import BridgeError, PreflightError
from bridge.server.flavor import Flavor
from bridge.source.preflight import connect

log = logging.getLogger(__name__)
POLL_S = 0.2
REASONS = ("ack timeout", "backpressure", "link down", "bridge stopped")


def check_enabled(conn, url: MysqlUrl) -> int:
    """Refuse a primary without semi-sync enabled (or without a semi-sync plugin, naming
    the one to install); returns its ACK timeout in ms."""
    flavor = Flavor.of(conn)
    enabled, timeout = flavor.semi_sync_variable("enabled"), flavor.semi_sync_variable("timeout")
    if not flavor.semi_sync and flavor.is_mysql:
        raise PreflightError(f"primary {url}: no semi-sync plugin is loaded (neither rpl_semi_sync_source nor "
                             f"rpl_semi_sync_master): {flavor.semi_sync_plugins}, then SET GLOBAL {enabled}=ON (and "
                             "both in my.cnf), or run with --semi-sync off")
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (%s, %s)", (enabled, timeout))
        variables = {k.lower(): v for k, v in cur.fetchall()}
    if variables.get(enabled, "OFF").upper() != "ON":
        raise PreflightError(f"primary {url}: semi-sync is disabled ({enabled}="
                             f"{variables.get(enabled, 'not available')}); "
                             f"SET GLOBAL {enabled}=ON (and in my.cnf), or run with --semi-sync off")
    return int(variables.get(timeout, "10000"))


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class SemiSyncMonitor:
    def __init__(self, url: MysqlUrl, reason_hint: Callable[[], str]) -> None:
        self.url, self.reason_hint = url, reason_hint
        self.state = "unknown"
        self.degradations = {reason: 0 for reason in REASONS}
        self.recoveries = 0
        self.last_reason = ""
        self.last_change = ""
        self.async_total_s = 0.0
        self._async_since: float | None = None
        self.counters: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="semi-sync-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def status(self) -> dict:
        with self._lock:
            streak = time.monotonic() - self._async_since if self._async_since is not None else 0.0
            return {"state": self.state, "async_streak_s": round(streak, 3),
                    "async_total_s": round(self.async_total_s + streak, 3),
                    "degradations": dict(self.degradations), "recoveries": self.recoveries,
                    "last_reason": self.last_reason, "last_change": self.last_change,
                    "primary": dict(self.counters)}

    def observe(self, on: bool, counters: dict[str, int]) -> None:
        """One poll's result (also the tests' way in)."""
        with self._lock:
            self.counters = counters
            now = time.monotonic()
            if on and self.state != "sync":
                if self._async_since is not None:
                    self.async_total_s += now - self._async_since
                    self._async_since = None
                    self.recoveries += 1
                    log.warning("semi-sync is back ON at the primary %s (async for %.1fs, reason was %s)",
                                self.url, self.async_total_s, self.last_reason)
                else:
                    log.info("semi-sync ON at the primary %s", self.url)
                self.state, self.last_change = "sync", _now()
            elif not on and self.state != "async":
                reason = "bridge stopped" if self.state == "unknown" else self.reason_hint()
                self.degradations[reason] += 1
                self.state, self.last_reason, self.last_change = "async", reason, _now()
                self._async_since = now
                log.warning("semi-sync DEGRADED to async at the primary %s: %s", self.url, reason)

    def _run(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = connect(self.url, "primary (semi-sync monitor)")
                prefix = Flavor.of(conn).semi_sync_status_prefix.lower()
                with conn.cursor() as cur:
                    cur.execute("SHOW GLOBAL STATUS LIKE %s", (prefix + "%",))
                    rows = {k.lower().removeprefix(prefix): v for k, v in cur.fetchall()}
                counters = {k: int(v) for k, v in rows.items() if v.isdigit()}
                self.observe(rows.get("status", "OFF").upper() == "ON", counters)
            except (pymysql.MySQLError, BridgeError) as exc:
                log.debug("semi-sync monitor: %s", exc)
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(POLL_S)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
