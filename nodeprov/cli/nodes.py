"""Node commands: providers, provision, list, exec, destroy, gc, cp."""

from __future__ import annotations

import dataclasses
import getpass
import os
import posixpath
import re
import signal
import socket
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager, nullcontext, suppress
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import anyio.abc
import typer
from anyio import AsyncFile
from anyio.abc import ByteReceiveStream
from rich.markup import escape
from rich.text import Text

from ..errors import ConfigError
from .app import (
    JsonOption,
    NodeOption,
    ProviderOption,
    SettingOption,
    StoreOption,
    app,
    checkpoints,
    errors,
    fail,
    open_store,
    parse_env,
    parse_pair,
    parse_settings,
    retention,
    summary,
)
from .render import emit, err, out, print_table

if TYPE_CHECKING:
    from ..fleet import Readiness
    from ..node import NodeHandle, NodeInfo, NodeProvider
    from ..spawn import SpawnOptions

__all__ = ["cp", "destroy", "exec_command", "gc", "list_nodes", "providers", "provision"]

_CHUNK = 65536
_PROBE_TIMEOUT = 10.0  # a platform that hangs (a Docker engine, an API server) is "not ready"
_NODE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


@app.command(short_help=summary("providers"))
def providers(
    provider: ProviderOption = None,
    setting: SettingOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object per provider.")] = False,
    probe_timeout: Annotated[
        float, typer.Option(help="Seconds a provider's platform has to answer its probe.")
    ] = _PROBE_TIMEOUT,
) -> None:
    """List installed providers and whether each is ready (tools, credentials, platform),
    probed with its settings from the environment (NODEPROV_<PROVIDER>_<SETTING>) and -s."""
    from ..fleet import readiness  # these: not needed for --help
    from ..registry import provider_names

    with errors():
        if provider is None and setting:
            raise ConfigError("--setting needs --provider")
        if not probe_timeout > 0:
            raise ConfigError(f"--probe-timeout must be a positive number of seconds, got {probe_timeout:g}")
        given = parse_settings(setting)

    async def check_all() -> list[Readiness]:
        names = [provider] if provider else provider_names()
        checked: dict[int, Readiness] = {}

        async def check(index: int, name: str) -> None:
            checked[index] = await readiness(name, given, probe_timeout=probe_timeout)

        async with anyio.create_task_group() as tg:  # each probe may take seconds: all at once
            for index, name in enumerate(names):
                tg.start_soon(check, index, name)
        return [checked[index] for index in range(len(names))]

    rows = anyio.run(check_all)
    asked_not_ready = provider is not None and not rows[0].ready
    if json_output:
        for row in rows:
            emit(row.as_json())
        if asked_not_ready:
            raise typer.Exit(1)
        return
    table: list[list[str | Text]] = []
    for row in rows:
        details = [f"{'✓' if r.ok else '✗'} {r.name}: {r.detail}" for r in row.requirements]
        if row.error:
            details.append(f"✗ {row.error}")
        ready = Text("yes") if row.ready else Text("no", style="red")
        table.append([row.name, ready, "\n".join(details) or "-"])
    print_table(["provider", "ready", "requirements"], table, ids=("provider",))
    if asked_not_ready:  # the one asked about cannot make nodes here
        raise typer.Exit(1)


def _given(provider: str | None, setting: list[str] | None) -> dict[str, Any] | None:
    """The ``-s`` settings of the named provider; None for every provider, which take none.

    Raises:
        ConfigError: ``-s`` without ``-p``, or a malformed ``-s``.
    """
    if provider is None:
        if setting:
            raise ConfigError("--setting needs --provider")
        return None
    return parse_settings(setting)


@asynccontextmanager
async def _found(node_id: str, name: str | None, given: dict[str, Any] | None) -> AsyncIterator[NodeHandle]:
    """A handle on ``node_id`` from the named provider, or whichever provider has it (see
    :meth:`Fleet.find`); the providers' connections closed on exit."""
    from ..fleet import Fleet

    async with Fleet() as fleet:
        yield await fleet.find(node_id, name, given)


@app.command(short_help=summary("provision"))
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
    from ..fleet import make_provider
    from ..node import NodeConfig

    with errors():
        made = make_provider(provider, parse_settings(setting) | ({"image": image} if image else {}))
        config = NodeConfig(
            ttl=timedelta(hours=ttl) if ttl > 0 else None,
            labels=dict(parse_pair(item, "--label") for item in label or []),
            env=parse_env(env),
            # This process ends right away: name an owner a reaper will not think is gone.
            owner=owner or f"cli:{getpass.getuser()}@{socket.gethostname()}",
        )

        async def make() -> NodeHandle:
            with err.status(f"provisioning a {provider} node...") if not json_output else nullcontext():
                async with made:
                    return await made.provision(config)

        node = anyio.run(make)
    if json_output:
        emit({"node_id": node.node_id, "provider": node.provider, "labels": dict(node.labels)})
    else:
        out.print(node.node_id, soft_wrap=True)


@app.command("list", short_help=summary("list"))
def list_nodes(
    provider: ProviderOption = None, setting: SettingOption = None, json_output: JsonOption = False
) -> None:
    """List nodes (of every installed provider, or of one)."""
    from ..fleet import Fleet

    async def gather(given: dict[str, Any] | None) -> tuple[list[NodeInfo], list[str], list[str]]:
        async with Fleet() as fleet:
            return await fleet.list_nodes(provider, given)

    with errors():
        nodes, notes, failed = anyio.run(gather, _given(provider, setting))
    _say(notes, failed)
    if json_output:
        for info in nodes:
            emit(
                {
                    "node_id": info.node_id,
                    "provider": info.provider,
                    "state": info.state,
                    "labels": dict(info.labels),
                }
            )
    else:
        _list_table(nodes)
    if failed:
        raise typer.Exit(1)


def _say(notes: list[str], failed: list[str]) -> None:
    for note in notes:
        err.print(f"note: {escape(note)}", soft_wrap=True)
    for failure in failed:
        err.print(f"[yellow]warning:[/] {escape(failure)}", soft_wrap=True)


def _list_table(nodes: list[NodeInfo]) -> None:
    from ..node import LABEL_EXPIRES_AT, LABEL_OWNER, LABEL_SESSION_ID

    print_table(
        ["node", "provider", "state", "owner", "session", "expires"],
        [
            [
                info.node_id,
                info.provider,
                info.state,
                info.labels.get(LABEL_OWNER, ""),
                info.labels.get(LABEL_SESSION_ID, ""),
                info.labels.get(LABEL_EXPIRES_AT, "never"),
            ]
            for info in nodes
        ],
        ids=("node", "session"),
    )


async def _stdin_chunks() -> AsyncGenerator[bytes]:
    """This process's stdin, chunk by chunk, cancellable while it waits: a read blocked in a
    worker thread could not be cancelled, and would hold the exit until stdin's EOF. stdin
    stays blocking (it may share its file description with stdout, on a terminal): a read
    only follows readiness. Files and /dev/null, which epoll refuses, never make a read wait."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # no stdin at all
        return
    pollable = True
    while True:
        if pollable:
            try:
                await anyio.wait_readable(fd)
            except PermissionError:
                pollable = False
        else:
            await anyio.lowlevel.checkpoint()
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return
        yield chunk


@app.command("exec", short_help=summary("exec"))
def exec_command(  # noqa: PLR0917 - one parameter per command-line option
    node_id: NodeOption,
    command: Annotated[list[str], typer.Argument(help="Command and arguments (after --).")],
    provider: ProviderOption = None,
    setting: SettingOption = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="NAME or NAME=VALUE for the process.")
    ] = None,
    cwd: Annotated[str | None, typer.Option(help="Working directory on the node.")] = None,
) -> None:
    """Run a command on a node, streaming stdin and stdout/stderr; exit with its status."""
    from ..spawn import SpawnOptions

    with errors():
        options = SpawnOptions(command[0], command[1:], cwd=cwd, env=parse_env(env))
        code = anyio.run(_exec, node_id, provider, _given(provider, setting), options)
    raise typer.Exit(128 - code if code < 0 else code)  # killed by signal N: 128+N, as a shell says


async def _exec(
    node_id: str, provider: str | None, given: dict[str, Any] | None, options: SpawnOptions
) -> int:
    async with _found(node_id, provider, given) as node:
        return await _exec_on(node, options)


async def _exec_on(node: NodeHandle, options: SpawnOptions) -> int:
    """Run ``options`` on ``node``, relaying this process's stdin and the process's stdout and
    stderr; its exit status. Ctrl-C, SIGTERM or SIGHUP (a terminal closed, `timeout`, a CI
    cancel) stop the process on the node, as its stop policy says but with no grace for its
    stdin, and return ``-SIGNAL``: never does this end and leave it running there."""
    stdout, stderr = (anyio.wrap_file(f) for f in (sys.stdout.buffer, sys.stderr.buffer))
    stopped_by: list[int] = []
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with await node.spawn(options) as process:

            async def feed() -> None:
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    async with aclosing(_stdin_chunks()) as chunks:
                        async for chunk in chunks:
                            await process.stdin.send(chunk)
                await process.stdin.aclose()

            async def copy(source: ByteReceiveStream, sink: AsyncFile[bytes]) -> None:
                async for chunk in source:
                    await sink.write(chunk)
                    await sink.flush()

            async def stop_on_a_signal(tg: anyio.abc.TaskGroup) -> None:
                async for signum in signals:
                    stopped_by.append(signum)
                    process.stop_policy = dataclasses.replace(process.stop_policy, eof_grace=0.0)
                    tg.cancel_scope.cancel()  # leaving `async with process` stops it
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                tg.start_soon(stop_on_a_signal, tg)
                async with anyio.create_task_group() as outputs:
                    outputs.start_soon(copy, process.stdout, stdout)
                    outputs.start_soon(copy, process.stderr, stderr)
                code = await process.wait()
                tg.cancel_scope.cancel()  # the process is done: stop waiting for our stdin
    return -stopped_by[0] if stopped_by else code


def _remote(arg: str) -> tuple[str, str] | None:
    """(node, path) for NODE:PATH; None for a local path or '-' (a local path with ':' in
    it is written ./a:b, as for docker cp)."""
    node, sep, path = arg.partition(":")
    return (node, path) if sep and _NODE_ID.fullmatch(node) else None


@app.command(short_help=summary("cp"))
def cp(
    src: Annotated[str, typer.Argument(metavar="SRC", help="NODE:PATH, a local path, or - (stdin).")],
    dst: Annotated[str, typer.Argument(metavar="DST", help="NODE:PATH, a local path, or - (stdout).")],
    provider: ProviderOption = None,
    setting: SettingOption = None,
) -> None:
    """Copy a file between this host and a node, like `docker cp`: exactly one of SRC and
    DST is NODE:PATH. Streamed; a local file's mode is kept, stdin arrives 0600."""
    with errors():
        source, target = _remote(src), _remote(dst)
        if (source is None) == (target is None):
            raise ConfigError("cp: exactly one of SRC and DST must be NODE:PATH")
        given = _given(provider, setting)
        try:
            if target is not None:
                anyio.run(_upload, src, *target, provider, given)
            elif source is not None:
                anyio.run(_download, *source, dst, provider, given)
        except OSError as error:  # the local side
            fail(f"{error.filename or 'stdio'}: {error.strerror or error}")


async def _file_chunks(file: AsyncFile[bytes]) -> AsyncGenerator[bytes]:
    while chunk := await file.read(_CHUNK):
        yield chunk


async def _upload(
    local: str, node_id: str, path: str, provider: str | None, given: dict[str, Any] | None
) -> None:
    async with _found(node_id, provider, given) as node:
        if local == "-":
            async with aclosing(_stdin_chunks()) as chunks:
                await node.write_file(path, chunks, mode=0o600)
            return
        if path.endswith("/"):
            path += os.path.basename(local)
        async with await anyio.open_file(local, "rb") as file:
            mode = os.fstat(file.wrapped.fileno()).st_mode & 0o777
            async with aclosing(_file_chunks(file)) as chunks:
                await node.write_file(path, chunks, mode=mode)


async def _download(
    node_id: str, path: str, local: str, provider: str | None, given: dict[str, Any] | None
) -> None:
    async with _found(node_id, provider, given) as node:
        await _download_from(node, path, local)


async def _download_from(node: NodeHandle, path: str, local: str) -> None:
    async with node.read_file(path) as chunks:  # a missing file fails here, before anything local
        if local == "-":
            stdout = anyio.wrap_file(sys.stdout.buffer)
            async for chunk in chunks:
                await stdout.write(chunk)
            await stdout.flush()
            return
        target = anyio.Path(local)
        if await target.is_dir():
            target /= posixpath.basename(node.node_path(path))
        async with await anyio.open_file(target, "wb") as file:
            try:
                async for chunk in chunks:
                    await file.write(chunk)
            except BaseException:
                with anyio.CancelScope(shield=True), suppress(OSError):
                    await target.unlink()  # a cut copy is no copy
                raise


@app.command(short_help=summary("destroy"))
def destroy(
    node_id: NodeOption,
    provider: ProviderOption = None,
    setting: SettingOption = None,
    json_output: JsonOption = False,
) -> None:
    """Destroy a node and everything on it."""

    async def remove(given: dict[str, Any] | None) -> NodeHandle:
        async with _found(node_id, provider, given) as node:
            await node.destroy()
            return node

    with errors():
        node = anyio.run(remove, _given(provider, setting))
    if json_output:
        emit({"node_id": node.node_id, "provider": node.provider, "destroyed": True})
    else:
        out.print(f"destroyed {node.node_id} ({node.provider})", soft_wrap=True)


@app.command(short_help=summary("gc"))
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
    and so do nodes the store holds (kept for a paused run, or in use) until their lifetime
    ends. Runs of dead control planes are reconciled first, with the secret settings of
    NODEPROV_<PROVIDER>_* (and -s, for --provider). Providers not set up here are skipped
    with a note; the exit status is 1 when a provider or a removal failed."""
    from ..fleet import Fleet, provider_settings_from_env
    from ..node import LABEL_OWNER

    async def collect(given: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[str], list[str]]:
        removed: list[dict[str, Any]] = []
        failed: list[str] = []
        from ..runs import Orchestrator  # only gc loads it (and the SDK)

        secrets = provider_settings_from_env(provider, given)
        async with (
            await open_store(store) as opened,
            Orchestrator(
                opened,
                reconcile_interval=0,
                provider_settings=secrets,
                retention=retention(),
                checkpoints=checkpoints(),
            ) as plane,
            Fleet() as fleet,
        ):
            if not dry_run:
                report = await plane.reconcile()
                removed += [{"node_id": node_id, "why": "its run is over"} for node_id in report.destroyed]
                failed += [f"node {node_id}: {why}" for node_id, why in report.failed]

            async def reap(each: NodeProvider[Any]) -> tuple[list[dict[str, Any]], list[str]]:
                garbage = await plane.collect_garbage(each, dry_run=dry_run, settle=settle)
                reaped = [
                    {
                        "node_id": info.node_id,
                        "provider": info.provider,
                        "why": f"owner {info.labels.get(LABEL_OWNER, '?')}",
                    }
                    for info in garbage.reaped
                ]
                return reaped, [f"{each.name}: node {info.node_id}: {why}" for info, why in garbage.failed]

            reaped, notes, failed_there = await fleet.across(reap, provider, given)
        return removed + reaped, notes, failed + failed_there

    with errors():
        removed, notes, failed = anyio.run(collect, _given(provider, setting))
    _say(notes, [])
    verb = "would remove" if dry_run else "removed"
    for each in removed:
        if json_output:
            emit({**each, "removed": not dry_run})
        else:
            where = f"{each['provider']}, " if "provider" in each else ""
            out.print(f"{verb} {each['node_id']} ({where}{escape(each['why'])})", soft_wrap=True)
    if not json_output and not removed:
        out.print("nothing to remove")
    if failed:
        fail("; ".join(failed))
