"""Both appliers the replica side may hold have every member of the protocol the node
uses (bridge.apply.protocol.ApplierLike)."""

import pytest

from bridge.apply.applier import Applier
from bridge.apply.parallel import ParallelApplier
from bridge.apply.protocol import ApplierLike

MEMBERS = sorted(set(ApplierLike.__annotations__) |
                 {name for name, value in vars(ApplierLike).items()
                  if not name.startswith("_") and (callable(value) or isinstance(value, property))})


def test_the_protocol_names_what_the_node_uses():
    assert {"position", "stats", "apply", "apply_group", "reconnect", "format", "close"} <= set(MEMBERS)


@pytest.mark.parametrize("cls", [Applier, ParallelApplier])
def test_each_applier_has_every_member(cls):
    # instance attributes set in __init__ (position, stats) are declared on the class or set there
    source = __import__("inspect").getsource(cls)
    missing = [name for name in MEMBERS if not hasattr(cls, name) and f"self.{name} =" not in source]
    assert not missing, f"{cls.__name__} lacks {missing}"
