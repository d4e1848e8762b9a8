"""A canary secret, given as a provider setting and as an MCP server's env, reaches the agent's
own environment and nowhere else: not the container's configuration or log, not an exec's
inspection, not a process's arguments, not the store, the events or the debug logs."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from pathlib import Path

import apsw
import docker
import pytest

from nodeprov import LABEL_NODE_ID
from nodeprov.runs import Orchestrator
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, unique_marker

from .agents import require_claude_cli, run_options, until_tool_runs

pytestmark = pytest.mark.anyio


def _engine_views(client: docker.DockerClient, node_id: str) -> dict[str, str]:
    """What the engine tells anyone with its socket about a node: the container's inspection
    and log, and the inspection of every exec it ran."""
    views: dict[str, str] = {}
    for summary in client.api.containers(all=True, filters={"label": f"{LABEL_NODE_ID}={node_id}"}):
        inspected = client.api.inspect_container(summary["Id"])
        views[f"inspect {node_id}"] = json.dumps(inspected)
        views[f"logs {node_id}"] = client.api.logs(summary["Id"]).decode(errors="replace")
        for exec_id in inspected.get("ExecIDs") or []:
            views[f"exec {exec_id}"] = json.dumps(client.api.exec_inspect(exec_id))
    return views


def _database_text(path: Path) -> str:
    db = apsw.Connection(str(path))  # the store's own SQLite: never two copies on one file
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(repr(row) for table in tables for row in db.execute(f"SELECT * FROM {table}"))
    finally:
        db.close()


async def test_a_canary_secret_reaches_only_the_agents_environment(
    tmp_path: Path,
    scripted_model: ScriptedModel,
    base_image: str,
    docker_client: docker.DockerClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    require_claude_cli()
    caplog.set_level(logging.DEBUG)
    canary = f"canary-{secrets.token_hex(12)}"
    digest = hashlib.sha256(canary.encode()).hexdigest()
    marker = unique_marker()
    # The tool proves the canary is in the agent's environment without naming it.
    check = f'[ "$(printf %s "$SETTING_TOKEN" | sha256sum | cut -c1-64)" = {digest} ] && sleep {marker}'
    scripted_model.extend([ToolUse("Bash", {"command": check}), Text("done")])
    settings = {
        "image": base_image,
        "network_mode": "host",
        "pull": "never",
        "env": {"SETTING_TOKEN": canary},
    }
    options = run_options(
        scripted_model,
        mcp_servers={"db": {"type": "stdio", "command": "true", "env": {"MCP_TOKEN": canary}}},
    )
    database = tmp_path / "runs.db"
    seen: dict[str, str] = {}
    async with await Store.open(f"sqlite:///{database}") as store, Orchestrator(store) as orchestrator:
        run = await orchestrator.start("go", provider="docker", provider_settings=settings, options=options)
        await until_tool_runs(marker)
        record = await store.run(run.id)
        assert record is not None
        assert record.node_id is not None
        seen.update(_engine_views(docker_client, record.node_id))
        seen["process arguments"] = "\n".join(host_processes_matching(canary))
        snapshot = await run.pause("human", "check", keep_node=True)
        scripted_model.extend([Text("back")])
        resumed = await orchestrator.resume(
            snapshot.token, options=options, provider_settings={"env": {"SETTING_TOKEN": canary}}
        )
        assert await resumed.wait() == "ok", resumed.error
        seen["events"] = "\n".join(event.body for event in await store.events(run.id, limit=100_000))
    seen["store"] = _database_text(database)
    seen["debug logs"] = caplog.text
    assert [where for where, text in seen.items() if canary in text] == []
    assert len([where for where in seen if where.startswith("exec ")]) >= 1  # the views were taken
