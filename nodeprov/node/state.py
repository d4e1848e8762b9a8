"""The lifecycle of a node handle: one enum of states and one table of allowed transitions
(the same shape as :mod:`nodeprov.runs.state`)::

    active ◄──► suspended
       │            │
       └──► destroying ◄──┘ ──► destroyed
              ▲    │
              └────┘  (a destroy that failed or ran out of time is retried)

- ``active``: processes can be spawned.
- ``suspended``: the node's compute is stopped, its files kept (see
  :meth:`~nodeprov.node.NodeHandle.suspend`); spawns are refused until it wakes.
- ``destroying``: a destroy has begun; spawns are refused, and a spawn that was under way
  is undone. A destroy that failed leaves the handle here, to be retried.
- ``destroyed``: the node is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = ["NODE_TRANSITIONS", "NodeState"]


class NodeState(StrEnum):
    """Where a node handle stands (see the module's diagram)."""

    ACTIVE = "active"
    SUSPENDED = "suspended"
    DESTROYING = "destroying"
    DESTROYED = "destroyed"

    @property
    def closing(self) -> bool:
        """Whether the node is being or has been destroyed: nothing may start on it."""
        return self in (NodeState.DESTROYING, NodeState.DESTROYED)


_S = NodeState
NODE_TRANSITIONS: Mapping[NodeState, frozenset[NodeState]] = MappingProxyType(
    {
        _S.ACTIVE: frozenset({_S.SUSPENDED, _S.DESTROYING}),
        _S.SUSPENDED: frozenset({_S.ACTIVE, _S.DESTROYING}),
        _S.DESTROYING: frozenset({_S.DESTROYED}),
        _S.DESTROYED: frozenset(),
    }
)
"""The allowed transitions: ``state -> the states it may move to``. Staying in a state is
no transition: a second suspend, wake or destroy finds the handle where it asked to be."""
