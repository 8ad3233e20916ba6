"""Which hot path runs: the compiled ``_hotpath`` (Cython) or its pure-Python twin.

``hot`` is the module whose functions the codec, the ring and the binlog reader call
(``hot.encode_compact(...)`` and so on: one attribute read, then a call). The
compiled one is used when the install built it; ``RDMA_BRIDGE_PURE_PYTHON=1`` in
the environment asks for the twin (the tests run both). ``announce`` writes the one
log line a node's start says about it.
"""

from __future__ import annotations

import importlib
import logging
import os

from bridge.wire import hotpath

PURE_ENV = "RDMA_BRIDGE_PURE_PYTHON"


def compiled_or_why(name: str):
    """(the compiled module ``name``, "") or (None, why its twin runs instead): asked
    for by the environment, or not built. bridge.transport.receiver picks its loop so too."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"{PURE_ENV} is set"
    try:
        return importlib.import_module(name), ""
    except ImportError as exc:
        return None, f"the compiled module is not built ({exc}); reinstall with a C compiler and Python headers"


_compiled, why_pure = compiled_or_why("bridge.wire._hotpath")
hot = _compiled or hotpath
COMPILED = hot is not hotpath


def announce(log: logging.Logger) -> None:
    """One line: the compiled hot path, or the twin and why."""
    if COMPILED:
        log.info("hot path: compiled (%s)", hot.__name__)
    else:
        log.warning("hot path: pure Python, slower (%s)", why_pure)
