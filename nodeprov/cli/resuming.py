"""The commands that drive a run on from where it, or another, stopped: resume (where it
stopped), rewind (from an earlier checkpoint of its own), fork (a new run from a checkpoint)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, NoReturn

import anyio
import typer

from ..errors import RunStateError
from .app import (
    AgentOptionsOption,
    JsonOption,
    RunOption,
    StoreOption,
    app,
    errors,
    open_store,
    parse_settings,
    summary,
)
from .runs import (
    AgentGraceOption,
    IdleTimeoutOption,
    ImageOption,
    MessageEnvOption,
    PauseAfterTurnOption,
    TimeoutOption,
    agent_options,
    exit_for,
    prompt_of,
    record_of,
)

if TYPE_CHECKING:
    from ..runs import Orchestrator, Run
    from ..runs.spec import ResumeFields
    from ..store import RunRecord

__all__ = ["fork", "resume", "rewind"]

# The options of the commands that drive a run on from where another stopped (resume, fork,
# rewind): each as the run's own unless given.
MessageOption = Annotated[str, typer.Option(help="What to tell the agent.")]
ResumeSettingOption = Annotated[
    list[str] | None,
    typer.Option(
        "--setting",
        "-s",
        help="Provider setting KEY=VALUE over the run's stored ones; "
        "secret settings are never stored and must be given again.",
    ),
]
ResumeModelOption = Annotated[
    str | None, typer.Option(help="'scripted' or a model name; default: the run's own model.")
]
ResumePermissionOption = Annotated[
    str | None, typer.Option(help="read-only, edit or full; default: the run's own.")
]
KeepNodeOption = Annotated[bool, typer.Option(help="When paused again, keep the node.")]


@app.command(short_help=summary("resume"))
def resume(  # noqa: PLR0917 - one parameter per command-line option
    run_id: RunOption,
    message: MessageOption = "continue",
    image: ImageOption = None,
    setting: ResumeSettingOption = None,
    model: ResumeModelOption = None,
    option: AgentOptionsOption = None,
    env: MessageEnvOption = None,
    permission: ResumePermissionOption = None,
    keep_node: KeepNodeOption = False,
    pause_after_turn: PauseAfterTurnOption = False,
    timeout: TimeoutOption = None,
    idle_timeout: IdleTimeoutOption = None,
    agent_grace: AgentGraceOption = None,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Resume a paused (or failed) run with a message, on its kept node or a fresh one, with
    the run's own agent. Its options (model, permission...) are the run's own unless given."""

    async def start(orchestrator: Orchestrator, how: ResumeFields) -> Run:
        return await orchestrator.resume_run(run_id, **how)

    _drive_on(
        run_id,
        None,
        start,
        message=message,
        image=image,
        setting=setting,
        model=model,
        option=option,
        env=env,
        permission=permission,
        keep_node=keep_node,
        pause_after_turn=pause_after_turn,
        timeout=timeout,
        idle_timeout=idle_timeout,
        agent_grace=agent_grace,
        store=store,
        json_output=json_output,
    )


@app.command(short_help=summary("fork"))
def fork(  # noqa: PLR0917 - one parameter per command-line option
    run_id: RunOption,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            metavar="ID",
            help="The checkpoint to fork from (`nodeprov checkpoints RUN`); default: the run's latest.",
        ),
    ] = None,
    message: MessageOption = "continue",
    image: ImageOption = None,
    setting: ResumeSettingOption = None,
    model: ResumeModelOption = None,
    option: AgentOptionsOption = None,
    env: MessageEnvOption = None,
    permission: ResumePermissionOption = None,
    keep_node: KeepNodeOption = False,
    pause_after_turn: PauseAfterTurnOption = False,
    timeout: TimeoutOption = None,
    idle_timeout: IdleTimeoutOption = None,
    agent_grace: AgentGraceOption = None,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Start a new run from a checkpoint of RUN, in any state, with a message: on a fresh node
    given that checkpoint's workspace, its agent's session a copy of RUN's as it stood then, so
    that the two go on apart. The new run names its origin (forked_from, forked_at in `nodeprov
    status`). Its options (model, permission...) are RUN's own unless given."""

    async def start(orchestrator: Orchestrator, how: ResumeFields) -> Run:
        return await orchestrator.fork(run_id, checkpoint, **how)

    _drive_on(
        run_id,
        checkpoint,
        start,
        message=message,
        image=image,
        setting=setting,
        model=model,
        option=option,
        env=env,
        permission=permission,
        keep_node=keep_node,
        pause_after_turn=pause_after_turn,
        timeout=timeout,
        idle_timeout=idle_timeout,
        agent_grace=agent_grace,
        store=store,
        json_output=json_output,
    )


@app.command(short_help=summary("rewind"))
def rewind(  # noqa: PLR0917 - one parameter per command-line option
    run_id: RunOption,
    checkpoint: Annotated[
        str,
        typer.Option(metavar="ID", help="The run's checkpoint to go back to (`nodeprov checkpoints RUN`)."),
    ],
    message: MessageOption = "continue",
    image: ImageOption = None,
    setting: ResumeSettingOption = None,
    model: ResumeModelOption = None,
    option: AgentOptionsOption = None,
    env: MessageEnvOption = None,
    permission: ResumePermissionOption = None,
    keep_node: KeepNodeOption = False,
    pause_after_turn: PauseAfterTurnOption = False,
    timeout: TimeoutOption = None,
    idle_timeout: IdleTimeoutOption = None,
    agent_grace: AgentGraceOption = None,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Resume a paused (or failed) run from an earlier checkpoint rather than where it stopped,
    with a message: on a fresh node given that checkpoint's workspace, its agent's session as
    it stood then (what came after stays archived, and the checkpoints after it stay). Its
    options (model, permission...) are the run's own unless given."""

    async def start(orchestrator: Orchestrator, how: ResumeFields) -> Run:
        return await orchestrator.rewind(run_id, checkpoint, **how)

    _drive_on(
        run_id,
        checkpoint,
        start,
        message=message,
        image=image,
        setting=setting,
        model=model,
        option=option,
        env=env,
        permission=permission,
        keep_node=keep_node,
        pause_after_turn=pause_after_turn,
        timeout=timeout,
        idle_timeout=idle_timeout,
        agent_grace=agent_grace,
        store=store,
        json_output=json_output,
    )


def _drive_on(
    run_id: str,
    checkpoint: str | None,
    start: Callable[[Orchestrator, ResumeFields], Awaitable[Run]],
    *,
    message: str,
    image: list[str] | None,
    setting: list[str] | None,
    model: str | None,
    option: list[str] | None,
    env: list[str] | None,
    permission: str | None,
    keep_node: bool,
    pause_after_turn: bool,
    timeout: float | None,
    idle_timeout: float | None,
    agent_grace: float | None,
    store: str | None,
    json_output: bool,
) -> NoReturn:
    """Drive the run ``start`` begins from run ``run_id`` (at its ``checkpoint``, if given)
    with the options as :class:`~nodeprov.runs.ResumeFields`, as ``run`` drives a new one (see
    :func:`.drive.drive_run`); exit for its outcome. A missing run or checkpoint is said
    before anything starts."""
    with errors():
        anyio.run(_load_run, store, run_id, checkpoint)
        from .drive import RunRequest, drive_run  # see the imports

        request = RunRequest(keep_node=keep_node, store=store, json_output=json_output)
        full_message = prompt_of(message, image)

        async def begin(orchestrator: Orchestrator) -> Run:
            how: ResumeFields = {
                "message": full_message,
                "model": model,
                "options": agent_options(env, option, permission=permission),
                "provider_settings": parse_settings(setting),
                "deadline": timeout,
                "idle_timeout": idle_timeout,
                "keep_node": keep_node,
                "pause_after_turn": pause_after_turn,
                "agent_grace": agent_grace,
            }
            return await start(orchestrator, how)

        outcome = anyio.run(drive_run, request, begin)
    exit_for(outcome)


async def _load_run(store: str | None, run_id: str, checkpoint: str | None = None) -> RunRecord:
    """Run ``run_id`` (and its ``checkpoint``, if given, there).

    Raises:
        RunStateError: there is no such run, or it has no such checkpoint.
    """
    async with await open_store(store) as opened:
        record = await record_of(opened, run_id)
        if checkpoint is not None:
            found = await opened.checkpoints.get(checkpoint)
            if found is None or found.run_id != run_id:
                raise RunStateError(f"run {run_id} has no checkpoint {checkpoint}")
        return record
