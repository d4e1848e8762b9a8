"""The store's records: one frozen dataclass per table row, and the states of a run's node."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "EventRecord",
    "LeaseRecord",
    "NodeRecord",
    "NodeRecordState",
    "RunRecord",
    "SessionRecord",
    "SnapshotRecord",
]


@dataclass(frozen=True)
class SessionRecord:
    """A workspace's agent session: ``provider`` is the agent's registered name, and
    ``provider_session_id`` the agent's own session id once known."""

    id: str
    workspace_id: str
    provider: str
    provider_session_id: str | None
    state: str  # active | archived
    created_at: str
    archived_at: str | None


@dataclass(frozen=True)
class RunRecord:
    """One run: its task, where it runs, and how it stands.

    ``state`` is one of :class:`nodeprov.runs.RunState` (the run state machine);
    ``outcome`` once paused or over: ok, paused, error. ``owner`` is the control plane that
    drives it (``lease:ID`` for an orchestrator). ``node_settings`` holds the provider
    settings less their secrets (:meth:`~nodeprov.ProviderSettings.storable`);
    ``node_secret_fields`` the names of the secret ones it was given (JSON list).
    ``agent`` is the agent that runs it, ``agent_options`` its options less their secrets
    (:meth:`~nodeprov.agents.AgentOptions.storable`), ``project_key`` where its session
    state is archived. ``prompt`` is the prompt's text; ``prompt_blocks`` a prompt of
    blocks as JSON (text blocks, and images as :meth:`~nodeprov.prompts.ImageBlock.ref`,
    their bytes in the store's images), ``[]`` for a prompt that is text alone.
    ``agent_keeper`` is where the agent's process runs kept on the node (its keeper's
    directory, see :mod:`nodeprov.node.keeper`) while the run drives it; ``agent_grace`` the
    seconds it is kept with no control plane attached (0: not kept; None: a run stored before
    runs kept their own). ``model`` is the model it asked for: a model id,
    :data:`~nodeprov.scripted.SCRIPTED` (its agent's offline model), or None (its agent's
    default); a resume that names none runs on it again. ``checkpoint`` is when it
    checkpoints its workspace (:data:`~nodeprov.runs.spec.CheckpointMode`). A fork names
    the run it was forked from (``forked_from``) and the checkpoint it began at (``forked_at``).
    """

    id: str
    session_id: str
    workspace_id: str
    prompt: str
    node_provider: str
    node_settings: str
    agent_options: str
    state: str
    outcome: str | None
    error: str | None
    node_id: str | None
    agent_session_id: str | None
    project_key: str | None
    owner: str
    pause_request: str | None
    created_at: str
    updated_at: str
    agent: str
    node_secret_fields: str = "[]"  # noqa: S105 - names of secrets, never values
    node_config: str = "{}"
    prompt_blocks: str = "[]"
    agent_keeper: str | None = None
    agent_grace: float | None = None
    model: str | None = None
    checkpoint: str = "pause"
    forked_from: str | None = None
    forked_at: str | None = None


@dataclass(frozen=True)
class SnapshotRecord:
    """What resuming a paused (or failed) run needs: the agent and its session id, and the
    key its session state is archived under (``project_key``). ``token`` is single use."""

    token: str
    run_id: str
    node_id: str | None
    node_kept: bool
    provider: str
    agent_session_id: str | None
    project_key: str | None
    state: str
    pause_kind: str  # human | external | system
    reason: str
    created_at: str
    used_at: str | None
    agent: str


class NodeRecordState(StrEnum):
    """A run's node, as the store holds it. Moves between the states are compare-and-sets
    (:meth:`~nodeprov.store.Store.move_node`), so a pause that keeps a node and a reconcile
    that destroys it never both win."""

    INTENT = "intent"
    """About to be provisioned, before anything exists on the platform."""
    LIVE = "live"
    """In use by its run."""
    KEPT = "kept"
    """Kept for a paused run's resume, until :attr:`NodeRecord.keep_until_ms`."""
    DESTROYING = "destroying"
    """Claimed by whoever destroys it."""
    DESTROYED = "destroyed"
    FAILED = "failed"
    """Provisioning failed (the provider left nothing)."""


@dataclass(frozen=True)
class NodeRecord:
    """A run's node; ``keep_until_ms`` is the database's clock."""

    id: str
    provider: str
    run_id: str
    state: NodeRecordState
    created_at: str
    updated_at: str
    keep_until_ms: int | None


@dataclass(frozen=True)
class LeaseRecord:
    """A control plane's claim to the runs and nodes it owns (their ``owner`` is
    ``lease:ID``). It lives while heartbeats renew it; times are the database's clock in
    epoch milliseconds, so control planes on several hosts judge it alike."""

    id: str
    holder: str
    created_at: str
    heartbeat_ms: int
    expires_ms: int
    released: bool


@dataclass(frozen=True)
class EventRecord:
    """One run event as stored: ``seq`` counts from 1 over the run's whole life (resumes
    included); ``body`` is the event's JSON."""

    run_id: str
    seq: int
    kind: str
    at: str
    body: str
