"""The ``pool`` commands: warm pools of nodes a run claims in milliseconds (``create``, ``ls``,
``rm``, ``keep``; ``nodeprov run --pool NAME`` claims from one). See :mod:`nodeprov.runs.pools`.

A pool is kept filled by whichever control plane keeps pools (``nodeprov serve``, ``nodeprov
pool keep``, and a ``nodeprov run --pool`` while its run lasts, for its own pool); ``create``
fills it once before it returns."""

from __future__ import annotations

import signal
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from .app import (
    JsonOption,
    SettingOption,
    StoreOption,
    app,
    checkpoints,
    commands,
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
    from ..runs import Orchestrator, PoolStatus
    from ..store import Store

__all__ = ["create", "keep", "ls", "pool_app", "rm", "shipped_clis"]

pool_app = commands(
    short_help=summary("pool"),
    name="pool",
    no_args_is_help=True,
    help="Warm pools: nodes made before a run asks, claimed by `nodeprov run --pool NAME` in milliseconds.",
)
app.add_typer(pool_app)


def _plane(store: Store, keep: bool | list[str]) -> Orchestrator:
    from ..fleet import provider_settings_from_env
    from ..runs import Orchestrator  # not needed for --help

    return Orchestrator(
        store,
        provider_settings=provider_settings_from_env(None),
        keep_pools=keep,
        poll_interval=0.1,
        retention=retention(),
        checkpoints=checkpoints(),
    )


def shipped_clis() -> dict[str, str]:
    """This machine's agent CLIs, by the name a node's tools give them: what a pool of nodes
    on this machine carries, so that any agent's run can claim from it."""
    from ..agents.registry import agent_class, agent_names

    found = {}
    for name in agent_names():
        agent = agent_class(name)
        cli = agent.local_cli()
        if cli is not None:
            found[agent.cli_name] = cli
    return found


@pool_app.command(short_help="Make a warm pool and fill it.")
def create(  # noqa: PLR0917 - one parameter per command-line option
    name: Annotated[str, typer.Argument(help="The pool's name: lowercase letters, digits and '-'.")],
    provider: Annotated[str, typer.Option("--provider", "-p", help="Provider name.")] = "local",
    setting: SettingOption = None,
    image: Annotated[str | None, typer.Option(help="Image (sets the provider setting 'image').")] = None,
    size: Annotated[int, typer.Option(help="Ready nodes to keep.")] = 2,
    max_age: Annotated[float, typer.Option(help="Seconds a ready node waits at most; then replaced.")] = 3600,
    refill_concurrency: Annotated[int, typer.Option(help="Nodes made at once.")] = 2,
    ttl: Annotated[float, typer.Option(help="Each node's hard lifetime in hours; 0: none.")] = 24,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="Label KEY=VALUE. Repeatable.")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="Node environment NAME or NAME=VALUE.")
    ] = None,
    ship_cli: Annotated[
        bool | None,
        typer.Option(
            help="Make this machine's agent CLIs available on the nodes, as `nodeprov run --ship-cli`. "
            "Default: on where the provider's nodes are on this machine (local)."
        ),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Fill the pool before returning.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the pool to fill.")] = 600,
    store: StoreOption = None,
    json_output: JsonOption = False,
) -> None:
    """Make a warm pool and (unless --no-wait) fill it. Exits 1 when its nodes cannot be made."""
    from ..fleet import settings_from_env
    from ..node import NodeConfig
    from ..registry import provider_class
    from ..runs import Pool

    with errors():
        settings = settings_from_env(provider, parse_settings(setting) | ({"image": image} if image else {}))
        ships = provider_class(provider).on_this_host if ship_cli is None else ship_cli
        pool = Pool(
            name=name,
            provider=provider,
            provider_settings=settings,
            node_config=NodeConfig(
                ttl=timedelta(hours=ttl) if ttl > 0 else None,
                labels=dict(parse_pair(item, "--label") for item in label or []),
                env=parse_env(env),
                tools=shipped_clis() if ships else {},
            ),
            size=size,
            max_age=max_age,
            refill_concurrency=refill_concurrency,
        )

        async def make() -> PoolStatus:
            async with await open_store(store) as opened, _plane(opened, [name] if wait else False) as plane:
                status = await plane.pools.create(pool)
                if not wait:
                    return status
                with anyio.fail_after(timeout):
                    while status.ready < pool.size and status.error is None:
                        await anyio.sleep(0.1)
                        status = await plane.pools.get(name)
                return status

        status = anyio.run(make)
    _show([status], json_output)
    if status.error is not None:
        fail(f"pool {name}: its nodes could not be made: {status.error}")


@pool_app.command(short_help="List warm pools and their nodes.")
def ls(store: StoreOption = None, json_output: JsonOption = False) -> None:
    """List the pools: ready and starting nodes, who keeps each, and why a refill failed."""

    async def load() -> list[PoolStatus]:
        async with await open_store(store) as opened, _plane(opened, False) as plane:
            return await plane.pools.list()

    with errors():
        statuses = anyio.run(load)
    _show(statuses, json_output)


@pool_app.command(short_help="Remove a warm pool and its nodes.")
def rm(
    name: Annotated[str, typer.Argument(help="The pool.")],
    wait: Annotated[float, typer.Option(help="Seconds to wait for its nodes to go.")] = 120,
    store: StoreOption = None,
) -> None:
    """Remove a pool: no run claims from it any more, and its nodes are destroyed."""

    async def remove() -> bool:
        async with await open_store(store) as opened, _plane(opened, [name]) as plane:
            return await plane.pools.remove(name, wait=wait)

    with errors():
        gone = anyio.run(remove)
    if not gone:
        fail(f"pool {name} is being removed: its keeper destroys its last nodes")
    err.print(f"removed pool {name}", soft_wrap=True, markup=False)


@pool_app.command(short_help="Keep warm pools filled until stopped.")
def keep(
    names: Annotated[list[str] | None, typer.Argument(help="The pools to keep; default: all.")] = None,
    store: StoreOption = None,
) -> None:
    """Keep pools filled until Ctrl-C (SIGINT, SIGTERM): what `nodeprov serve` does beside its API."""

    async def keep_them() -> None:
        async with await open_store(store) as opened, _plane(opened, names or True):
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
                err.print(
                    f"keeping {', '.join(names) if names else 'every'} pool; Ctrl-C stops", markup=False
                )
                async for _ in signals:
                    return

    with errors():
        anyio.run(keep_them)


def _show(statuses: list[PoolStatus], json_output: bool) -> None:
    if json_output:
        for status in statuses:
            emit(status.as_json())
        return
    if not statuses:
        out.print("no pools", soft_wrap=True)
        return
    print_table(
        ["pool", "provider", "size", "ready", "starting", "max age", "kept by", "error"],
        [
            [
                s.pool.name,
                s.pool.provider,
                str(s.pool.size),
                str(s.ready),
                str(s.starting),
                f"{s.pool.max_age:g} s",
                _keeper(s),
                f"{s.error} (again in {s.retry_in:.0f} s)" if s.error and s.retry_in else s.error or "",
            ]
            for s in statuses
        ],
        ids=("pool",),
    )


def _keeper(status: PoolStatus) -> str:
    if status.holder is None:
        return "nobody yet"
    who = status.holder_name or status.holder
    return who + ("" if status.held else " (gone)" if status.held is False else " (unknown)")
