"""``nodeprov checkpoint``, ``checkpoints`` and ``diff`` as processes, on a run this test's
control plane drives (the fake agent on a local node): the CLI asks for the checkpoint
through the store, lists it, compares it, and ``nodeprov logs`` tells it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.runs import Orchestrator
from nodeprov.store import Store
from tests.test_run_checkpoints import said

pytestmark = pytest.mark.anyio


async def test_the_cli_checkpoints_a_run_driven_elsewhere_lists_and_compares_its_checkpoints(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    url = (tmp_path / "checkpoints").as_uri()
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "COLUMNS": "200",
        "NODEPROV_STORE": f"sqlite:///{tmp_path}/runs.db",
        "NODEPROV_CHECKPOINTS": url,
    }

    async def nodeprov(*args: str) -> str:
        done = await anyio.run_process([sys.executable, "-m", "nodeprov", *args], env=env, check=False)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    script = [{"write_file": ["a.txt", "one\n"]}, {"text": "first"}, {"wait_for": "go"}]
    script += [{"write_file": ["a.txt", "two\n"]}, {"text": "second"}, {"stall": True}]
    async with Orchestrator(store, checkpoints=url, poll_interval=0.05) as plane:
        run = await plane.start(
            "work",
            provider="local",
            provider_settings={"root": str(tmp_path / "nodes")},
            permission="edit",
            options=agent(*script),
        )
        with anyio.fail_after(60):
            await said(run, "first")
            first = json.loads(await nodeprov("checkpoint", run.id, "--json"))
        workdir = next((tmp_path / "nodes").rglob("a.txt")).parent
        await anyio.Path(workdir / "go").write_text("")
        with anyio.fail_after(60):
            await said(run, "second")
            second = json.loads(await nodeprov("checkpoint", run.id, "--json"))
            listed = [
                json.loads(line) for line in (await nodeprov("checkpoints", run.id, "--json")).splitlines()
            ]
            table = await nodeprov("checkpoints", run.id)
            shown = await nodeprov("diff", run.id, first["id"], second["id"])
            await run.pause(keep_node=False)
            logs = await nodeprov("logs", run.id)
    assert [(item["id"], item["reason"], item["seq"]) for item in listed[:2]] == [
        (first["id"], "request", 1),
        (second["id"], "request", 2),
    ]
    assert first["changed"]["added"] == 1
    assert first["id"] in table
    assert "~ a.txt" in shown
    assert "+ go" in shown
    assert "-one\n+two\n" in shown
    assert f"checkpoint {first['id']} (request)" in logs
    assert "(pause)" in logs
