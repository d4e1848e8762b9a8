"""The ``agents`` command: installed agents, their CLIs, models and routing."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
import typer
from rich.text import Text

from ..errors import NodeprovError
from .app import SettingOption, app, errors, parse_settings, summary
from .render import emit, print_table

__all__ = ["agents"]

_CHECK_TIMEOUT = 120.0  # a node provisioned to look for the CLIs in its image


@app.command(short_help=summary("agents"))
def agents(
    provider: Annotated[
        str | None,
        typer.Option(
            "--provider",
            "-p",
            help="Also look for each agent's CLI on a new node of this provider (its image).",
        ),
    ] = None,
    setting: SettingOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object per agent.")] = False,
) -> None:
    """List installed agents: whether each one's CLI is found here (and on a node, with
    --provider), the model names routed to it, its capabilities and models."""
    from ..agents.registry import agent_names, describe_agent  # not needed for --help

    with errors():
        rows = [describe_agent(name) for name in agent_names()]
        if provider is not None:
            found = anyio.run(_on_node, provider, parse_settings(setting), [row["cli_name"] for row in rows])
            for row in rows:
                row["node_cli"] = found.get(row["cli_name"])
    if json_output:
        for row in rows:
            emit(row)
        return
    columns = ["agent", "cli here", *(["cli on node"] if provider else []), "routes", "capabilities"]
    print_table(
        columns,
        [
            [
                row["name"] + (" (default)" if row["default"] else ""),
                row["local_cli"] or _NOT_FOUND,
                *([row["node_cli"] or _NOT_FOUND] if provider else []),
                ", ".join(row["model_patterns"]),
                ", ".join(k for k, v in row["capabilities"].items() if v),
            ]
            for row in rows
        ],
        ids=("agent",),
    )


_NOT_FOUND = Text("not found", style="red")


async def _on_node(provider: str, settings: dict[str, Any], names: list[str]) -> dict[str, str]:
    """Where each named CLI is on a new node's PATH (``command -v``); the node is destroyed."""
    from ..fleet import make_provider
    from ..spawn import SpawnOptions

    made = make_provider(provider, settings)
    found: dict[str, str] = {}
    with anyio.fail_after(_CHECK_TIMEOUT):
        async with await made.provision() as node:
            for name in names:
                try:
                    async with await node.spawn(
                        SpawnOptions("sh", ["-c", 'command -v "$1"', "sh", name])
                    ) as look:
                        await look.stdin.aclose()
                        said = b"".join([chunk async for chunk in look.stdout])
                        if await look.wait() == 0:
                            found[name] = said.decode(errors="replace").strip()
                except NodeprovError:
                    continue
    return found
