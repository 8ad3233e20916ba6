"""Which ship lane runs (bridge.source.ship, compiled as bridge.source._ship): the
compiled one where the install built it, else its pure-Python twin (bridge.wire.native
decides and says which). The dump's reader comes with the lane, which reads its buffer
directly (compiled: bridge/source/_dumpreader.pyx)."""

from __future__ import annotations

from bridge.source import ship as twin
from bridge.wire import native

PART = "ship lane"
_compiled = native.pick(PART)
COMPILED = _compiled is not None
_module = _compiled if _compiled is not None else twin
DumpReader, ShipLane = _module.DumpReader, _module.ShipLane
IDLE, NOT_MINE, MAX_RINGS = twin.IDLE, twin.NOT_MINE, twin.MAX_RINGS


def takes(target) -> bool:
    """Whether this lane can write a ring as its ``LaneTarget`` says (bridge.transport.base):
    over rdma the compiled lane posts on the compiled queue pair only."""
    return target is not None and (target.verbs is None or not COMPILED or target.verbs.lane_path is not None)
