"""Run commands: run, pause, logs, runs, sessions, status (and what :mod:`.resuming` shares)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import anyio
import typer

from ..errors import ConfigError, RunStateError
from .app import (
    SCRIPTED,
    AgentOptionsOption,
    JsonOption,
    RunOption,
    SettingOption,
    StoreOption,
    app,
    errors,
    fail,
    open_store,
    parse_env,
    parse_settings,
    summary,
)
from .render import emit, out, print_table, when

if TYPE_CHECKING:
    from ..prompts import Block, Prompt
    from ..runs import Orchestrator, Run
    from ..store import RunRecord, SnapshotRecord, Store

__all__ = [
    "AgentOption",
    "IdleTimeoutOption",
    "ImageOption",
    "MessageEnvOption",
    "NewRunModelOption",
    "OutputSchemaOption",
    "PauseAfterTurnOption",
    "PermissionOption",
    "PoolWaitOption",
    "ShipCliOption",
    "TimeoutOption",
    "agent_options",
    "exit_for",
    "logs",
    "pause",
    "prompt_of",
    "record_of",
    "run",
    "runs",
    "sessions",
    "status",
]

# Only `run`, `pause` and `logs` (and `.resuming`'s) load the agents and the orchestrator
# (importing them costs more than everything else a command does), and only once the call is valid.

MessageEnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env", "-e", help="Pass NAME (from this environment) or NAME=VALUE to the agent. Repeatable."
    ),
]
TimeoutOption = Annotated[
    float | None, typer.Option("--timeout", help="End the run as failed after this many seconds.")
]
IdleTimeoutOption = Annotated[
    float | None,
    typer.Option(help="End the run as failed when the agent makes no progress for this many seconds."),
]
AgentGraceOption = Annotated[
    float | None,
    typer.Option(
        help="Keep the agent on its node: it outlives a dropped connection, and this command, for "
        "this many seconds with no control plane attached (`nodeprov attach RUN` takes it over), "
        "then it is stopped. 0: not kept (stopped as soon as its connection drops). Default: "
        "180 (nodeprov.runs.KEPT_AGENT_GRACE) for a new run, the run's own for a resume.",
        min=0,
        show_default=False,
    ),
]
PermissionOption = Annotated[
    str | None,
    typer.Option(
        help="What the agent may do: read-only, edit or full (docs/agents/: each agent's flags). "
        "Default: full, except for a real model on the local provider (unsandboxed, as you on this "
        "host), which must name one."
    ),
]
AgentOption = Annotated[
    str | None,
    typer.Option(help="The agent (see `nodeprov agents`); default: the one the model routes to."),
]
ImageOption = Annotated[
    list[str] | None,
    typer.Option(
        "--image",
        metavar="FILE",
        help="A PNG, JPEG, GIF or WebP image for the agent, after the text; '-' reads one from stdin. "
        "Repeatable. Refused before anything is provisioned where the model cannot see images "
        "(or give --option images=text-only to send the text alone).",
    ),
]
PauseAfterTurnOption = Annotated[
    bool,
    typer.Option(
        help="When the agent returns its result, pause the run (exit 3) rather than finish it: "
        "`nodeprov resume RUN --message ...` is then the conversation's next turn, on the same node "
        "(with --keep-node) and agent session."
    ),
]
PoolWaitOption = Annotated[
    bool, typer.Option(help="When the pool has no node ready, wait for one rather than make one cold.")
]
NewRunModelOption = Annotated[
    str, typer.Option(help="'scripted' for the built-in offline model, else a real model's name.")
]
ShipCliOption = Annotated[
    bool | None,
    typer.Option(
        help="Make this machine's agent CLI available on the node (mounted read-only, or used in "
        "place). Default: on where the provider's nodes are on this machine (local)."
    ),
]
OutputSchemaOption = Annotated[
    typer.FileText | None,
    typer.Option(help="A JSON schema file the agent's result must match; the result is then parsed."),
]


def prompt_of(text: str, images: list[str] | None) -> Prompt:
    """The text and the ``--image`` files (``-``: stdin, once), read now.

    Raises:
        ConfigError: a file cannot be read or is not an image, or ``-`` is given twice.
    """
    if not images:
        return text
    from ..prompts import ImageBlock, TextBlock

    if images.count("-") > 1:
        raise ConfigError("--image -: stdin holds one image")
    blocks: list[Block] = [TextBlock(text)]
    for path in images:
        if path == "-":
            try:
                blocks.append(ImageBlock.from_bytes(sys.stdin.buffer.read()))
            except ConfigError as error:
                raise ConfigError(f"--image -: {error}") from None
        else:
            blocks.append(ImageBlock.from_file(path))
    return blocks


def agent_options(
    env: list[str] | None,
    given: list[str] | None,
    *,
    permission: str | None = None,
    max_turns: int | None = None,
    output_schema: typer.FileText | None = None,
) -> dict[str, Any]:
    options: dict[str, Any] = {**parse_settings(given, "--option"), "env": parse_env(env)}
    if permission is not None:
        options["permission"] = permission
    if max_turns is not None:
        options["max_turns"] = max_turns
    if output_schema is not None:
        try:
            options["output_schema"] = json.load(output_schema)
        except ValueError as error:
            raise ConfigError(f"--output-schema: not JSON: {error}") from None
    return options


@app.command(short_help=summary("run"))
def run(  # noqa: PLR0917 - one parameter per command-line option
    prompt: Annotated[str, typer.Argument(help="The task for the agent.")],
    image: ImageOption = None,
    provider: Annotated[
        str | None, typer.Option("--provider", "-p", help="Provider name [default: local].")
    ] = None,
    setting: SettingOption = None,
    pool: Annotated[
        str | None,
        typer.Option(
            help="Claim the node from this warm pool (`nodeprov pool`): its provider, settings, template."
        ),
    ] = None,
    pool_wait: PoolWaitOption = False,
    model: NewRunModelOption = SCRIPTED,
    agent: AgentOption = None,
    option: AgentOptionsOption = None,
    env: MessageEnvOption = None,
    permission: PermissionOption = None,
    max_turns: Annotated[int | None, typer.Option(help="Stop after this many turns (claude).")] = None,
    output_schema: OutputSchemaOption = None,
    ship_cli: ShipCliOption = None,
    workspace: Annotated[
        str, typer.Option(help="Workspace whose agent session this run continues.")
    ] = "default",
    keep_node: Annotated[
        bool, typer.Option(help="When paused (Ctrl-C), keep the node for the resume.")
    ] = False,
    pause_after_turn: PauseAfterTurnOption = False,
    checkpoint: Annotated[
        str,
        typer.Option(
            help="When to checkpoint the workspace with the agent's session: pause (at every pause, "
            "so a resume on a fresh node gets the files back), turn (after each turn too), or off."
        ),
    ] = "pause",
    timeout: TimeoutOption = None,
    idle_timeout: IdleTimeoutOption = None,
    agent_grace: AgentGraceOption = None,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Run a coding agent (Claude Code, Codex, OpenCode, Gemini CLI, any ACP agent) on PROMPT on
    a new node; events live. Ctrl-C pauses (kind human); SIGTERM and SIGHUP pause too (kind
    system); a second signal aborts at once.

    Exits 0 when the agent succeeds, 1 on an error, 3 when the run was paused.
    """
    from ..runs import RunSpec  # not for --help

    with errors():
        spec = RunSpec(
            prompt=prompt_of(prompt, image),
            provider=provider or (None if pool else "local"),
            pool=pool,
            pool_wait=pool_wait,
            provider_settings=parse_settings(setting),
            agent=agent,
            model=model,
            options=agent_options(env, option, max_turns=max_turns, output_schema=output_schema),
            permission=permission,  # type: ignore[arg-type]
            ship_cli=ship_cli,
            workspace=workspace,
            deadline=timeout,
            idle_timeout=idle_timeout,
            keep_node=keep_node,
            pause_after_turn=pause_after_turn,
            agent_grace=agent_grace,
            checkpoint=checkpoint,  # type: ignore[arg-type]
        )
        from .drive import RunRequest, drive_run  # see the imports

        request = RunRequest(keep_node=keep_node, store=store, json_output=json_output, pool=pool)

        async def start(orchestrator: Orchestrator) -> Run:
            return await orchestrator.start(spec)

        outcome = anyio.run(drive_run, request, start)
    exit_for(outcome)


async def record_of(store: Store, run_id: str) -> RunRecord:
    record = await store.run(run_id)
    if record is None:
        raise RunStateError(f"no such run {run_id}")
    return record


def exit_for(outcome: str) -> NoReturn:
    raise typer.Exit({"ok": 0, "paused": 3}.get(outcome, 1))


@app.command(short_help=summary("pause"))
def pause(  # noqa: PLR0917 - one parameter per command-line option
    run_id: RunOption,
    kind: Annotated[str, typer.Option(help="human, external or system (diagnostics).")] = "human",
    reason: Annotated[str, typer.Option(help="Why (shown in events and status).")] = "",
    keep_node: Annotated[
        bool | None,
        typer.Option(
            "--keep-node/--no-keep-node",
            help="Keep the node for the resume. Default: as the run was started (nodeprov run --keep-node).",
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the pause.")] = 120,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Pause a run driven by another nodeprov process (it checks twice a second)."""

    async def request() -> SnapshotRecord:
        from ..runs import Orchestrator, RunState  # see the imports

        async with await open_store(store) as opened, Orchestrator(opened, reconcile_interval=0) as plane:
            await record_of(opened, run_id)  # else request_pause would say it is not running
            asked = await plane.request_pause(run_id, kind, reason, keep_node=keep_node)  # type: ignore[arg-type]
            try:
                with anyio.fail_after(timeout):
                    while True:
                        record = await opened.run(run_id)
                        if record is not None and not RunState(record.state).live:
                            break
                        await anyio.sleep(0.2)
            except TimeoutError:
                await plane.withdraw_pause(run_id, asked)  # or a later resume would pause at once
                raise
            snapshots = [s for s in await opened.snapshots(run_id) if s.used_at is None]
            if record.state != RunState.PAUSED or not snapshots:
                raise RunStateError(f"run {run_id} ended {record.outcome or record.state} instead of pausing")
            return snapshots[-1]

    with errors():
        try:
            snapshot = anyio.run(request)
        except TimeoutError:
            fail(f"run {run_id} did not pause within {timeout}s (is its control plane alive?)")
    if json_output:
        emit({"run_id": run_id, "state": "paused", "token": snapshot.token, "node_kept": snapshot.node_kept})
    else:
        out.print(f"paused {run_id}; resume with `nodeprov resume {run_id}`", soft_wrap=True)


@app.command(short_help=summary("logs"))
def logs(
    run_id: RunOption,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep following until nobody drives the run.")
    ] = False,
    after: Annotated[int, typer.Option(help="Start after this event sequence number.")] = 0,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show a run's events, from any process (they are kept in the store)."""

    async def show() -> None:
        from ..runs import Orchestrator, RunState  # see the imports
        from .events import show_event

        async with await open_store(store) as opened:
            # Reading needs no lease: a reader owns nothing.
            reader = Orchestrator(opened)
            finished = False
            async for event in reader.events(run_id, after=after, follow=follow):
                show_event(event, json_output)
                finished = event.kind == "run.finished"
            record = await opened.run(run_id)
            if follow and not finished and record is not None and RunState(record.state).live:
                if record.agent_keeper is not None and record.state == RunState.RUNNING:
                    fail(
                        f"run {run_id}'s control plane is gone, and its agent runs on, kept: "
                        f"`nodeprov attach {run_id}` takes it over and follows it "
                        "(`nodeprov gc` would end it)"
                    )
                fail(
                    f"run {run_id}'s control plane is gone (its lease expired): nobody drives it; "
                    "`nodeprov gc` (or any control plane's reconcile) ends it"
                )

    with errors():
        anyio.run(show)


@app.command(short_help=summary("runs"))
def runs(store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List runs, oldest first."""

    async def load() -> list[RunRecord]:
        async with await open_store(store) as opened:
            return await opened.runs()

    with errors():
        records = anyio.run(load)
    if json_output:
        for record in records:
            emit(_run_json(record))
        return
    print_table(
        ["run", "state", "outcome", "agent", "provider", "node", "workspace", "started", "task"],
        [
            [
                record.id,
                record.state,
                record.outcome or "",
                record.agent,
                record.node_provider,
                record.node_id or "",
                record.workspace_id,
                when(record.created_at),
                record.prompt[:40],
            ]
            for record in records
        ],
        ids=("run", "node"),
    )


@app.command(short_help=summary("sessions"))
def sessions(store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List workspaces' agent sessions (archived ones too)."""

    async def load() -> list[Any]:
        async with await open_store(store) as opened:
            return await opened.sessions()

    with errors():
        records = anyio.run(load)
    if json_output:
        for record in records:
            emit(dataclasses.asdict(record))
        return
    print_table(
        ["session", "workspace", "agent", "agent session", "state", "created"],
        [
            [
                record.id,
                record.workspace_id,
                record.provider,
                record.provider_session_id or "",
                record.state,
                when(record.created_at),
            ]
            for record in records
        ],
        ids=("session", "agent session"),
    )


@app.command(short_help=summary("status"))
def status(run_id: RunOption, store: StoreOption = None, json_output: JsonOption = False) -> None:
    """Show a run and its snapshots."""

    async def load() -> tuple[RunRecord, list[SnapshotRecord], str | None]:
        async with await open_store(store) as opened:
            record = await record_of(opened, run_id)
            sessions = await opened.sessions(record.workspace_id)
            archived = any(s.id == record.session_id and s.state != "active" for s in sessions)
            why_not = "its workspace switched to another agent" if archived else None
            if record.state not in ("paused", "failed"):
                why_not = f"it is {record.state}"
            return record, await opened.snapshots(run_id), why_not

    with errors():
        record, snapshots, why_not = anyio.run(load)
    body = {
        **_run_json(record),
        "resumable": why_not is None and any(s.used_at is None for s in snapshots),
        "snapshots": [
            {k: v for k, v in dataclasses.asdict(s).items() if k != "token"}
            | {"resumable": s.used_at is None and why_not is None}
            for s in snapshots
        ],
    }
    if json_output:
        emit(body)
        return
    for key, value in body.items():
        if key not in ("snapshots", "resumable"):
            out.print(f"{key:>16}: {value if value is not None else ''}", soft_wrap=True, markup=False)
    for snapshot in body["snapshots"]:
        said = (
            "resumable"
            if snapshot["resumable"]
            else "used"
            if snapshot["used_at"]
            else f"not resumable: {why_not}"
        )
        out.print(
            f"        snapshot: {snapshot['pause_kind']} at {snapshot['created_at'][:19]} "
            f"({snapshot['reason']}) {said}",
            soft_wrap=True,
            markup=False,
        )


def _run_json(record: RunRecord) -> dict[str, Any]:
    return {
        k: v for k, v in dataclasses.asdict(record).items() if k not in ("node_settings", "pause_request")
    }
