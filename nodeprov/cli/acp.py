"""``nodeprov acp``: nodeprov as an ACP agent on this process's standard input and output,
for an editor (see :mod:`nodeprov.editors`). Nothing but the protocol goes to standard
output; logs and errors go to standard error, which editors show as the agent's log."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from .app import (
    SCRIPTED,
    AgentOptionsOption,
    SettingOption,
    StoreOption,
    app,
    errors,
    open_store,
    parse_settings,
    summary,
)
from .runs import (
    AgentGraceOption,
    AgentOption,
    IdleTimeoutOption,
    MessageEnvOption,
    NewRunModelOption,
    PermissionOption,
    PoolWaitOption,
    ShipCliOption,
    agent_options,
)

if TYPE_CHECKING:
    from ..runs import RunSpec

__all__ = ["acp"]


@app.command(short_help=summary("acp"))
def acp(  # noqa: PLR0917 - one parameter per command-line option
    provider: Annotated[
        str | None, typer.Option("--provider", "-p", help="Provider of the sessions' nodes [default: local].")
    ] = None,
    setting: SettingOption = None,
    pool: Annotated[
        str | None, typer.Option(help="Claim each session's node from this warm pool (`nodeprov pool`).")
    ] = None,
    pool_wait: PoolWaitOption = False,
    model: NewRunModelOption = SCRIPTED,
    agent: AgentOption = None,
    option: AgentOptionsOption = None,
    env: MessageEnvOption = None,
    permission: PermissionOption = None,
    ship_cli: ShipCliOption = None,
    workspace: Annotated[str, typer.Option(help="Workspace of the sessions' runs.")] = "default",
    checkpoint: Annotated[
        str,
        typer.Option(
            help="When to checkpoint a session's workspace with its agent's session: pause (after "
            "every turn, as each ends in a pause: a session loaded later gets its files back), or off."
        ),
    ] = "pause",
    turn_timeout: Annotated[
        float | None, typer.Option(help="End a turn as failed after this many seconds.")
    ] = None,
    idle_timeout: IdleTimeoutOption = None,
    agent_grace: AgentGraceOption = None,
    store: StoreOption = None,
) -> None:
    """Serve the Agent Client Protocol on stdin and stdout, for an editor (Zed, JetBrains,
    Neovim) to run a coding agent on a node. Each editor session is one run on a node of its
    own (`nodeprov logs SESSION-ID` shows it); each prompt is a turn of it on the same node;
    the editor's cancel pauses the turn. When the editor leaves, the sessions' nodes are
    destroyed (a session loaded later resumes on a fresh node from its checkpoint). SIGTERM,
    SIGHUP and Ctrl-C leave the same way."""
    from ..runs import RunSpec  # not for --help

    with errors():
        template = RunSpec(
            prompt="",
            provider=provider or (None if pool else "local"),
            pool=pool,
            pool_wait=pool_wait,
            provider_settings=parse_settings(setting),
            agent=agent,
            model=model,
            options=agent_options(env, option),
            permission=permission,  # type: ignore[arg-type]
            ship_cli=ship_cli,
            workspace=workspace,
            deadline=turn_timeout,
            idle_timeout=idle_timeout,
            agent_grace=agent_grace,
            checkpoint=checkpoint,  # type: ignore[arg-type]
        )
        template.check()
        anyio.run(_serve, template, store)


async def _serve(template: RunSpec, store_url: str | None) -> None:
    from ..editors import EditorServer, StdioPipes
    from .drive import command_plane, reconcile_first

    await template.agent_name()  # an agent that does not load is said now, not at the first prompt
    async with await open_store(store_url) as store, command_plane(store, template.pool) as plane:
        await reconcile_first(plane)
        pipes = StdioPipes()
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_leave_on_signals, tasks.cancel_scope)
                await EditorServer(plane, template).serve(pipes)
                tasks.cancel_scope.cancel()
        finally:
            pipes.restore()


async def _leave_on_signals(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async for _ in signals:
            scope.cancel()  # the server leaves as when the editor closes the connection
            return
