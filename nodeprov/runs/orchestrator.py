"""The orchestrator: starts, pauses, resumes and reconciles runs; see :mod:`nodeprov.runs`.

A facade over the modules of :mod:`nodeprov.runs`, one concern each, which share one
:class:`~nodeprov.runs.plane.ControlPlane` (the store, the lease, the providers, the journal,
the runs driven here, the task group): it makes them, enters and leaves them in order, and
offers what callers call.

**Ownership.** On entering, it takes a lease in the store (id, holder, heartbeat,
expiry by the database's clock) and renews it every ``lease_ttl / 3`` seconds. Its runs
and nodes are owned by ``lease:ID``. Any control plane sharing the store reconciles what
a dead one left (every ``reconcile_interval`` seconds, and in :meth:`Orchestrator.reconcile`): a
control plane that died, on any host or in any PID namespace, is cleaned up within
``lease_ttl + reconcile_interval`` seconds plus the time its nodes take to destroy. An
orchestrator that finds its own lease lost (the store unreachable for longer than the
lease) aborts its runs, since another may have taken them over, and takes a new lease.

**Supervision.** A failure in one run ends that run as ``failed`` (with a resumable
snapshot when the agent's session is known) and never another run or the
orchestrator. Background work (heartbeats, pause requests, reconcile, event writes)
logs its failures and goes on.

**Leaving** pauses whatever still runs (kind ``system``; the node released unless the run
was started or resumed with ``keep_node``), so nothing is
left without a snapshot, then flushes events and releases the lease. It takes at most
``shutdown_timeout`` seconds (plus, if the store itself hangs, its statement timeout):
a run that cannot be paused in time is left to reconcile, which the released lease
makes immediate for any other control plane.

**Kept nodes** (a pause with ``keep_node``) are kept for ``keep_for`` seconds at most
(a day by default), never past the node's own lifetime, and only while a resume may
still use them: reconcile destroys one whose time is up, whose run was resumed
elsewhere or ended, or whose workspace switched agents.

**Reconcile** (:meth:`Orchestrator.reconcile`). A run is orphaned when its owner is known
to be gone: a lease of this store that expired or was released, or (for owners without a
lease) a process known to be dead. A lease this store does not know is another store's:
whether it lives cannot be told here, so its runs are left alone. An orphaned run's nodes
(being made or live) are destroyed, and the run ends: ``failed`` with a resumable snapshot
(kind ``system``) when its agent's session is known, ``finished`` when it was finishing. One
whose agent is kept is taken over (``take_over``), or else left be while its agent lives.
Nodes are destroyed too when their run is not live and will not use them: a destroy that
failed; a node kept for a paused run whose keep time is up, whose resume token was used (the
run resumed elsewhere, or ended), or whose workspace switched agents. Each node is taken for
destruction in one compare-and-set on its state, so a pause keeping it or a resume taking
it, landing meanwhile, wins or loses whole. Pause requests nobody will serve are cleared. A
destroy that fails is reported and the rest goes on.

**Retention** (``retention``, 30 days by default; None keeps everything): runs over and
untouched for that long are deleted with all they own (:mod:`nodeprov.runs.retention`), by
whichever control plane sharing the store looks first, at most hourly between them all.

**Garbage** (:meth:`Orchestrator.collect_garbage`) reaps a provider's abandoned nodes,
judging owners by the store: a lease of this store that expired or was released is gone;
one it does not know is another store's, and its nodes are reaped only past their lifetime.
Nodes the store holds (being made, live, kept for a paused run, or a warm pool's) are reaped
only past their lifetime: reconcile settles the others (``nodeprov gc`` runs it first). A
pool node whose provisioner died before it was ready is nobody's, and reaped as such.

**Warm pools** (``orchestrator.pools``, ``start(..., pool=...)``, ``keep_pools``): see
:mod:`nodeprov.runs.pools`.

**Kept agents** (``agent_grace``): each run's agent outlives a dropped channel and a dead
control plane (see :mod:`nodeprov.runs.keeping`; events ``agent.detached``, ``agent.reattached``).

**Events** are written to the store in batches, with their sequence numbers, and can
be read from any process (:meth:`Orchestrator.events`). The agent's transcript frames are mirrored
into the store in the same batches (one transaction every 20 ms at most, less while
the previous one commits); a result is reported only once its turn is stored.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import suppress
from types import TracebackType
from typing import Any, Self, Unpack

import anyio
from anyio.abc import TaskGroup

from ..errors import ConfigError, NodeprovError, RunStateError
from ..node import GarbageReport, NodeProvider
from ..prompts import Prompt, prompt_blocks, prompt_images, prompt_text
from ..store import CheckpointRecord, RunRecord, Store
from .checkpointing import RunCheckpoints
from .driver import Driver, Teardown
from .events import RunEvent
from .journal import RunEvents
from .keeping import Takeover
from .launch import Launcher, Plan
from .lease import owner_lives
from .offline import OfflineModels
from .pauses import PauseRequests
from .plane import ControlPlane
from .pool_keeping import PoolKeeper
from .pools import Pools
from .reconcile import Reconciler, ReconcileReport, every
from .retention import DEFAULT_RETENTION
from .run import PauseKind, Run
from .spec import ResumeFields, RunFields, RunSpec
from .state import RunState

__all__ = ["Orchestrator"]

logger = logging.getLogger("nodeprov.runs")

_CLOSE_TIMEOUT = 10.0  # closing the providers' connections at exit


class Orchestrator:
    """Starts, pauses, resumes and reconciles runs. Use it as an async context manager.
    How it owns runs, supervises them, leaves, keeps nodes and agents, and writes events:
    see the module's documentation."""

    def __init__(
        self,
        store: Store,
        *,
        holder: str | None = None,
        lease_ttl: float = 30.0,
        reconcile_interval: float | None = None,
        poll_interval: float = 0.5,
        shutdown_timeout: float = 30.0,
        keep_for: float = 86400.0,
        provider_settings: Mapping[str, Mapping[str, Any]] | None = None,
        agent_grace: float | None = None,
        take_over: bool = True,
        keep_pools: bool | Collection[str] = False,
        retention: float | None = DEFAULT_RETENTION,
        checkpoints: str | None = None,
    ) -> None:
        if not keep_for > 0:
            raise ConfigError(f"keep_for must be positive, got {keep_for!r}")
        self.agent_grace = agent_grace
        """Seconds a run's agent runs on, kept, with no control plane attached, unless its spec
        says (None: not kept, stopped when its channel closes); with it, reconcile takes the
        runs of dead control planes whose agents are kept over (``take_over``)."""
        self.store = store
        self.keep_for = keep_for
        """How long a node kept for a paused run's resume is kept at most (a day by default)."""
        self.provider_settings = {name: dict(given) for name, given in (provider_settings or {}).items()}
        """Per provider, this control plane's settings: laid under a new run's own (the CLI and
        the service give the environment's, ``NODEPROV_<PROVIDER>_<FIELD>``), and, of them, the
        secrets runs and pools never store laid over what they stored, whenever it acts on one
        (a resume, reconcile, a take-over, garbage collection)."""
        self.holder = holder or f"{socket.gethostname()} pid {os.getpid()}"
        self.lease_ttl = lease_ttl
        self.reconcile_interval = lease_ttl / 2 if reconcile_interval is None else reconcile_interval
        self.shutdown_timeout = shutdown_timeout
        self._poll_interval = poll_interval
        self._teardown = Teardown(shutdown_timeout)
        self._tg: TaskGroup | None = None
        plane = ControlPlane(
            store,
            holder=self.holder,
            lease_ttl=lease_ttl,
            provider_settings=self.provider_settings,
            teardown=self._teardown,
            checkpoints=checkpoints,
        )
        self._plane = plane
        only = None if isinstance(keep_pools, bool) else frozenset(keep_pools)
        self._keeper = PoolKeeper(plane, only=only, interval=poll_interval) if keep_pools else None
        self.pools = Pools(plane, self._keeper, poll_interval=poll_interval)
        """The store's warm pools; with ``keep_pools`` (all, or those named) held and refilled here."""
        plane.driver = self._driver = Driver(plane, keep_for=keep_for, pools=self.pools)
        self._launcher = Launcher(plane, self.pools, agent_grace=agent_grace)
        self._models = OfflineModels()
        self._pauses = PauseRequests(plane)
        self.checkpoints = RunCheckpoints(plane, poll_interval=poll_interval)
        """Runs' checkpoints: listed, taken on request, compared."""
        self._takeover = Takeover(plane, self._launcher)
        adopt = self._takeover.adopt if agent_grace is not None and take_over else None
        self._reconciler = Reconciler(plane, adopt=adopt, retention=retention)

    @property
    def owner(self) -> str:
        """``lease:ID`` once entered: the owner of the runs and nodes this control plane makes."""
        return self._plane.lease.owner

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self._plane.lease.take()
        await self._models.__aenter__()
        self._tg = self._plane.tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(every, self.lease_ttl / 3, self._plane.lease.renew, "lease heartbeat")
        self._tg.start_soon(every, self._poll_interval, self._pauses.serve, "pause requests")
        self._tg.start_soon(
            every, self._poll_interval, self.checkpoints.requests.serve, "checkpoint requests"
        )
        self._tg.start_soon(self._plane.journal.write_forever)
        self._tg.start_soon(self._reconciler.keep_clean, self.reconcile_interval)
        if self._keeper is not None:
            self._tg.start_soon(self._keeper.keep_forever)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._tg is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        self._teardown.shut_down()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.shutdown_timeout * 0.8):
            async with anyio.create_task_group() as pausing:  # all at once: each may take seconds
                for drive in list(self._plane.drives.values()):
                    pausing.start_soon(_pause_for_shutdown, drive.run)
        self._tg.cancel_scope.cancel()  # drives still going end in their bounded cleanup
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._teardown.time_left()):
                await self._plane.journal.flush()
                await self._plane.lease.release()
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
                await self._plane.nodes.aclose()  # their connections; the nodes stay
                await self._plane.checkpoints.aclose()
            await self._models.__aexit__(None, None, None)  # the runs are over: each held its model

    # -- starting and resuming ---------------------------------------------------------

    def run(self, run_id: str) -> Run:
        """A run this control plane drives now, by id.

        Raises:
            RunStateError: no such run is driven here.
        """
        try:
            return self._plane.drives[run_id].run
        except KeyError:
            raise RunStateError(f"run {run_id} is not driven by this control plane") from None

    async def start(self, spec: Prompt | RunSpec, /, **fields: Unpack[RunFields]) -> Run:
        """Start a run, given as a :class:`~nodeprov.runs.RunSpec` or as its prompt and
        fields (see :class:`~nodeprov.runs.RunSpec` for each, and :mod:`nodeprov.runs.spec`
        for what is decided when left out); returns at once, the run starting.

        Raises:
            ProviderNotFoundError, ConfigError: the spec is wrong (neither or both of a
                provider and a pool, a bad limit), the provider, the agent, or their
                settings or options are, or the agent refuses the prompt's images (a model
                that cannot see them; too many, too large, or of a type its API refuses); a
                real model on this machine without a permission; no such pool.
            RunStateError: a run ``run_id`` exists already, or the pool is being removed.
            StoreError: the store failed.
        """
        if isinstance(spec, RunSpec):
            if fields:
                raise ConfigError("give a RunSpec, or a prompt and its fields, not both")
        else:
            spec = RunSpec(prompt=spec, **fields)
        spec.check()
        agent = await spec.agent_name()
        chosen = dataclasses.replace(spec, agent=agent)

        async def launch(options: dict[str, Any]) -> Run:
            return await self._launch_new(*await self._launcher.plan_start(chosen, options))

        return await self._models.start(
            spec.model, agent, prompt_text(prompt_blocks(spec.prompt)), chosen.given_options(), launch
        )

    async def resume(self, token: str, **how: Unpack[ResumeFields]) -> Run:
        """Resume a paused (or failed) run from its snapshot token; the token is used up.

        ``how`` (:class:`~nodeprov.runs.spec.ResumeFields`, all optional): ``message`` (by
        default ``"continue"``), ``model``, ``options``, ``provider_settings``, ``deadline``,
        ``idle_timeout``, ``keep_node``, ``pause_after_turn`` and ``agent_grace``. The run's own
        agent resumes its session: on a kept node there; otherwise a fresh node is provisioned
        and the agent's session state restored onto it first. ``options`` are laid over the run's stored
        ones, and carry what was never stored (``env``, with credentials); ``model`` over
        theirs, as for :meth:`start`. ``provider_settings`` are laid over the stored ones: the
        run's secret settings (never stored) must be given again, unless this control plane
        has them. A run paused before its agent ever started is started again with its own
        prompt (its images too), followed by ``message`` unless that is ``"continue"``.
        ``message`` may hold images, as a prompt of :meth:`start`. ``keep_node`` and
        ``pause_after_turn`` as for :meth:`start`; ``agent_grace`` too, the run's own when None.

        Raises:
            TokenError: the token is unknown or used already.
            ConfigError: a secret provider setting the run was started with is missing, the
                options are invalid for the run's agent, or the agent refuses the message's
                images (checked before the token is used).
            RunStateError: the run is not paused or failed, its workspace's session was
                archived (the workspace switched to another agent since), or another
                control plane resumed it first.
        """
        return await self._resume(token, None, how)

    async def _resume(self, token: str, start_from: CheckpointRecord | None, how: ResumeFields) -> Run:
        message, given = how.get("message", "continue"), dict(how.get("provider_settings") or {})
        agent, model = await self._launcher.resumed(token, how.get("model"))
        laid = RunSpec(prompt=message, model=model, options=how.get("options")).given_options()
        deadline, idle_timeout = how.get("deadline"), how.get("idle_timeout")
        agent_grace = how.get("agent_grace")

        async def launch(on_model: dict[str, Any]) -> Run:
            snapshot = await self._launcher.claim(
                token,
                message=message,
                options=on_model,
                given_settings=given,
                deadline=deadline,
                idle_timeout=idle_timeout,
                agent_grace=agent_grace,
            )
            self._plane.launching.add(snapshot.run_id)
            try:
                plan = await self._launcher.plan_resume(
                    snapshot,
                    message,
                    on_model,
                    given,
                    deadline=deadline,
                    idle_timeout=idle_timeout,
                    agent_grace=agent_grace,
                    model=model,
                    start_from=start_from,
                )
                return await self._launch(snapshot.run_id, _held(plan, how))
            finally:
                self._plane.launching.discard(snapshot.run_id)

        text = prompt_text(prompt_blocks(message))
        return await self._models.start(model, agent, text, laid, launch)

    async def resume_run(self, run_id: str, **how: Unpack[ResumeFields]) -> Run:
        """Resume ``run_id`` from its latest unused snapshot (see :meth:`resume`, whose
        keyword arguments it takes).

        Raises:
            RunStateError: the run does not exist, is not paused or failed, or has no
                snapshot left to resume from.
            ConfigError: as :meth:`resume`.
        """
        return await self.resume(await self._launcher.latest_token(run_id), **how)

    async def rewind(self, run_id: str, checkpoint: str, **how: Unpack[ResumeFields]) -> Run:
        """Resume ``run_id`` from its earlier ``checkpoint`` rather than where it stopped: on a
        fresh node given that checkpoint's workspace, the agent's session as it stood then
        (a copy under a new session id: what came after stays archived, and the checkpoints
        after it stay). The keyword arguments are :meth:`resume`'s.

        Raises:
            RunStateError: the run has no such checkpoint, is not paused or failed (pause it
                first), or has no snapshot left to resume from.
            ConfigError: as :meth:`resume`.
        """
        record = await self.checkpoints.get(run_id, checkpoint)
        return await self._resume(await self._launcher.latest_token(run_id), record, how)

    async def fork(
        self,
        run_id: str,
        checkpoint: str | None = None,
        *,
        fork_id: str | None = None,
        **how: Unpack[ResumeFields],
    ) -> Run:
        """Start a new run from ``run_id``'s ``checkpoint`` (its latest when None), in any
        state: on a fresh node given that checkpoint's workspace, its agent's session a copy
        of the original's as it stood then, under a new session id, so that the two go on
        apart (two forks of one checkpoint too). The new run is the original's provider,
        settings, agent and options, with ``how`` laid over as for :meth:`resume`; it names
        its origin (``forked_from``, ``forked_at`` in its record, ``run.started``'s
        ``checkpoint``); its id is ``fork_id`` when given (as :attr:`RunSpec.run_id`). Returns
        at once, the run starting.

        Raises:
            RunStateError: there is no such run, it has no such checkpoint (or none), or a
                run ``fork_id`` exists already.
            ConfigError: a secret provider setting the original was started with is missing,
                the options are invalid for its agent, the agent refuses the message's
                images, or a limit is not a positive number.
            StoreError: the store failed.
        """
        source, start_from = await self.checkpoints.start_point(run_id, checkpoint)
        message = how.get("message", "continue")
        model = source.model if (given := how.get("model")) is None else given
        laid = RunSpec(prompt=message, model=model, options=how.get("options")).given_options()

        async def launch(on_model: dict[str, Any]) -> Run:
            record, plan = await self._launcher.plan_fork(
                source,
                start_from,
                message,
                on_model,
                dict(how.get("provider_settings") or {}),
                deadline=how.get("deadline"),
                idle_timeout=how.get("idle_timeout"),
                agent_grace=how.get("agent_grace"),
                model=model,
                fork_id=fork_id,
            )
            return await self._launch_new(record, _held(plan, how))

        text = prompt_text(prompt_blocks(message))
        return await self._models.start(model, source.agent, text, laid, launch)

    async def _launch_new(self, record: RunRecord, plan: Plan) -> Run:
        """Store new run ``record`` (with the images of its prompt) and drive it by ``plan``."""
        self._plane.launching.add(record.id)
        try:
            await self.store.create_run(record, prompt_images(plan.prompt))
            return await self._launch(record.id, plan)
        finally:
            self._plane.launching.discard(record.id)

    async def _launch(self, run_id: str, plan: Plan) -> Run:
        drive = self._driver.begin(run_id, plan, await self.store.last_event_seq(run_id) + 1)
        self._plane.drive_here(drive, plan)
        return drive.run

    # -- events ------------------------------------------------------------------------

    def events(self, run_id: str, *, after: int = 0, follow: bool = True) -> AsyncIterator[RunEvent]:
        """The events of any run, from any process: those above sequence ``after``, then, with
        ``follow``, new ones as they are written, until the run's drive ends with nobody
        driving it (checked every ``poll_interval``), or its control plane is known to be
        gone (its lease expired or was released: nobody will write more; a reconcile ends the
        run). A server passes a client's ``Last-Event-ID`` as ``after``. Events come once stored.

        Raises:
            RunStateError: there is no such run.
            StoreError: the store could not be read.
        """
        return self._plane.journal.follow(
            run_id,
            after=after,
            follow=follow,
            live=self._live_events,
            alive=lambda owner: owner_lives(self.store, owner),
            poll_interval=self._poll_interval,
        )

    def _live_events(self, run_id: str) -> RunEvents | None:
        drive = self._plane.drives.get(run_id)
        return drive.events if drive is not None else None

    # -- across processes --------------------------------------------------------------

    async def adopt(self, run_id: str) -> Run:
        """Take ``run_id`` over and drive it here (``nodeprov attach``): see
        :meth:`~nodeprov.runs.keeping.Takeover.adopt_run`, which raises."""
        await self._takeover.adopt_run(run_id)
        return self.run(run_id)

    async def detach(self, run_id: str) -> None:
        """Stop driving ``run_id`` here, leaving it running, its kept agent too, for another to
        take over once this control plane leaves (:meth:`adopt`). Raises RunStateError: it is
        not driven here, or its agent is not kept."""
        drive = self._plane.drives.get(run_id)
        if drive is None or drive.run.agent_grace is None:
            raise RunStateError(f"run {run_id} is not driven here with its agent kept")
        drive.detach()
        await drive.events.wait_ended()

    async def release_kept_node(self, run_id: str) -> None:
        """Destroy the node kept for ``run_id``'s resume now, not at its keep time (the resume
        then provisions a fresh one); one that cannot be is logged and left to reconcile.
        Raises RunStateError: the run is live (a resume may be taking its node); StoreError."""
        if (record := await self.store.run(run_id)) is not None and RunState(record.state).live:
            raise RunStateError(f"run {run_id} is {record.state}: its node is in use")
        await self._plane.nodes.drop_kept(run_id)

    async def request_pause(
        self, run_id: str, kind: PauseKind = "external", reason: str = "", *, keep_node: bool | None = None
    ) -> str:
        """Ask whichever control plane drives ``run_id`` to pause it (it checks every
        ``poll_interval``). For a run of this control plane, prefer :meth:`Run.pause`.
        ``keep_node`` as :meth:`Run.pause` (``None``: as the run was started or resumed).
        Returns the request, for :meth:`withdraw_pause`.

        Raises:
            ConfigError: ``kind`` is not human, external or system.
            RunStateError: the run is not starting or running.
        """
        return await self._pauses.request(run_id, kind, reason, keep_node=keep_node)

    async def withdraw_pause(self, run_id: str, request: str) -> bool:
        """Take back a pause request nobody served (its control plane is gone, say), so a
        later resume does not pause at once. Returns whether it was still pending."""
        return await self.store.clear_pause_request(run_id, request)

    # -- reconcile and garbage -----------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """Clean up after control planes that died, on any host sharing this store, and
        release the nodes no run will use: see the module's documentation, **Reconcile**.

        Raises:
            StoreError: the store failed.
        """
        return await self._reconciler.reconcile()

    async def collect_garbage(
        self, provider: NodeProvider[Any], *, dry_run: bool = False, settle: float = 0.0
    ) -> GarbageReport:
        """Reap ``provider``'s abandoned nodes: see the module's documentation, **Garbage**;
        :meth:`NodeProvider.collect_garbage` for ``settle``.

        Raises:
            ProviderError: the platform could not be asked.
            StoreError: the store failed.
        """
        return await self._reconciler.collect_garbage(provider, dry_run=dry_run, settle=settle)


async def _pause_for_shutdown(run: Run) -> None:
    with suppress(NodeprovError):  # over, or pausing already: either way it ends
        await run.pause("system", "the control plane is shutting down")
    await run.wait()  # a pause under way (another caller's) ends too


def _held(plan: Plan, how: ResumeFields) -> Plan:
    """``plan`` with what a resume or a fork says again for its own drive (not stored)."""
    return dataclasses.replace(
        plan, keep_node=how.get("keep_node", False), pause_after_turn=how.get("pause_after_turn", False)
    )
