"""The ``nodeprov`` command line: a thin layer over the library (typer + rich).

Errors print one line, ``error: ...``, on stderr and exit non-zero (2 for a bad call or
configuration, 1 otherwise). Only the CLI configures logging (``-v``: info, ``-vv``: debug).
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import logging
import os
import shlex
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext, suppress
from datetime import timedelta
from typing import Annotated, Any, NoReturn

import anyio
import typer
from anyio import AsyncFile
from anyio.abc import ByteReceiveStream
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKError,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from .errors import ConfigError, NodeGoneError, NodeprovError, ProviderError
from .node import (
    LABEL_EXPIRES_AT,
    LABEL_OWNER,
    LABEL_SESSION_ID,
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
)
from .registry import provider_class, provider_names
from .runs import (
    AgentMessage,
    NodeReady,
    NodeReleased,
    Orchestrator,
    Run,
    RunEvent,
    RunFinished,
    RunPaused,
    RunState,
    RunStateError,
)
from .spawn import SpawnOptions
from .store import RunRecord, SnapshotRecord, Store
from .testing.scripted_model import ScriptedModel, Text, ToolUse

app = typer.Typer(
    name="nodeprov",
    no_args_is_help=True,
    add_completion=False,
    help="Provision nodes for AI coding agents and run Claude Code on them.",
)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


@app.callback()
def _setup(
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="Log more: -v info, -vv debug.")
    ] = 0,
) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        level=level, format="%(message)s", handlers=[RichHandler(console=err, show_path=False)]
    )
    # The SDK logs the failures this CLI reports itself; show them only when asked.
    logging.getLogger("claude_agent_sdk").setLevel(level if verbose else logging.CRITICAL)


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def _errors() -> Iterator[None]:
    """Turn every expected failure into one line and an exit status."""
    try:
        yield
    except ConfigError as error:
        _fail(str(error), 2)
    except (NodeprovError, ClaudeSDKError) as error:
        _fail(str(error).splitlines()[0] if str(error) else type(error).__name__)


def _parse_settings(items: list[str] | None) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for item in items or []:
        key, raw = _parse_pair(item, "--setting")
        try:
            settings[key.replace("-", "_")] = json.loads(raw)
        except ValueError:
            settings[key.replace("-", "_")] = raw
    return settings


def _parse_env(items: list[str] | None) -> dict[str, str]:
    env = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if sep:
            env[name] = value
        elif name in os.environ:
            env[name] = os.environ[name]
        else:
            raise ConfigError(f"--env {name}: no such variable in this environment")
    return env


@app.command()
def providers(
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object per provider.")] = False,
) -> None:
    """List installed providers and whether each one's tools and credentials are present."""
    rows: list[dict[str, Any]] = []
    for name in provider_names():
        try:
            requirements = provider_class(name).requirements()
            problem = ""
        except NodeprovError as error:
            requirements, problem = [], str(error)
        rows.append(
            {
                "name": name,
                "ready": not problem and all(r.ok for r in requirements),
                "error": problem,
                "requirements": [dataclasses.asdict(r) for r in requirements],
            }
        )
    if json_output:
        for row in rows:
            out.print_json(json.dumps(row), indent=None)
        return
    table = Table("provider", "ready", "requirements")
    for row in rows:
        details = [f"{'✓' if r['ok'] else '✗'} {r['name']}: {r['detail']}" for r in row["requirements"]]
        table.add_row(
            row["name"], "yes" if row["ready"] else "[red]no[/]", "\n".join(details) or row["error"] or "-"
        )
    out.print(table)


def _scripted_demo(prompt: str) -> ScriptedModel:
    return ScriptedModel(
        [
            ToolUse(
                "Bash",
                {"command": f"printf '%s\\n' {shlex.quote(prompt)} > prompt.txt && uname -sm && pwd"},
                text="Let me look at the node first.",
            ),
            Text(
                f"(scripted model) I ran a command on the node and saved your prompt to prompt.txt: {prompt}"
            ),
        ]
    )


@asynccontextmanager
async def _model(kind: str, prompt: str) -> AsyncIterator[tuple[dict[str, str], str | None]]:
    """The agent's model: the built-in scripted one, or a real model name."""
    if kind != "scripted":
        yield {}, kind or None
        return
    async with _scripted_demo(prompt) as model:
        yield model.agent_env(), None


def _render(message: Message) -> None:
    if isinstance(message, SystemMessage) and message.subtype == "init":
        out.print(
            f"[dim]agent started: session {message.data.get('session_id')}, cwd {message.data.get('cwd')}[/]"
        )
    elif isinstance(message, AssistantMessage):
        for block in message.content:
            if isinstance(block, TextBlock):
                out.print(block.text)
            elif isinstance(block, ToolUseBlock):
                out.print(f"[cyan]→ {block.name}[/] {json.dumps(block.input)[:300]}")
    elif isinstance(message, UserMessage) and isinstance(message.content, list):
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                text = block.content if isinstance(block.content, str) else json.dumps(block.content)
                out.print(f"[dim]← {text[:500]}[/]")


StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="NODEPROV_STORE",
        help="Store URL (sqlite:///PATH or postgresql://...); "
        "default: the SQLite file under your state directory.",
    ),
]
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
ModelOption = Annotated[
    str, typer.Option(help="'scripted' for the built-in offline model, else a model name for the real API.")
]


@app.command()
def run(  # noqa: PLR0917 - one parameter per command-line option
    prompt: Annotated[str, typer.Argument(help="The task for the agent.")],
    provider: Annotated[str, typer.Option("--provider", "-p", help="Provider name.")] = "local",
    setting: SettingOption = None,
    model: ModelOption = "scripted",
    env: MessageEnvOption = None,
    permission_mode: Annotated[str, typer.Option(help="Claude Code permission mode.")] = "bypassPermissions",
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
    SIGTERM and SIGHUP pause too (kind system).

    Exits 0 when the agent succeeds, 1 on an error, 3 when the run was paused.
    """
    with _errors():
        options = _agent_options(model, env, permission_mode, max_turns)
        request = _RunRequest(
            prompt,
            provider,
            _parse_settings(setting),
            model,
            options,
            workspace,
            keep_node,
            store,
            json_output,
            timeout,
            idle_timeout,
        )
        outcome = anyio.run(_drive_run, request, None)
    _exit_for(outcome)


@app.command()
def resume(  # noqa: PLR0917 - one parameter per command-line option
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="Run id.")],
    message: Annotated[str, typer.Option(help="What to tell the agent.")] = "continue",
    model: ModelOption = "scripted",
    env: MessageEnvOption = None,
    permission_mode: Annotated[str, typer.Option(help="Claude Code permission mode.")] = "bypassPermissions",
    keep_node: Annotated[bool, typer.Option(help="When paused again, keep the node.")] = False,
    timeout: TimeoutOption = None,
    idle_timeout: IdleTimeoutOption = None,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Resume a paused (or failed) run with a message, on its kept node or a fresh one."""
    with _errors():
        options = _agent_options(model, env, permission_mode, None)
        request = _RunRequest(
            message, "", {}, model, options, "", keep_node, store, json_output, timeout, idle_timeout
        )
        outcome = anyio.run(_drive_run, request, run_id)
    _exit_for(outcome)


def _agent_options(
    model: str, env: list[str] | None, permission_mode: str, max_turns: int | None
) -> dict[str, Any]:
    return {
        "env": _parse_env(env),
        "permission_mode": permission_mode,
        "max_turns": max_turns,
        "model": None if model == "scripted" else model,
    }


def _exit_for(outcome: str) -> NoReturn:
    raise typer.Exit({"ok": 0, "paused": 3}.get(outcome, 1))


@dataclasses.dataclass(frozen=True)
class _RunRequest:
    prompt: str
    provider: str
    settings: dict[str, Any]
    model: str
    options: dict[str, Any]
    workspace: str
    keep_node: bool
    store: str | None
    json_output: bool
    deadline: float | None
    idle_timeout: float | None


async def _drive_run(request: _RunRequest, resume_id: str | None) -> str:
    """Start (or resume) a run, show its events, pause it on Ctrl-C, SIGTERM or SIGHUP;
    return its outcome."""
    async with _model(request.model, request.prompt) as (model_env, _):
        options = ClaudeAgentOptions(**{**request.options, "env": {**model_env, **request.options["env"]}})
        async with await Store.open(request.store) as store, Orchestrator(store) as orchestrator:
            await _reconcile(orchestrator)
            if resume_id is None:
                active = await orchestrator.start(
                    request.prompt,
                    provider=request.provider,
                    provider_settings=request.settings,
                    options=options,
                    workspace=request.workspace,
                    deadline=request.deadline,
                    idle_timeout=request.idle_timeout,
                )
            else:
                active = await orchestrator.resume_run(
                    resume_id,
                    message=request.prompt,
                    options=options,
                    deadline=request.deadline,
                    idle_timeout=request.idle_timeout,
                )
            if not request.json_output:
                out.print(f"[dim]run {active.id}[/]")
            async with anyio.create_task_group() as tg:
                tg.start_soon(_pause_on_signals, active, request.keep_node, tg.cancel_scope)
                async for event in active.events():
                    _show(event, request.json_output)
                tg.cancel_scope.cancel()
            outcome = await active.wait()
    if outcome == "paused" and not request.json_output:
        err.print(f"paused: resume with `nodeprov resume {active.id}`")
    elif outcome == "error":
        _fail(active.error or "the run failed")
    return outcome


async def _reconcile(orchestrator: Orchestrator) -> None:
    """Clean up after dead control planes; a provider that cannot be asked must not block."""
    try:
        report = await orchestrator.reconcile()
    except NodeprovError as error:
        err.print(f"[yellow]warning:[/] reconcile: {error}")
        return
    for node_id, why in report.failed:
        err.print(f"[yellow]warning:[/] reconcile: node {node_id}: {why}")


async def _pause_on_signals(active: Run, keep_node: bool, scope: anyio.CancelScope) -> None:
    """Ctrl-C pauses (kind human); SIGTERM and SIGHUP, sent by `timeout`, systemd, a closed
    terminal or a CI cancel, pause too (kind system). A second signal aborts: leaving the
    orchestrator still pauses what runs."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            human = signum == signal.SIGINT
            err.print(f"[yellow]pausing ({'Ctrl-C' if human else signum.name} again to abort)...[/]")
            reason = "interrupted from the terminal" if human else f"nodeprov received {signum.name}"
            with suppress(RunStateError):
                await active.pause("human" if human else "system", reason, keep_node=keep_node)
            async for _ in signals:
                scope.cancel()


def _show(event: RunEvent, json_output: bool) -> None:
    if json_output:
        _emit(event.to_json())
    elif isinstance(event, AgentMessage):
        _render(event.message)
    elif isinstance(event, NodeReady):
        how = (
            "reused"
            if event.reused
            else "provisioned" + (", transcript restored" if event.transcript_restored else "")
        )
        out.print(f"[dim]node {event.node_id} {how}[/]")
    elif isinstance(event, NodeReleased):
        out.print(f"[dim]node {event.node_id} {'kept' if event.kept else 'destroyed'}[/]")
    elif isinstance(event, RunPaused):
        out.print(f"paused ({event.pause_kind}): {event.reason}")
    elif isinstance(event, RunFinished):
        colour = {"ok": "green", "paused": "yellow"}.get(event.outcome, "red")
        out.print(f"\nresult: [{colour}]{event.outcome}[/]" + (f": {event.error}" if event.error else ""))
        if event.agent_session_id:
            out.print(f"session: {event.agent_session_id}")


@app.command()
def pause(  # noqa: PLR0917 - one parameter per command-line option
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="Run id.")],
    kind: Annotated[str, typer.Option(help="human, external or system (diagnostics).")] = "human",
    reason: Annotated[str, typer.Option(help="Why (shown in events and status).")] = "",
    keep_node: Annotated[bool, typer.Option(help="Keep the node for the resume.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the pause.")] = 120,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Pause a run driven by another nodeprov process (it checks twice a second)."""

    async def request() -> SnapshotRecord:
        async with await Store.open(store) as opened, Orchestrator(opened, reconcile_interval=0) as plane:
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

    with _errors():
        try:
            snapshot = anyio.run(request)
        except TimeoutError:
            _fail(f"run {run_id} did not pause within {timeout}s (is its control plane alive?)")
    if json_output:
        _emit({"run_id": run_id, "state": "paused", "token": snapshot.token, "node_kept": snapshot.node_kept})
    else:
        out.print(f"paused {run_id}; resume with `nodeprov resume {run_id}`")


@app.command()
def logs(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="Run id.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep following until nobody drives the run.")
    ] = False,
    after: Annotated[int, typer.Option(help="Start after this event sequence number.")] = 0,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show a run's events, from any process (they are kept in the store)."""

    async def show() -> None:
        async with await Store.open(store) as opened:
            # Reading needs no lease: a reader owns nothing.
            reader = Orchestrator(opened)
            async for event in reader.events(run_id, after=after, follow=follow):
                _show(event, json_output)

    with _errors():
        anyio.run(show)


@app.command()
def runs(store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List runs, oldest first."""

    async def load() -> list[RunRecord]:
        async with await Store.open(store) as opened:
            return await opened.runs()

    with _errors():
        records = anyio.run(load)
    if json_output:
        for record in records:
            _emit(_run_json(record))
        return
    table = Table("run", "state", "outcome", "provider", "node", "workspace", "started", "task")
    for record in records:
        table.add_row(
            record.id,
            record.state,
            record.outcome or "",
            record.node_provider,
            record.node_id or "",
            record.workspace_id,
            record.created_at[:19],
            record.prompt[:40],
        )
    out.print(table)


@app.command()
def sessions(store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List workspaces' agent sessions (archived ones too)."""

    async def load() -> list[Any]:
        async with await Store.open(store) as opened:
            return await opened.sessions()

    with _errors():
        records = anyio.run(load)
    if json_output:
        for record in records:
            _emit(dataclasses.asdict(record))
        return
    table = Table("session", "workspace", "agent", "agent session", "state", "created")
    for record in records:
        table.add_row(
            record.id,
            record.workspace_id,
            record.provider,
            record.provider_session_id or "",
            record.state,
            record.created_at[:19],
        )
    out.print(table)


@app.command()
def status(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="Run id.")],
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show a run and its snapshots."""

    async def load() -> tuple[RunRecord | None, list[SnapshotRecord]]:
        async with await Store.open(store) as opened:
            return await opened.run(run_id), await opened.snapshots(run_id)

    with _errors():
        record, snapshots = anyio.run(load)
        if record is None:
            raise RunStateError(f"no run {run_id}")
    body = {
        **_run_json(record),
        "snapshots": [
            {k: v for k, v in dataclasses.asdict(s).items() if k != "token"}
            | {"resumable": s.used_at is None}
            for s in snapshots
        ],
    }
    if json_output:
        _emit(body)
        return
    for key, value in body.items():
        if key != "snapshots":
            out.print(f"{key:>16}: {value if value is not None else ''}")
    for snapshot in body["snapshots"]:
        out.print(
            f"        snapshot: {snapshot['pause_kind']} at {snapshot['created_at'][:19]} "
            f"({snapshot['reason']}) {'resumable' if snapshot['resumable'] else 'used'}"
        )


def _run_json(record: RunRecord) -> dict[str, Any]:
    return {
        k: v for k, v in dataclasses.asdict(record).items() if k not in ("node_settings", "pause_request")
    }


# -- node management -----------------------------------------------------------------

ProviderOption = Annotated[str | None, typer.Option("--provider", "-p", help="Provider name (default: all).")]
SettingOption = Annotated[
    list[str] | None,
    typer.Option("--setting", "-s", help="Provider setting KEY=VALUE (VALUE as JSON when it parses)."),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Machine-readable output, one JSON object per line.")
]


def _emit(row: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(row) + "\n")
    sys.stdout.flush()


def _providers(name: str | None, settings: list[str] | None) -> list[NodeProvider[Any]]:
    if name is None and settings:
        raise ConfigError("--setting needs --provider")
    names = [name] if name else provider_names()
    return [provider_class(n).from_settings(**_parse_settings(settings)) for n in names]


async def _find(node_id: str, name: str | None, settings: list[str] | None) -> NodeHandle:
    """Attach to ``node_id`` with the named provider, or whichever provider has it."""
    for provider in _providers(name, settings):
        try:
            return await provider.attach(node_id)
        except NodeGoneError:
            continue
        except ProviderError:
            if name:
                raise
    raise NodeGoneError(f"no node {node_id}" + (f" in provider {name!r}" if name else ""))


@app.command()
def provision(  # noqa: PLR0917 - one parameter per command-line option
    provider: Annotated[str, typer.Option("--provider", "-p", help="Provider name.")],
    setting: SettingOption = None,
    image: Annotated[str | None, typer.Option(help="Image (sets the provider setting 'image').")] = None,
    ttl: Annotated[float, typer.Option(help="Hard lifetime in hours; 0: none.")] = 24,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="Label KEY=VALUE. Repeatable.")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="Node environment NAME or NAME=VALUE.")
    ] = None,
    owner: Annotated[
        str | None, typer.Option(help="Owner label; default cli:USER@HOST, reaped only on expiry.")
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Provision a node and print its id. It lives until destroyed or its lifetime ends."""
    with _errors():
        settings = _parse_settings(setting) | ({"image": image} if image else {})
        config = NodeConfig(
            ttl=timedelta(hours=ttl) if ttl > 0 else None,
            labels=dict(_parse_pair(item, "--label") for item in label or []),
            env=_parse_env(env),
            # This process ends right away: name an owner a reaper will not think is gone.
            owner=owner or f"cli:{getpass.getuser()}@{socket.gethostname()}",
        )

        async def make() -> NodeHandle:
            with err.status(f"provisioning a {provider} node...") if not json_output else nullcontext():
                return await provider_class(provider).from_settings(**settings).provision(config)

        node = anyio.run(make)
    if json_output:
        _emit({"node_id": node.node_id, "provider": node.provider, "labels": dict(node.labels)})
    else:
        out.print(node.node_id)


def _parse_pair(item: str, option: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"{option} takes KEY=VALUE, got {item!r}")
    return key, value


@app.command("list")
def list_nodes(
    provider: ProviderOption = None, setting: SettingOption = None, json_output: JsonOption = False
) -> None:
    """List nodes (of every installed provider, or of one)."""

    async def gather() -> tuple[list[NodeInfo], list[str]]:
        found, problems = [], []
        for each in _providers(provider, setting):
            try:
                found += await each.list_nodes()
            except ProviderError as error:
                if provider:
                    raise
                problems.append(f"{each.name}: {error}")
        return found, problems

    with _errors():
        nodes, problems = anyio.run(gather)
    for problem in problems:
        err.print(f"[yellow]warning:[/] {problem}")
    if json_output:
        for info in nodes:
            _emit(
                {
                    "node_id": info.node_id,
                    "provider": info.provider,
                    "state": info.state,
                    "labels": dict(info.labels),
                }
            )
        return
    table = Table("node", "provider", "state", "owner", "session", "expires")
    for info in nodes:
        table.add_row(
            info.node_id,
            info.provider,
            info.state,
            info.labels.get(LABEL_OWNER, ""),
            info.labels.get(LABEL_SESSION_ID, ""),
            info.labels.get(LABEL_EXPIRES_AT, "never"),
        )
    out.print(table)


@app.command("exec")
def exec_command(  # noqa: PLR0917 - one parameter per command-line option
    node_id: Annotated[str, typer.Argument(metavar="NODE", help="Node id.")],
    command: Annotated[list[str], typer.Argument(help="Command and arguments (after --).")],
    provider: ProviderOption = None,
    setting: SettingOption = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="NAME or NAME=VALUE for the process.")
    ] = None,
    cwd: Annotated[str | None, typer.Option(help="Working directory on the node.")] = None,
) -> None:
    """Run a command on a node, streaming stdin and stdout/stderr; exit with its status."""
    with _errors():
        options = SpawnOptions(command[0], command[1:], cwd=cwd, env=_parse_env(env))
        code = anyio.run(_exec, node_id, provider, setting, options)
    raise typer.Exit(code)


async def _exec(node_id: str, provider: str | None, setting: list[str] | None, options: SpawnOptions) -> int:
    node = await _find(node_id, provider, setting)
    stdin, stdout, stderr = (
        anyio.wrap_file(f) for f in (sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer)
    )
    async with await node.spawn(options) as process:

        async def feed() -> None:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                while chunk := await stdin.read1(65536):
                    await process.stdin.send(chunk)
            await process.stdin.aclose()

        async def copy(source: ByteReceiveStream, sink: AsyncFile[bytes]) -> None:
            async for chunk in source:
                await sink.write(chunk)
                await sink.flush()

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            async with anyio.create_task_group() as outputs:
                outputs.start_soon(copy, process.stdout, stdout)
                outputs.start_soon(copy, process.stderr, stderr)
            code = await process.wait()
            tg.cancel_scope.cancel()  # the process is done: stop waiting for our stdin
    return code


@app.command()
def destroy(
    node_id: Annotated[str, typer.Argument(metavar="NODE", help="Node id.")],
    provider: ProviderOption = None,
    setting: SettingOption = None,
    json_output: JsonOption = False,
) -> None:
    """Destroy a node and everything on it."""

    async def remove() -> NodeHandle:
        node = await _find(node_id, provider, setting)
        await node.destroy()
        return node

    with _errors():
        node = anyio.run(remove)
    if json_output:
        _emit({"node_id": node.node_id, "provider": node.provider, "destroyed": True})
    else:
        out.print(f"destroyed {node.node_id} ({node.provider})")


@app.command()
def gc(  # noqa: PLR0917 - one parameter per command-line option
    provider: ProviderOption = None,
    setting: SettingOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed.")] = False,
    settle: Annotated[
        float, typer.Option(help="Keep looking this many seconds for nodes still being made by dead owners.")
    ] = 0.0,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Remove every node that has expired or whose owner is gone; live owners' nodes stay,
    and so do nodes the store holds (kept for a paused run, or in use). Runs of dead control
    planes are reconciled first."""

    async def collect() -> tuple[list[NodeInfo], list[str]]:
        reaped: list[NodeInfo] = []
        problems: list[str] = []
        async with await Store.open(store) as opened, Orchestrator(opened, reconcile_interval=0) as plane:
            if not dry_run:
                report = await plane.reconcile()
                problems += [f"node {node_id}: {why}" for node_id, why in report.failed]
            for each in _providers(provider, setting):
                try:
                    garbage = await plane.collect_garbage(each, dry_run=dry_run, settle=settle)
                except ProviderError as error:
                    problems.append(f"{each.name}: {error}")
                    continue
                reaped += garbage.reaped
                problems += [f"{each.name}: node {info.node_id}: {why}" for info, why in garbage.failed]
        return reaped, problems

    with _errors():
        reaped, problems = anyio.run(collect)
    verb = "would remove" if dry_run else "removed"
    for info in reaped:
        if json_output:
            _emit({"node_id": info.node_id, "provider": info.provider, "removed": not dry_run})
        else:
            out.print(f"{verb} {info.node_id} ({info.provider}, owner {info.labels.get(LABEL_OWNER, '?')})")
    if not json_output and not reaped:
        out.print("nothing to remove")
    if problems:
        _fail("; ".join(problems))


def main() -> None:
    """Entry point of the ``nodeprov`` script."""
    app()
