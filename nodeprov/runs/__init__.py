"""Runs: what a control plane calls.

:class:`Orchestrator` starts runs (provision a node, drive the agent through the SDK bridge,
relay every message as a typed :class:`RunEvent`, destroy the node), pauses and resumes them,
and reconciles what dead control planes left behind. State lives in a
:class:`~nodeprov.store.Store`; transcripts are mirrored into it during runs, so a run whose
node died can resume on a new node. A run moves through the :class:`RunState` machine
(:mod:`nodeprov.runs.state`), one compare-and-set per transition.

Pause and resume are workflow concerns, not provider capabilities: pausing interrupts the
agent (the SDK's interrupt, then abort), saves a :class:`~nodeprov.store.SnapshotRecord`
with a single-use token, and keeps or releases the node. Resuming takes the token, attaches
to the kept node or provisions a fresh one (writing the agent's transcript onto it first),
and continues the agent's session with a message.

Nothing secret is stored or emitted: the agent options' ``env`` never reaches the store or
an event; callers pass their options (with credentials) again when resuming.

One concern per module: :mod:`~nodeprov.runs.orchestrator` (the facade),
:mod:`~nodeprov.runs.plane` (what the parts share, and how they reach each other),
:mod:`~nodeprov.runs.spec` (a run as asked, and what it gets when it does not say),
:mod:`~nodeprov.runs.offline` (the offline scripted models runs are driven on),
:mod:`~nodeprov.runs.run` (the handle a caller holds), :mod:`~nodeprov.runs.journal`
(events: sequence, batching, fan-out, replay), :mod:`~nodeprov.runs.lease`,
:mod:`~nodeprov.runs.launch` (checking and claiming starts and resumes),
:mod:`~nodeprov.runs.driver` (one run's workflow through :mod:`~nodeprov.runs.state`),
:mod:`~nodeprov.runs.pauses` (pause requests across processes),
:mod:`~nodeprov.runs.reconcile` (reconcile and garbage collection),
:mod:`~nodeprov.runs.nodes` (providers, destroying recorded nodes),
:mod:`~nodeprov.runs.archive` (the agents' session state in the store) and
:mod:`~nodeprov.runs.progress` (what an agent waits for).
"""

from ..errors import RunStateError
from .checkpointing import RunCheckpoints, WorkspaceDiff
from .events import (
    AgentDetached,
    AgentMessage,
    AgentReattached,
    CheckpointFailed,
    CheckpointSaved,
    NodeReady,
    NodeReleased,
    RunEvent,
    RunFinished,
    RunPaused,
    RunStarted,
    event_from_json,
)
from .orchestrator import Orchestrator
from .pools import Pool, Pools, PoolStatus
from .reconcile import ReconcileReport
from .run import TURN_ENDED, PauseKind, Run
from .spec import KEPT_AGENT_GRACE, RunSpec
from .state import TRANSITIONS, RunState

__all__ = [
    "KEPT_AGENT_GRACE",
    "TRANSITIONS",
    "TURN_ENDED",
    "AgentDetached",
    "AgentMessage",
    "AgentReattached",
    "CheckpointFailed",
    "CheckpointSaved",
    "NodeReady",
    "NodeReleased",
    "Orchestrator",
    "PauseKind",
    "Pool",
    "PoolStatus",
    "Pools",
    "ReconcileReport",
    "Run",
    "RunCheckpoints",
    "RunEvent",
    "RunFinished",
    "RunPaused",
    "RunSpec",
    "RunStarted",
    "RunState",
    "RunStateError",
    "WorkspaceDiff",
    "event_from_json",
]
