"""``nodeprov attach``: follow a live run from any shell, taking over one whose control plane
died while its agent runs on, kept, on its node."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Annotated, NoReturn

import anyio
import typer

from .._heap import freeze_start_up
from ..errors import RunStateError

if TYPE_CHECKING:
    from ..runs import Run
from .app import (
    JsonOption,
    RunOption,
    StoreOption,
    app,
    checkpoints,
    errors,
    fail,
    open_store,
    retention,
    summary,
)
from .render import err

__all__ = ["attach"]

_EXITS = {"ok": 0, "paused": 3, "detached": 0}


@app.command(short_help=summary("attach"))
def attach(
    run_id: RunOption,
    pause: Annotated[
        bool, typer.Option("--pause", help="Pause the run (kind human) instead of following it.")
    ] = False,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Follow RUN: its events so far, then its agent's messages as they come. A run whose
    control plane died while its agent runs on, kept (`nodeprov run --agent-grace`), is taken
    over and driven here. Ctrl-C (or SIGTERM, SIGHUP) detaches and leaves the run going: its
    kept agent runs on, for another `nodeprov attach`. --pause pauses the run.

    Exits 0 when the run succeeds or was left going, 1 on an error, 3 when it was paused.
    """
    with errors():
        outcome = anyio.run(_attach, run_id, pause, store, json_output)
    if outcome == "detached":
        err.print(
            f"detached: run {run_id} goes on; `nodeprov attach {run_id}` to follow it again", soft_wrap=True
        )
    elif outcome == "error":
        fail(f"run {run_id} failed")
    raise typer.Exit(_EXITS.get(outcome, 1))


async def _attach(run_id: str, pause: bool, store: str | None, json_output: bool) -> str:
    """Follow ``run_id``, taking it over once its control plane is known dead while its agent
    runs on, kept; its outcome as far as this command saw it."""
    from ..agents.registry import agent_class
    from ..fleet import provider_settings_from_env
    from ..runs import (
        KEPT_AGENT_GRACE,
        Orchestrator,
        RunState,
    )  # the orchestrator is loaded by commands that drive
    from ..runs.lease import owner_lives
    from .events import show_event

    async with await open_store(store) as opened:
        if (first := await opened.run(run_id)) is None:
            _no_run(run_id)
        if first.agent_keeper:  # it may be taken over: its agent's code loaded now, not then
            await anyio.to_thread.run_sync(agent_class, first.agent)
        plane = Orchestrator(
            opened,
            agent_grace=KEPT_AGENT_GRACE,  # a run stored before runs kept their own grace
            take_over=False,
            reconcile_interval=0,
            poll_interval=0.1,  # a dead owner's run is taken over within this of its lease's expiry
            provider_settings=provider_settings_from_env(None),
            retention=retention(),
            checkpoints=checkpoints(),
        )
        run: Run | None = None
        async with plane:
            freeze_start_up()
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
                async with anyio.create_task_group() as tg:

                    async def leave_on_signal() -> None:
                        async for _ in signals:
                            if run is not None and run.outcome is None:
                                await plane.detach(run_id)
                            tg.cancel_scope.cancel()

                    tg.start_soon(leave_on_signal)
                    last, asked = 0, False
                    while True:
                        record = await opened.run(run_id)
                        if record is None or not RunState(record.state).live:
                            break
                        orphaned = await owner_lives(opened, record.owner) is False
                        if orphaned and record.state == RunState.RUNNING and record.agent_keeper:
                            try:
                                run = await plane.adopt(run_id)
                            except RunStateError:  # another control plane took it: follow that one
                                continue
                        elif orphaned:  # its agent not kept, or not started: nothing to take over
                            await plane.reconcile()  # ends it (resumable), as any control plane would
                            continue
                        if pause and not asked:
                            asked = True
                            if run is not None:
                                tg.start_soon(run.pause, "human", "nodeprov attach --pause")
                            else:
                                await plane.request_pause(run_id, "human", "nodeprov attach --pause")
                        async for event in plane.events(run_id, after=last, follow=True):
                            show_event(event, json_output)
                            last = event.seq
                        if run is not None:
                            break
                    tg.cancel_scope.cancel()
            if run is not None:
                return await run.wait() if run.outcome is None else run.outcome
        final = await opened.run(run_id)
        if final is None or RunState(final.state).live:
            return "detached"
        return final.outcome or "error"


def _no_run(run_id: str) -> NoReturn:
    fail(f"no such run {run_id}")
