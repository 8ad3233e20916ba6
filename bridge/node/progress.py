"""Periodic progress lines for the long-running nodes (pure timing, no I/O)."""

from __future__ import annotations

import time

PROGRESS_S = 10.0


class Progress:
    """``due(count)`` returns (done since the last report, seconds since it) once per
    interval, or None; the caller logs it when something was done."""

    def __init__(self, interval_s: float = PROGRESS_S) -> None:
        self.interval_s = interval_s
        self._last_t = time.monotonic()
        self._last_count = 0

    def due(self, count: int) -> tuple[int, float] | None:
        now = time.monotonic()
        if now - self._last_t < self.interval_s:
            return None
        done, elapsed = count - self._last_count, now - self._last_t
        self._last_t, self._last_count = now, count
        return done, elapsed
