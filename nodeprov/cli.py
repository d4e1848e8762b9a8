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
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
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
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    query,
)
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from .claude import NodeTransport
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
from .spawn import SpawnOptions
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
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--setting takes KEY=VALUE, got {item!r}")
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


def _jsonable(value: Any) -> Any:
    """SDK messages and content blocks as JSON, each dataclass tagged with its class name."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"kind": type(value).__name__, **fields}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


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


@app.command()
def run(  # noqa: PLR0917 - one parameter per command-line option
    prompt: Annotated[str, typer.Argument(help="The task for the agent.")],
    provider: Annotated[str, typer.Option("--provider", "-p", help="Provider name.")] = "local",
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--setting", "-s", help="Provider setting KEY=VALUE (VALUE as JSON when it parses). Repeatable."
        ),
    ] = None,
    model: Annotated[
        str,
        typer.Option(help="'scripted' for the built-in offline model, else a model name for the real API."),
    ] = "scripted",
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env", "-e", help="Pass NAME (from this environment) or NAME=VALUE to the agent. Repeatable."
        ),
    ] = None,
    permission_mode: Annotated[str, typer.Option(help="Claude Code permission mode.")] = "bypassPermissions",
    max_turns: Annotated[int | None, typer.Option(help="Stop after this many turns.")] = None,
    resume: Annotated[str | None, typer.Option(help="Resume this agent session id.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print events as JSON lines.")] = False,
) -> None:
    """Provision a node, run Claude Code there on PROMPT, print the result, destroy the node."""
    with _errors():
        settings = _parse_settings(setting)
        agent_env = _parse_env(env)
        try:
            request = _RunRequest(
                prompt, provider, settings, model, agent_env, permission_mode, max_turns, resume, json_output
            )
            ok = anyio.run(_run, request)
        except KeyboardInterrupt:
            _fail("interrupted; the node was destroyed", 130)
    raise typer.Exit(0 if ok else 1)


@dataclasses.dataclass(frozen=True)
class _RunRequest:
    prompt: str
    provider: str
    settings: dict[str, Any]
    model: str
    agent_env: dict[str, str]
    permission_mode: str
    max_turns: int | None
    resume: str | None
    json_output: bool


async def _run(request: _RunRequest) -> bool:
    prompt, provider, json_output = request.prompt, request.provider, request.json_output

    def event(kind: str, **fields: Any) -> None:
        if json_output:
            sys.stdout.write(json.dumps({"type": kind, **fields}, default=str) + "\n")
            sys.stdout.flush()

    node_provider = provider_class(provider).from_settings(**request.settings)
    async with _model(request.model, prompt) as (model_env, model_name):
        options = ClaudeAgentOptions(
            env={**model_env, **request.agent_env},
            model=model_name,
            permission_mode=request.permission_mode,  # type: ignore[arg-type]
            max_turns=request.max_turns,
            resume=request.resume,
        )
        with err.status(f"provisioning a {provider} node...") if not json_output else _nothing():
            node: NodeHandle = await node_provider.provision(NodeConfig())
        event("node", state="provisioned", node_id=node.node_id, provider=provider)
        if not json_output:
            out.print(f"[dim]node {node.node_id} ({provider}) provisioned[/]")
        result: ResultMessage | None = None
        async with node:
            transport = NodeTransport.for_node(node, options)
            async for message in query(prompt=prompt, options=options, transport=transport):
                if json_output:
                    event("message", message=_jsonable(message))
                else:
                    _render(message)
                if isinstance(message, ResultMessage):
                    result = message
        event("node", state="destroyed", node_id=node.node_id)
    if result is None:
        raise NodeprovError("the agent ended without a result")
    event(
        "result",
        ok=not result.is_error,
        session_id=result.session_id,
        subtype=result.subtype,
        turns=result.num_turns,
        duration_ms=result.duration_ms,
    )
    if not json_output:
        status = "[green]ok[/]" if not result.is_error else f"[red]{result.subtype}[/]"
        out.print(f"\nresult: {status}  turns: {result.num_turns}  time: {result.duration_ms / 1000:.1f}s")
        out.print(f"session: {result.session_id}")
        out.print(f"[dim]node {node.node_id} destroyed[/]")
    return not result.is_error


@contextmanager
def _nothing() -> Iterator[None]:
    yield


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
            with err.status(f"provisioning a {provider} node...") if not json_output else _nothing():
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
def gc(
    provider: ProviderOption = None,
    setting: SettingOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Remove every node that has expired or whose owner is gone; live owners' nodes stay."""

    async def collect() -> tuple[list[NodeInfo], list[str]]:
        reaped, problems = [], []
        for each in _providers(provider, setting):
            try:
                reaped += await each.collect_garbage(dry_run=dry_run)
            except ProviderError as error:
                problems.append(f"{each.name}: {error}")
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
