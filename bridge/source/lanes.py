"""Which ship lane runs (bridge.source.ship, compiled as bridge.source._ship): the
compiled one where the install built it, else its pure-Python twin, said in one log
line at start. The dump's reader comes from the same module as the lane, which reads
its buffer directly."""

from __future__ import annotations

import logging

from bridge.source import ship as twin
from bridge.wire.native import compiled_or_why

_compiled, why_pure = compiled_or_why("bridge.source._ship")
COMPILED = _compiled is not None
_module = _compiled if _compiled is not None else twin
DumpReader, ShipLane = _module.DumpReader, _module.ShipLane
IDLE, NOT_MINE, MAX_RINGS = twin.IDLE, twin.NOT_MINE, twin.MAX_RINGS


def announce(log: logging.Logger) -> None:
    if COMPILED:
        log.info("ship lane: compiled (bridge.source._ship)")
    else:
        log.warning("ship lane: pure Python, slower (%s)", why_pure)
