"""Driving a run from the terminal (``run``, ``resume``, ``fork``, ``rewind``): the events shown
as they come, pausing on signals. Apart from :mod:`.runs` because it imports
the orchestrator, which the other run commands never load."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, NoReturn

import anyio
import anyio.abc
from rich.markup import escape

from .._heap import freeze_start_up
from ..errors import NodeprovError, RunStateError
from ..fleet import provider_settings_from_env
from ..runs import KEPT_AGENT_GRACE, Orchestrator, PauseKind, Run
from .app import checkpoints, fail, open_store, retention
from .events import show_event
from .render import err, out

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["RunRequest", "Start", "command_plane", "drive_run", "reconcile_first"]


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """A ``run``, ``resume``, ``fork`` or ``rewind`` command's call, as :func:`drive_run` needs it."""

    keep_node: bool
    store: str | None
    json_output: bool
    pool: str | None = None  # the warm pool the run claims from, kept filled while it runs


Start = Callable[[Orchestrator], Awaitable[Run]]


async def drive_run(request: RunRequest, start: Start) -> str:
    """Start (or resume, fork, rewind) a run with ``start(orchestrator)``, show its events,
    pause it on Ctrl-C, SIGTERM or SIGHUP; return its outcome. A signal that comes while the
    run starts pauses it as soon as it exists (keeping its node with ``--keep-node``). The
    orchestrator has the environment's provider settings (``NODEPROV_<PROVIDER>_<FIELD>``)."""
    async with await open_store(request.store) as store, command_plane(store, request.pool) as orchestrator:
        await reconcile_first(orchestrator)
        freeze_start_up()
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async with anyio.create_task_group() as tg:
                started: list[Run] = []
                running = anyio.Event()
                tg.start_soon(_pause_on_signals, signals, started, running, request, tg)
                active = await start(orchestrator)
                started.append(active)
                running.set()
                if not request.json_output:
                    out.print(f"[dim]run {active.id}[/]", soft_wrap=True)
                async for event in active.events():
                    show_event(event, request.json_output)
                tg.cancel_scope.cancel()
        outcome = await active.wait()
    if outcome == "paused" and not request.json_output:
        err.print(f"paused: resume with `nodeprov resume {active.id}`", soft_wrap=True)
    elif outcome == "error":
        fail(active.error or "the run failed")
    return outcome


def command_plane(store: Store, pool: str | None) -> Orchestrator:
    """The control plane of a command that drives runs (``run``, ``resume``..., ``acp``): the
    environment's provider settings (``NODEPROV_<PROVIDER>_<FIELD>``), agents kept
    ``KEPT_AGENT_GRACE`` unless a run says, no take-over of other control planes' runs, the
    run's ``pool`` kept filled while it runs, the environment's retention and checkpoints."""
    return Orchestrator(
        store,
        provider_settings=provider_settings_from_env(),
        agent_grace=KEPT_AGENT_GRACE,  # a run's, unless it says
        take_over=False,
        keep_pools=[pool] if pool else False,
        retention=retention(),
        checkpoints=checkpoints(),
    )


async def reconcile_first(orchestrator: Orchestrator) -> None:
    """Clean up after dead control planes; a provider that cannot be asked must not block."""
    try:
        report = await orchestrator.reconcile()
    except NodeprovError as error:
        err.print(f"[yellow]warning:[/] reconcile: {escape(str(error))}")
        return
    for node_id, why in report.failed:
        err.print(f"[yellow]warning:[/] reconcile: node {node_id}: {escape(why)}")


async def _pause_on_signals(
    signals: AsyncIterator[int],
    started: list[Run],
    running: anyio.Event,
    request: RunRequest,
    tg: anyio.abc.TaskGroup,
) -> None:
    """Ctrl-C pauses (kind human); SIGTERM and SIGHUP, sent by `timeout`, systemd, a closed
    terminal or a CI cancel, pause too (kind system). One that comes while the run starts
    pauses it once it exists. The pause runs beside this loop, so a second signal is seen
    while it takes its time, and aborts at once."""
    async for signum in signals:
        human = signum == signal.SIGINT
        name = "Ctrl-C" if human else signal.Signals(signum).name
        err.print(f"[yellow]pausing ({name} again to abort)...[/]")
        reason = "interrupted from the terminal" if human else f"nodeprov received {name}"

        tg.start_soon(
            _pause_when_started, started, running, "human" if human else "system", reason, request.keep_node
        )
        break
    async for signum in signals:
        _abort(started[0] if started else None, signum)


async def _pause_when_started(
    started: list[Run], running: anyio.Event, kind: PauseKind, reason: str, keep_node: bool
) -> None:
    await running.wait()
    await _pause(started[0], kind, reason, keep_node)


async def _pause(active: Run, kind: PauseKind, reason: str, keep_node: bool) -> None:
    with suppress(RunStateError):  # finishing, or paused from elsewhere: it ends anyway
        await active.pause(kind, reason, keep_node=keep_node)


def _abort(active: Run | None, signum: int) -> NoReturn:
    """Leave now, skipping the orchestrator's orderly shutdown (which may wait on the agent),
    as a SIGKILL would: a kept agent runs on for its grace (`nodeprov attach` takes it over),
    one not kept stops once its control plane is gone; reconcile or `nodeprov gc` settles the
    run and its node once this process's lease has expired."""
    which = f"run {active.id}" if active is not None else "the run being started"
    if active is not None and active.agent_grace:
        err.print(
            f"aborted: {which}'s agent runs on, kept, for {active.agent_grace:g} s with nobody attached: "
            f"`nodeprov attach {active.id}` takes it over",
            soft_wrap=True,
        )
    else:
        err.print(f"aborted: {which} is left to reconcile (`nodeprov gc`)", soft_wrap=True)
    with suppress(OSError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(128 + signum)
