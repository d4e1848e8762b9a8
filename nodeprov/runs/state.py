"""The run state machine: one enum of states and one table of allowed transitions.

Every transition is a single compare-and-set in the store (the state it leaves, and the
control plane that owns the run), so of several racing movers exactly one wins, in this
process or across control planes::

    starting ──► running ──► finishing ──► finished
       │  │         │  │          │
       │  └──► pausing ◄─┘        │
       │         │   │            │
       │         ▼   └──────┐     │
       │       paused       ▼     ▼
       └──────────────────► failed ◄─ (from any live state)
    paused, failed ──► starting      (resume)

- ``starting``: the node is being provisioned or attached, the agent's transcript restored.
  A pause here interrupts provisioning; the snapshot keeps the session being resumed.
- ``running``: the agent runs.
- ``pausing``: a pause won; the agent is being stopped and a snapshot saved.
- ``finishing``: the agent returned its result; the node is being released. A pause that
  comes now is refused: the run is as good as over.
- ``paused``, ``finished``, ``failed``: nobody drives the run. ``paused`` and ``failed``
  (when it has a snapshot) can be resumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = ["LIVE_STATES", "RESUMABLE_STATES", "TRANSITIONS", "RunState", "sources"]


class RunState(StrEnum):
    """Where a run stands (see the module's diagram)."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSING = "pausing"
    FINISHING = "finishing"
    PAUSED = "paused"
    FINISHED = "finished"
    FAILED = "failed"

    @property
    def live(self) -> bool:
        """Whether a control plane drives the run now."""
        return self in LIVE_STATES

    @property
    def outcome(self) -> str | None:
        """``ok``, ``paused`` or ``error`` once nobody drives the run, else ``None``."""
        return _OUTCOMES.get(self)


_S = RunState
TRANSITIONS: Mapping[RunState, frozenset[RunState]] = MappingProxyType(
    {
        _S.STARTING: frozenset({_S.RUNNING, _S.PAUSING, _S.FAILED}),
        _S.RUNNING: frozenset({_S.PAUSING, _S.FINISHING, _S.FAILED}),
        _S.PAUSING: frozenset({_S.PAUSED, _S.FAILED}),
        _S.FINISHING: frozenset({_S.FINISHED, _S.FAILED}),
        _S.PAUSED: frozenset({_S.STARTING}),
        _S.FAILED: frozenset({_S.STARTING}),
        _S.FINISHED: frozenset(),
    }
)
"""The allowed transitions: ``state -> the states it may move to``."""

LIVE_STATES = frozenset({_S.STARTING, _S.RUNNING, _S.PAUSING, _S.FINISHING})
RESUMABLE_STATES = (_S.PAUSED, _S.FAILED)
"""The states a resume may start from."""
_OUTCOMES = {_S.PAUSED: "paused", _S.FINISHED: "ok", _S.FAILED: "error"}


def sources(target: RunState) -> frozenset[RunState]:
    """The states from which ``target`` may be entered."""
    return frozenset(state for state, targets in TRANSITIONS.items() if target in targets)
