"""The compiled core's registry: for each compiled module (every bridge/*/_*.pyx that
setup.py builds), whether it runs or its pure-Python twin does, and why; decided once per
process and said in one log line at a node's start.

A part's picker asks ``pick(module, part)`` once, at its import: the compiled module, or
None when the twin runs because ``RDMA_BRIDGE_PURE_PYTHON=1`` asks for it (the tests run
both) or the install did not build it. ``hot`` is the hot path's module, whose functions
the codec, the ring and the binlog reader call (``hot.encode_compact(...)``: one attribute
read, then a call). ``announce(log, parts)`` is the line a node logs about the parts it uses.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

from bridge.wire import hotpath

PURE_ENV = "RDMA_BRIDGE_PURE_PYTHON"
# what running a part's twin costs, where it is more than CPU
_COST = {"tcp receiver": "its answers wait for the interpreter lock"}


@dataclass(frozen=True, slots=True)
class Choice:
    part: str  # what the module does: "hot path", "ship lane", "apply lane", "tcp receiver"
    module: str  # the compiled module's name
    compiled: ModuleType | None
    why_pure: str  # "" where the compiled module runs


# every part a compiled module does, and that module (setup.py builds each bridge/**/_*.pyx;
# the ones not named here are cimported by these)
PARTS = {"hot path": "bridge.wire._hotpath", "ship lane": "bridge.source._ship",
         "apply lane": "bridge.apply.lane._lane", "tcp receiver": "bridge.transport._receiver",
         "rdma queue pair": "bridge.transport._verbs"}
_choices: dict[str, Choice] = {}


def pick(part: str) -> ModuleType | None:
    """The compiled module that does ``part``, or None where its twin runs (noted with why)."""
    if part not in _choices:
        module = PARTS[part]
        _choices[part] = Choice(part, module, *_compiled_or_why(module))
    return _choices[part].compiled


def compiled_parts() -> list[str]:
    """The parts this process picked so far that run compiled."""
    return [c.part for c in _choices.values() if c.compiled is not None]


def described() -> str:
    """Which parts run compiled here, and which as their twins and why (``--version``)."""
    for part in PARTS:
        pick(part)
    chosen = [_choices[part] for part in PARTS]
    compiled = ", ".join(c.part for c in chosen if c.compiled is not None) or "none"
    pure = [c for c in chosen if c.compiled is None]
    whys = "; ".join(dict.fromkeys(c.why_pure for c in pure))
    return f"compiled: {compiled}" + (f"\npure Python: {', '.join(c.part for c in pure)} ({whys})" if pure else "")


def choice(part: str) -> Choice:
    return _choices[part]


def _compiled_or_why(name: str) -> tuple[ModuleType | None, str]:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"{PURE_ENV} is set"
    try:
        return importlib.import_module(name), ""
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name and not name.startswith(exc.name):
            return None, f"it needs {exc.name}, which is not installed"  # a library the module imports
        return None, f"the compiled module is not built ({exc}); reinstall with a C compiler and Python headers"


def announce(log: logging.Logger, parts: Iterable[str]) -> None:
    """One line: which of ``parts`` run compiled, and which run as their twins and why."""
    chosen = [_choices[part] for part in parts]
    compiled = [c.part for c in chosen if c.compiled is not None]
    pure = [c for c in chosen if c.compiled is None]
    if not pure:
        log.info("compiled core: %s", ", ".join(compiled))
        return
    costs = "".join(f", {_COST[c.part]}" for c in pure if c.part in _COST)
    whys = "; ".join(dict.fromkeys(c.why_pure for c in pure))
    log.warning("compiled core: %s in pure Python, slower%s (%s)%s", ", ".join(c.part for c in pure), costs, whys,
                f"; compiled: {', '.join(compiled)}" if compiled else "")


hot = pick("hot path") or hotpath
COMPILED = hot is not hotpath
