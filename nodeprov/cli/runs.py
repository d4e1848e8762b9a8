"""Run commands: run, resume, pause, logs, runs, sessions, status."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import anyio
import typer

from ..errors import ConfigError, RunStateError
from ..store import RunRecord, SnapshotRecord, Store
from .app import (
    SCRIPTED,
    JsonOption,
    RunOption,
    SettingOption,
    StoreOption,
    app,
    errors,
    fail,
    make_provider,
    parse_env,
    parse_settings,
)
from .render import emit, out, print_table, when

if TYPE_CHECKING:
    from claude_agent_sdk import ClaudeAgentOptions

    from ..runs import Orchestrator, Run

# Only `run`, `resume`, `pause` and `logs` load the SDK and the orchestrator (importing
# them costs more than everything else a command does), and only once the call is valid.

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
PermissionOption = Annotated[
    str | None,
    typer.Option(
        help="Claude Code permission mode. Default: bypassPermissions, except for a real model "
        "on the local provider (unsandboxed, as you on this host), which must name one."
    ),
]


def _agent_options(
    model: str, env: list[str] | None, permission_mode: str | None, max_turns: int | None
) -> dict[str, Any]:
    return {
        "env": parse_env(env),
        "permission_mode": permission_mode,
        "max_turns": max_turns,
        "model": None if model == SCRIPTED else model,
    }


@app.command()
def run(  # noqa: PLR0917 - one parameter per command-line option
    prompt: Annotated[str, typer.Argument(help="The task for the agent.")],
    provider: Annotated[str, typer.Option("--provider", "-p", help="Provider name.")] = "local",
    setting: SettingOption = None,
    model: Annotated[
        str, typer.Option(help="'scripted' for the built-in offline model, else a real model's name.")
    ] = SCRIPTED,
    env: MessageEnvOption = None,
    permission_mode: PermissionOption = None,
    max_turns: Annotated[int | None, typer.Option(help="Stop after this many turns.")] = None,
    workspace: Annotated[
        str, typer.Option(help="Workspace whose agent session this run continues.")
    ] = "default",
    keep_node: Annotated[
        bool, typer.Option(help="When paused (Ctrl-C), keep the node for the resume.")
    ] = False,
    timeout: TimeoutOption = None,
    idle_timeout: IdleTimeoutOption = None,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Run Claude Code on PROMPT on a new node; events live. Ctrl-C pauses (kind human);
    SIGTERM and SIGHUP pause too (kind system); a second signal aborts at once.

    Exits 0 when the agent succeeds, 1 on an error, 3 when the run was paused.
    """
    with errors():
        settings = parse_settings(setting)
        make_provider(provider, settings)  # a bad setting or a missing image: before a run is recorded
        if permission_mode is None:
            if provider == "local" and model != SCRIPTED:
                raise ConfigError(
                    "a real model on the local provider runs unsandboxed, as you, on this host: "
                    "choose --permission-mode (default, acceptEdits, plan or bypassPermissions)"
                )
            permission_mode = "bypassPermissions"
        from .drive import RunRequest, drive_run  # see the imports

        request = RunRequest(
            prompt,
            model,
            _agent_options(model, env, permission_mode, max_turns),
            keep_node,
            store,
            json_output,
            timeout,
            idle_timeout,
        )

        async def start(orchestrator: Orchestrator, options: ClaudeAgentOptions) -> Run:
            return await orchestrator.start(
                prompt,
                provider=provider,
                provider_settings=settings,
                options=options,
                workspace=workspace,
                deadline=timeout,
                idle_timeout=idle_timeout,
            )

        outcome = anyio.run(drive_run, request, start)
    _exit_for(outcome)


@app.command()
def resume(  # noqa: PLR0917 - one parameter per command-line option
    run_id: RunOption,
    message: Annotated[str, typer.Option(help="What to tell the agent.")] = "continue",
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--setting",
            "-s",
            help="Provider setting KEY=VALUE over the run's stored ones; "
            "secret settings are never stored and must be given again.",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="'scripted' or a model name; default: the run's own model.")
    ] = None,
    env: MessageEnvOption = None,
    permission_mode: Annotated[
        str | None, typer.Option(help="Claude Code permission mode; default: the run's own.")
    ] = None,
    keep_node: Annotated[bool, typer.Option(help="When paused again, keep the node.")] = False,
    timeout: TimeoutOption = None,
    idle_timeout: IdleTimeoutOption = None,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Resume a paused (or failed) run with a message, on its kept node or a fresh one.
    Model, permission mode and turn limit are the run's own unless given."""
    with errors():
        settings = parse_settings(setting)
        record = anyio.run(_load_run, store, run_id)
        stored = json.loads(record.agent_options)
        model = model or stored.get("model") or SCRIPTED
        from .drive import RunRequest, drive_run  # see the imports

        request = RunRequest(
            message,
            model,
            _agent_options(
                model, env, permission_mode or stored.get("permission_mode"), stored.get("max_turns")
            ),
            keep_node,
            store,
            json_output,
            timeout,
            idle_timeout,
        )

        async def start(orchestrator: Orchestrator, options: ClaudeAgentOptions) -> Run:
            return await orchestrator.resume_run(
                run_id,
                message=message,
                options=options,
                provider_settings=settings,
                deadline=timeout,
                idle_timeout=idle_timeout,
            )

        outcome = anyio.run(drive_run, request, start)
    _exit_for(outcome)


async def _load_run(store: str | None, run_id: str) -> RunRecord:
    async with await Store.open(store) as opened:
        return await _record(opened, run_id)


async def _record(store: Store, run_id: str) -> RunRecord:
    record = await store.run(run_id)
    if record is None:
        raise RunStateError(f"no such run {run_id}")
    return record


def _exit_for(outcome: str) -> NoReturn:
    raise typer.Exit({"ok": 0, "paused": 3}.get(outcome, 1))


@app.command()
def pause(  # noqa: PLR0917 - one parameter per command-line option
    run_id: RunOption,
    kind: Annotated[str, typer.Option(help="human, external or system (diagnostics).")] = "human",
    reason: Annotated[str, typer.Option(help="Why (shown in events and status).")] = "",
    keep_node: Annotated[bool, typer.Option(help="Keep the node for the resume.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the pause.")] = 120,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Pause a run driven by another nodeprov process (it checks twice a second)."""

    async def request() -> SnapshotRecord:
        from ..runs import Orchestrator, RunState  # see the imports

        async with await Store.open(store) as opened, Orchestrator(opened, reconcile_interval=0) as plane:
            await _record(opened, run_id)  # else request_pause would say it is not running
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


@app.command()
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
        from ..runs import Orchestrator  # see the imports
        from .events import show_event

        async with await Store.open(store) as opened:
            # Reading needs no lease: a reader owns nothing.
            reader = Orchestrator(opened)
            async for event in reader.events(run_id, after=after, follow=follow):
                show_event(event, json_output)

    with errors():
        anyio.run(show)


@app.command()
def runs(store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List runs, oldest first."""

    async def load() -> list[RunRecord]:
        async with await Store.open(store) as opened:
            return await opened.runs()

    with errors():
        records = anyio.run(load)
    if json_output:
        for record in records:
            emit(_run_json(record))
        return
    print_table(
        ["run", "state", "outcome", "provider", "node", "workspace", "started", "task"],
        [
            [
                record.id,
                record.state,
                record.outcome or "",
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


@app.command()
def sessions(store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List workspaces' agent sessions (archived ones too)."""

    async def load() -> list[Any]:
        async with await Store.open(store) as opened:
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


@app.command()
def status(run_id: RunOption, store: StoreOption = None, json_output: JsonOption = False) -> None:
    """Show a run and its snapshots."""

    async def load() -> tuple[RunRecord, list[SnapshotRecord]]:
        async with await Store.open(store) as opened:
            return await _record(opened, run_id), await opened.snapshots(run_id)

    with errors():
        record, snapshots = anyio.run(load)
    body = {
        **_run_json(record),
        "snapshots": [
            {k: v for k, v in dataclasses.asdict(s).items() if k != "token"}
            | {"resumable": s.used_at is None}
            for s in snapshots
        ],
    }
    if json_output:
        emit(body)
        return
    for key, value in body.items():
        if key != "snapshots":
            out.print(f"{key:>16}: {value if value is not None else ''}", soft_wrap=True)
    for snapshot in body["snapshots"]:
        out.print(
            f"        snapshot: {snapshot['pause_kind']} at {snapshot['created_at'][:19]} "
            f"({snapshot['reason']}) {'resumable' if snapshot['resumable'] else 'used'}",
            soft_wrap=True,
        )


def _run_json(record: RunRecord) -> dict[str, Any]:
    return {
        k: v for k, v in dataclasses.asdict(record).items() if k not in ("node_settings", "pause_request")
    }
