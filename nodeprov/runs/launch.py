"""Starting and resuming runs: what a caller asks, checked before anything is stored; a new
run's record; a paused run claimed; and the :class:`Plan` its drive follows."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ..agents import Agent, AgentOptions
from ..agents.registry import get_agent, import_soon, route_model
from ..errors import ConfigError, RunStateError
from ..fleet import check_image
from ..node import NodeConfig
from ..prompts import Block, ImageBlock, Prompt, TextBlock, prompt_blocks, prompt_images, prompt_text
from ..scripted import SCRIPTED
from ..store import CheckpointRecord, RunRecord, SnapshotRecord, dumps, new_id, now
from .nodes import not_given
from .pools import Pools
from .spec import RunSpec, check_limits, run_permission
from .state import RESUMABLE_STATES, RunState

if TYPE_CHECKING:
    from .plane import ControlPlane

__all__ = ["Launcher", "Plan"]


@dataclass(frozen=True)
class Plan:
    """How to get the run's node and what to tell the agent (``prompt``: prepared for it,
    see :meth:`~nodeprov.agents.Agent.prepare_prompt`)."""

    prompt: tuple[Block, ...]
    provider: str
    provider_settings: dict[str, Any]
    agent: Agent[Any]
    workspace: str
    node_config: NodeConfig
    resume: SnapshotRecord | None = None
    deadline: float | None = None
    idle_timeout: float | None = None
    keep_node: bool = False
    pause_after_turn: bool = False
    """Pause at the agent's result rather than finish (:attr:`~nodeprov.runs.RunSpec.pause_after_turn`)."""
    pool: str | None = None
    """The warm pool to claim the first node from (:mod:`nodeprov.runs.pools`)."""
    pool_wait: bool = False
    """Wait for a node of an empty pool, rather than provision one cold."""
    agent_grace: float | None = None
    """Seconds the agent is kept with no control plane attached (None: not kept)."""
    checkpoint: str = "pause"
    """When the run checkpoints its workspace (:data:`~nodeprov.runs.spec.CheckpointMode`)."""
    start_from: CheckpointRecord | None = None
    """A fork's or a rewind's checkpoint: before the node is got, the agent's session as it
    stood there is copied as ``resume.agent_session_id`` and the checkpoint recorded as the
    run's latest, restored onto the fresh node."""


class Launcher:
    """Checks and records what :meth:`Orchestrator.start` and :meth:`Orchestrator.resume`
    are asked, and plans the drive; runs are owned by ``lease``."""

    def __init__(self, plane: ControlPlane, pools: Pools, *, agent_grace: float | None) -> None:
        check_limits(None, None, agent_grace)  # a default no keeper can keep: refused now, not per run
        self._agent_grace = agent_grace  # a run's, unless its spec says
        self._store, self._lease, self._nodes = plane.store, plane.lease, plane.nodes
        self._pools = pools

    async def resumed(self, token: str, model: str | None) -> tuple[str, str | None]:
        """The agent of the run a snapshot token resumes, and the model its resume runs on:
        ``model``, else the run's own (the scripted one too); ``("", model)`` when there is
        no such token or run (the claim says what is wrong)."""
        peeked = await self._store.peek_snapshot(token)
        record = await self._store.run(peeked.run_id) if peeked is not None else None
        if record is None:
            return "", model
        return record.agent, record.model if model is None else model

    async def plan_start(self, spec: RunSpec, options: dict[str, Any]) -> tuple[RunRecord, Plan]:
        """The record of a new run (not stored yet: store it with the plan's images) and
        the plan of its first drive, by the rules of :mod:`nodeprov.runs.spec` (the spec
        checked already: :meth:`RunSpec.check`); ``options`` are the spec's
        (:meth:`RunSpec.given_options`), on its offline model if it runs one.

        Raises:
            ProviderNotFoundError, ConfigError: the provider, the agent, or their settings or
                options are wrong, or the agent refuses the prompt (its images); no such pool.
            RunStateError: a run ``spec.run_id`` exists already, or the pool is being removed.
            StoreError: the store failed.
        """
        if spec.run_id is not None and await self._store.run(spec.run_id) is not None:
            raise RunStateError(f"run {spec.run_id} exists already")
        node_config = spec.node_config
        if spec.pool is not None:  # read once: its provider, settings and template
            provider, settings, node_config = await self._pools.template(spec.pool, spec.provider_settings)
        else:
            assert spec.provider is not None  # noqa: S101 - narrows a type: spec.check() says so
            provider, settings = (
                spec.provider,
                {**self._nodes.defaults(spec.provider), **spec.provider_settings},
            )
        # Fail now, not in the background; store what another environment needs to find the node.
        made = await self._nodes.provider(provider, settings)
        check_image(made)
        if spec.model == SCRIPTED and (why := made.unreachable_loopback()):
            raise ConfigError(f"the offline scripted model listens on this machine's 127.0.0.1, and {why}")
        checked = made.resolved_settings()
        options = dict(options)
        model = spec.model if spec.model is not None else options.get("model")
        options["permission"] = run_permission(
            options.get("permission"), model=model, provider=provider, on_this_host=made.on_this_host
        )
        options.setdefault("ship_cli", made.on_this_host)
        chosen = await _agent_of(lambda: get_agent(route_model(options.get("model"), spec.agent), options))
        blocks = chosen.prepare_prompt(spec.prompt)
        if spec.pool is not None and chosen.options.ship_cli:
            _check_shipped(spec.pool, chosen, node_config)
        grace = self._agent_grace if spec.agent_grace is None else spec.agent_grace or None
        session = await self._store.active_session(spec.workspace, chosen.name)
        run_id = spec.run_id or new_id("run")
        plan = Plan(
            blocks,
            provider,
            settings,
            chosen,
            spec.workspace,
            node_config or NodeConfig(),
            deadline=spec.deadline,
            idle_timeout=spec.idle_timeout,
            keep_node=spec.keep_node,
            pause_after_turn=spec.pause_after_turn,
            pool=spec.pool,
            pool_wait=spec.pool_wait,
            agent_grace=grace,
            checkpoint=spec.checkpoint,
        )
        record = RunRecord(
            id=run_id,
            session_id=session.id,
            workspace_id=spec.workspace,
            prompt=prompt_text(blocks),
            prompt_blocks=_blocks_json(blocks),
            node_provider=provider,
            node_settings=dumps(checked.storable()),
            node_secret_fields=dumps(checked.secrets_set()),
            agent=chosen.name,
            agent_options=dumps(chosen.options.storable()),
            node_config=plan.node_config.template_json(),
            state=RunState.STARTING,
            outcome=None,
            error=None,
            node_id=None,
            agent_session_id=None,
            project_key=None,
            owner=self._lease.owner,
            pause_request=None,
            created_at=now(),
            updated_at=now(),
            agent_grace=grace or 0.0,
            model=model,
            checkpoint=spec.checkpoint,
        )
        return record, plan

    async def claim(
        self,
        token: str,
        *,
        message: Prompt,
        options: AgentOptions | Mapping[str, Any] | None,
        given_settings: dict[str, Any],
        deadline: float | None,
        idle_timeout: float | None,
        agent_grace: float | None,
    ) -> SnapshotRecord:
        """Check a resume (see :meth:`Orchestrator.resume`), then use up ``token``.

        Raises:
            TokenError: the token is unknown or used already.
            ConfigError: a secret provider setting is missing from ``given_settings``, the
                options are invalid for the run's agent, the agent refuses ``message`` (its
                images), or a limit is not a positive number.
            RunStateError: the run is not paused or failed, or its workspace's session was
                archived.
        """
        check_limits(deadline, idle_timeout, agent_grace)
        peeked = await self._store.peek_snapshot(token)
        if peeked is not None and peeked.used_at is None:  # else claiming says what is wrong
            current = await self._store.run(peeked.run_id)
            if current is not None and current.state not in RESUMABLE_STATES:
                raise RunStateError(
                    f"run {current.id} is {current.state}: only a paused or failed run can be resumed"
                )
            if current is not None:
                await self._check_secrets(current, given_settings)
                (await _agent_of(lambda: _resumed_agent(current, options))).prepare_prompt(message)
                await self._check_session(current)
        return await self._store.claim_snapshot(token)

    async def _check_session(self, record: RunRecord) -> None:
        """Refuse to resume a session its workspace archived (it switched agents since)."""
        for session in await self._store.sessions(record.workspace_id):
            if session.id == record.session_id and session.state != "active":
                raise RunStateError(
                    f"run {record.id} belongs to {record.agent} session {session.id} of workspace "
                    f"{record.workspace_id}, archived when the workspace switched to another agent: "
                    "it cannot be resumed"
                )

    async def plan_resume(
        self,
        snapshot: SnapshotRecord,
        message: Prompt,
        options: AgentOptions | Mapping[str, Any] | None,
        given_settings: dict[str, Any],
        *,
        deadline: float | None,
        idle_timeout: float | None,
        agent_grace: float | None,
        model: str | None,
        start_from: CheckpointRecord | None = None,
    ) -> Plan:
        """Take the run of a claimed ``snapshot`` over (a compare-and-set from paused or
        failed) and plan its drive, on ``model`` (see :meth:`resumed`); with ``start_from``
        (a rewind), from that checkpoint of the run's on a fresh node.

        Raises:
            RunStateError: the run is gone, or another control plane resumed it first.
            ConfigError: the options are invalid for the run's agent.
            StoreError: the store failed.
        """
        record = await self._store.run(snapshot.run_id)
        if record is None:
            raise RunStateError(f"run {snapshot.run_id} is gone")
        agent = await _agent_of(lambda: _resumed_agent(record, options))
        grace = self._grace_of(record) if agent_grace is None else agent_grace or None
        if not await self._store.update_run(
            record.id,
            expect_states=RESUMABLE_STATES,
            state=RunState.STARTING,
            owner=self._lease.owner,
            outcome=None,
            error=None,
            pause_request=None,
            agent_grace=grace or 0.0,
            model=model,
        ):
            raise RunStateError(f"run {record.id} was resumed by another control plane")
        await self._store.use_snapshots(record.id)  # an earlier pause's token must not fork the run
        settings = {**self._nodes.settings_for(record), **given_settings}
        blocks = prompt_blocks(message)
        await self._store.images.put(prompt_images(blocks), run_id=record.id)
        if start_from is not None:
            snapshot = _forked(snapshot, start_from, agent)
        if snapshot.agent_session_id is None:  # the agent never started: start it afresh
            blocks = await self._afresh(record, message)
        return Plan(
            agent.prepare_prompt(blocks),
            record.node_provider,
            settings,
            agent,
            record.workspace_id,
            NodeConfig.model_validate_json(record.node_config),
            snapshot,
            deadline,
            idle_timeout,
            agent_grace=grace,
            checkpoint=record.checkpoint,
            start_from=start_from,
        )

    async def plan_fork(
        self,
        source: RunRecord,
        checkpoint: CheckpointRecord,
        message: Prompt,
        options: AgentOptions | Mapping[str, Any] | None,
        given_settings: dict[str, Any],
        *,
        deadline: float | None,
        idle_timeout: float | None,
        agent_grace: float | None,
        model: str | None,
        fork_id: str | None = None,
    ) -> tuple[RunRecord, Plan]:
        """The record of a new run forked from run ``source`` at ``checkpoint`` (not stored
        yet: store it with the plan's images) and the plan of its drive: the source's
        provider, settings, agent and options (``options`` laid over), on ``model``, given
        ``message``; the agent's session a copy of the source's as it stood at the
        checkpoint, under a new id (the agent started afresh with the source's prompt if it
        had not started then); the new run's id is ``fork_id``, if given.

        Raises:
            ConfigError: a secret provider setting the source was started with is missing
                from ``given_settings`` and this control plane's, the options are invalid for
                the agent, it refuses the message's images, or a limit is not a positive number.
            RunStateError: a run ``fork_id`` exists already.
            StoreError: the store failed.
        """
        check_limits(deadline, idle_timeout, agent_grace)
        if fork_id is not None and await self._store.run(fork_id) is not None:
            raise RunStateError(f"run {fork_id} exists already")
        await self._check_secrets(source, given_settings)
        agent = await _agent_of(lambda: _resumed_agent(source, options))
        run_id = fork_id or new_id("run")
        snapshot = SnapshotRecord(  # never stored: the drive resumes from it as from a pause's
            token="",
            run_id=run_id,
            node_id=None,
            node_kept=False,
            provider=source.node_provider,
            agent_session_id=checkpoint.agent_session_id,
            project_key=checkpoint.project_key,
            state=RunState.PAUSED,
            pause_kind="system",
            reason=f"forked from run {source.id}",
            created_at=checkpoint.created_at,
            used_at=now(),
            agent=source.agent,
        )
        snapshot = _forked(snapshot, checkpoint, agent)
        blocks = prompt_blocks(message)
        if snapshot.agent_session_id is None:  # the agent had not started: it starts afresh
            blocks = await self._afresh(source, message)
        prepared = agent.prepare_prompt(blocks)
        grace = self._grace_of(source) if agent_grace is None else agent_grace or None
        session = await self._store.active_session(source.workspace_id, agent.name)
        stamp = now()
        record = dataclasses.replace(
            source,
            id=run_id,
            session_id=session.id,
            prompt=prompt_text(prepared),
            prompt_blocks=_blocks_json(prepared),
            agent_options=dumps(agent.options.storable()),
            state=RunState.STARTING,
            outcome=None,
            error=None,
            node_id=None,
            agent_session_id=snapshot.agent_session_id,
            project_key=snapshot.project_key,
            owner=self._lease.owner,
            pause_request=None,
            created_at=stamp,
            updated_at=stamp,
            agent_keeper=None,
            agent_grace=grace or 0.0,
            model=model,
            forked_from=source.id,
            forked_at=checkpoint.id,
        )
        plan = Plan(
            prepared,
            source.node_provider,
            {**self._nodes.settings_for(source), **given_settings},
            agent,
            source.workspace_id,
            NodeConfig.model_validate_json(source.node_config),
            snapshot,
            deadline,
            idle_timeout,
            agent_grace=grace,
            checkpoint=source.checkpoint,
            start_from=checkpoint,
        )
        return record, plan

    async def plan_adoption(self, record: RunRecord) -> Plan:
        """The plan of a drive that takes ``record`` over (its owner changed already): its
        agent with the stored options (what it needs of its secrets, its process has), its
        provider with the stored settings under this control plane's (the secrets).

        Raises:
            ConfigError: the stored options no longer fit the agent.
        """
        agent = await _agent_of(lambda: get_agent(record.agent, json.loads(record.agent_options)))
        config = NodeConfig.model_validate_json(record.node_config)
        settings = self._nodes.settings_for(record)
        return Plan(
            (),
            record.node_provider,
            settings,
            agent,
            record.workspace_id,
            config,
            agent_grace=self._grace_of(record),
            checkpoint=record.checkpoint,
        )

    def _grace_of(self, record: RunRecord) -> float | None:
        """The run's own agent grace (None: not kept); a run stored before runs kept theirs
        (NULL), this control plane's."""
        return self._agent_grace if record.agent_grace is None else record.agent_grace or None

    async def _check_secrets(self, record: RunRecord, given_settings: dict[str, Any]) -> None:
        """Raises ConfigError: a secret provider setting ``record`` was started with (never
        stored) is neither in ``given_settings`` nor this control plane's."""
        secrets = {**await self._nodes.secrets(record.node_provider), **given_settings}
        if missing := not_given(record.node_secret_fields, secrets):
            raise ConfigError(
                f"run {record.id} was started with secret provider settings that are never "
                f"stored; give them again: {', '.join(missing)}"
            )

    async def _afresh(self, record: RunRecord, message: Prompt) -> tuple[Block, ...]:
        """What an agent that never started is told: ``record``'s own prompt (its images read
        back), followed by ``message`` unless that is ``"continue"``."""
        original = await self._stored_prompt(record)
        return original if message == "continue" else (*original, *prompt_blocks(message))

    async def _stored_prompt(self, record: RunRecord) -> tuple[Block, ...]:
        """The run's first prompt, its images read back from the store.

        Raises:
            RunStateError: an image of the prompt is missing from the store.
        """
        stored = json.loads(record.prompt_blocks)
        if not stored:
            return (TextBlock(record.prompt),)
        images = await self._store.images.get([b["sha256"] for b in stored if b["type"] == "image"])
        blocks: list[Block] = []
        for block in stored:
            if block["type"] == "text":
                blocks.append(TextBlock(block["text"]))
            elif (image := images.get(block["sha256"])) is not None:
                blocks.append(image)
            else:
                raise RunStateError(
                    f"image {block['sha256']} of run {record.id}'s prompt is not in the store"
                )
        return tuple(blocks)

    async def latest_token(self, run_id: str) -> str:
        """The token of ``run_id``'s latest unused snapshot.

        Raises:
            RunStateError: the run does not exist, is not paused or failed, or has no
                snapshot left to resume from.
        """
        record = await self._store.run(run_id)
        if record is None:
            raise RunStateError(f"no run {run_id}")
        if record.state not in RESUMABLE_STATES:
            raise RunStateError(f"run {run_id} is {record.state}: only a paused or failed run can be resumed")
        unused = [s for s in await self._store.snapshots(run_id) if s.used_at is None]
        if not unused:
            raise RunStateError(f"run {run_id} has no snapshot to resume from")
        return unused[-1].token


def _forked(snapshot: SnapshotRecord, checkpoint: CheckpointRecord, agent: Agent[Any]) -> SnapshotRecord:
    """``snapshot`` made to resume from ``checkpoint``: on a fresh node (a kept one holds a
    later workspace), as a new session of the agent (a copy of the checkpoint's), or afresh
    if the agent had not started then."""
    session = agent.new_session_id() if checkpoint.agent_session_id else None
    return dataclasses.replace(
        snapshot, node_id=None, node_kept=False, agent_session_id=session, project_key=checkpoint.project_key
    )


def _blocks_json(blocks: tuple[Block, ...]) -> str:
    """A prompt's blocks as a run keeps them: ``[]`` for text alone (the record's ``prompt``),
    else text blocks and image references."""
    if not any(isinstance(block, ImageBlock) for block in blocks):
        return "[]"
    return json.dumps(
        [b.ref() if isinstance(b, ImageBlock) else {"type": "text", "text": b.text} for b in blocks]
    )


async def _agent_of(make: Callable[[], Agent[Any]]) -> Agent[Any]:
    """``make()`` in a worker thread (the first use of an agent imports its module: on the
    event loop, a stall that would starve the lease's heartbeat and every run's relay), and
    its slow imports started beside what comes next (the driver waits for them)."""
    agent = await anyio.to_thread.run_sync(make)
    import_soon(type(agent))
    return agent


def _resumed_agent(record: RunRecord, options: AgentOptions | Mapping[str, Any] | None) -> Agent[Any]:
    """The run's own agent, with ``options`` laid over its stored ones.

    Raises:
        ConfigError: the options are invalid for that agent.
    """
    given = (
        options.model_dump(exclude_unset=True) if isinstance(options, AgentOptions) else dict(options or {})
    )
    return get_agent(record.agent, {**json.loads(record.agent_options), **(given or {})})


def _check_shipped(pool: str, agent: Agent[Any], template: NodeConfig | None) -> None:
    """A pool's nodes are made before the run: they carry this machine's agent CLI only if
    the pool's template does.

    Raises:
        ConfigError: the template does not carry it.
    """
    cli = agent.local_cli()
    tools = template.tools if template is not None else {}
    if cli is None or tools.get(agent.cli_name) != cli:
        raise ConfigError(
            f"ship_cli: pool {pool!r}'s nodes do not carry this machine's {agent.cli_name} CLI "
            f"({cli or 'not found'}): make the pool with tools {{{agent.cli_name!r}: {cli!r}}}, "
            "or run without ship_cli"
        )
