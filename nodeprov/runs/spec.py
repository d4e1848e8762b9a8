"""A run as a caller asks for it (:class:`RunSpec`), and the rules that complete it: the one
place that decides what a run gets when its caller does not say. The library
(:meth:`Orchestrator.start <nodeprov.runs.Orchestrator.start>`), the CLI (``nodeprov run``)
and the service (``POST /v1/runs``) each translate their input into a :class:`RunSpec` and
nothing more, so the same run is refused with the same error through each of them.

The rules (see :class:`RunSpec`'s fields):

- the node comes from a ``provider`` (with this control plane's settings for it laid under
  the run's own) or from a warm ``pool`` (its provider, settings and node template, read
  once; the secrets it never stores from this control plane), never both;
- ``permission``: as given, else ``full`` where the node is not this machine or the model
  is the offline scripted one; a real model on this machine (the local provider: no
  sandbox, as the control plane's own user) must be given one;
- ``ship_cli``: as given, else on where the provider's nodes are on this machine;
- ``agent_grace``: as given (0: not kept), else this control plane's; stored with the run,
  so a take-over keeps it;
- ``model`` :data:`~nodeprov.scripted.SCRIPTED`: the agent's offline scripted model, up
  while this control plane drives the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import anyio

from ..agents import AgentOptions, Permission
from ..agents.registry import route_model
from ..errors import ConfigError
from ..node import NodeConfig
from ..node.keeper import KeepOptions
from ..prompts import Prompt
from ..scripted import SCRIPTED

__all__ = [
    "CHECKPOINT_MODES",
    "KEPT_AGENT_GRACE",
    "CheckpointMode",
    "ResumeFields",
    "RunFields",
    "RunSpec",
    "check_limits",
    "run_permission",
]

CheckpointMode = Literal["pause", "turn", "off"]
"""When a run checkpoints its workspace with its agent's session (:mod:`nodeprov.runs.checkpointing`):
at every pause (the default: a resume on a fresh node gets the files back), after each turn as
well, or never (a workspace too large to capture at a pause; a resume on a fresh node then
starts from the node as provisioned)."""
CHECKPOINT_MODES: tuple[str, ...] = ("pause", "turn", "off")

KEPT_AGENT_GRACE = 180.0
"""Seconds the CLI and the service keep a run's agent with nobody attached, unless told: a
closed laptop or a SIGKILLed shell loses no turn, and an agent nobody comes back for is not
left running (and billing) for long."""


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything a run is started with. Only ``prompt`` and one of ``provider`` and ``pool``
    are needed; what is left out is decided by the module's rules."""

    prompt: Prompt
    """Text, or text and image blocks (:mod:`nodeprov.prompts`), checked against the agent's
    model before anything is provisioned (the run keeps its images by hash)."""
    provider: str | None = None
    """The provider of the run's node (or ``pool``)."""
    pool: str | None = None
    """The warm pool to claim the node from (:mod:`nodeprov.runs.pools`): its provider,
    settings (``provider_settings`` laid over) and node template; when it has none ready, a
    node made cold from them, or with ``pool_wait`` one waited for."""
    pool_wait: bool = False
    provider_settings: Mapping[str, Any] = field(default_factory=dict)
    """Provider settings, over this control plane's for the provider (see
    :class:`~nodeprov.runs.Orchestrator`'s ``provider_settings``). Secret ones are never stored."""
    node_config: NodeConfig | None = None
    """What the node is made with (lifetime, labels, environment, tools); not with a pool."""
    agent: str | None = None
    """The agent; by default the one the model routes to (:func:`~nodeprov.registry.route_model`).
    The workspace's session follows the agent: a run of another agent than the workspace's
    last one archives that session."""
    model: str | None = None
    """A model id, :data:`~nodeprov.scripted.SCRIPTED` for the agent's offline scripted
    model, or None: the one in ``options``, else the agent's own default."""
    options: AgentOptions | Mapping[str, Any] | None = None
    """The agent's options (its options model, or a mapping of them); ``model``,
    ``permission`` and ``ship_cli`` given here are laid over them."""
    permission: Permission | None = None
    ship_cli: bool | None = None
    workspace: str = "default"
    deadline: float | None = None
    """Seconds the whole run may take (provisioning included); past it, it fails."""
    idle_timeout: float | None = None
    """Seconds the agent may go without progress (a message other than its model-API retry
    notices); past it, the run fails with the cause (the model API's last error)."""
    keep_node: bool = False
    """Keep the node for the resume when a pause does not say otherwise (a pause request from
    another process, or this control plane shutting down)."""
    pause_after_turn: bool = False
    """When the agent returns its result, pause the run (kind ``system``, reason
    :data:`~nodeprov.runs.TURN_ENDED`; the node kept by ``keep_node``) rather than finish it:
    each resume's message is then the conversation's next turn, on the same node and agent
    session (``nodeprov acp`` holds an editor's session so). A resume says it again for its turn."""
    agent_grace: float | None = None
    """Seconds the agent runs on, kept, with no control plane attached (0: not kept; None:
    this control plane's)."""
    checkpoint: CheckpointMode = "pause"
    """When the run checkpoints its workspace (see :data:`CheckpointMode`); its resumes keep it."""
    run_id: str | None = None
    """The run's id (new otherwise): a caller that must never start a run twice (a service
    retrying a request) chooses it first."""

    def given_options(self) -> dict[str, Any]:
        """``options`` as a mapping, with ``model`` (None for the scripted one),
        ``permission`` and ``ship_cli`` laid over where given."""
        options = (
            self.options.model_dump(exclude_unset=True)
            if isinstance(self.options, AgentOptions)
            else dict(self.options or {})
        )
        if self.model is not None:
            options["model"] = None if self.model == SCRIPTED else self.model
        for name in ("permission", "ship_cli"):
            if (value := getattr(self, name)) is not None:
                options[name] = value
        return options

    async def agent_name(self) -> str:
        """The agent: its own, else the one its model routes to (a worker thread may load
        the agents' classes).

        Raises:
            AgentNotFoundError: no agent claims the model and none is a fallback.
            ConfigError: an agent fails to load.
        """
        if self.agent is not None:
            return self.agent
        return await anyio.to_thread.run_sync(route_model, self.given_options().get("model"), None)

    def check(self) -> None:
        """What needs nothing but the spec.

        Raises:
            ConfigError: neither or both of ``provider`` and ``pool``; a ``node_config`` with
                a pool; a limit or grace that is not a positive number (a grace: not negative).
        """
        if (self.provider is None) == (self.pool is None):
            raise ConfigError("a run names a provider or a pool, not both")
        if self.pool is not None and self.node_config is not None:
            raise ConfigError(
                f"a run from pool {self.pool!r} gets a node of its template: give no node config"
            )
        check_limits(self.deadline, self.idle_timeout, self.agent_grace)
        if self.checkpoint not in CHECKPOINT_MODES:
            raise ConfigError(f"checkpoint is one of {', '.join(CHECKPOINT_MODES)}, not {self.checkpoint!r}")


def check_limits(deadline: float | None, idle_timeout: float | None, agent_grace: float | None) -> None:
    """Refuse a limit that is not a positive number of seconds, and a grace a keeper cannot
    keep (0: not kept).

    Raises:
        ConfigError: one of them is.
    """
    for name, value in (("deadline", deadline), ("idle_timeout", idle_timeout)):
        if value is not None and not 0 < value < float("inf"):
            raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
    if agent_grace is not None and not 0 <= agent_grace < float("inf"):
        raise ConfigError(f"agent_grace must be 0 or more seconds, got {agent_grace!r}")
    if agent_grace:
        KeepOptions(grace=agent_grace)  # what a keeper can keep: 2 s or more


class ResumeFields(TypedDict, total=False):
    """The keyword arguments of :meth:`Orchestrator.resume <nodeprov.runs.Orchestrator.resume>`
    and ``resume_run``."""

    message: Prompt
    model: str | None
    options: AgentOptions | Mapping[str, Any] | None
    provider_settings: Mapping[str, Any] | None
    deadline: float | None
    idle_timeout: float | None
    keep_node: bool
    pause_after_turn: bool
    agent_grace: float | None


class RunFields(TypedDict, total=False):
    """:class:`RunSpec`'s fields but ``prompt``, as keyword arguments of
    :meth:`Orchestrator.start <nodeprov.runs.Orchestrator.start>`."""

    provider: str | None
    pool: str | None
    pool_wait: bool
    provider_settings: Mapping[str, Any]
    node_config: NodeConfig | None
    agent: str | None
    model: str | None
    options: AgentOptions | Mapping[str, Any] | None
    permission: Permission | None
    ship_cli: bool | None
    workspace: str
    deadline: float | None
    idle_timeout: float | None
    keep_node: bool
    pause_after_turn: bool
    agent_grace: float | None
    checkpoint: CheckpointMode
    run_id: str | None


def run_permission(
    given: Permission | None, *, model: str | None, provider: str, on_this_host: bool
) -> Permission:
    """The permission of a run (see the module's rules).

    Raises:
        ConfigError: none is given for a real model on this machine.
    """
    if given is not None:
        return given
    if on_this_host and model != SCRIPTED:
        raise ConfigError(
            f"a real model on the {provider} provider runs unsandboxed, as this control plane's user, "
            "on its host: choose a permission (read-only, edit or full)"
        )
    return "full"
