"""`nodeprov run` pauses on Ctrl-C whenever it comes once the run is being started, right as
it starts too, and keeps the node with --keep-node (the handler was installed only after the
run had started: a Ctrl-C just before exited 130 and destroyed the node)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from nodeprov.cli.drive import RunRequest, drive_run
from nodeprov.runs import NodeReady, Orchestrator, Run
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command

pytestmark = pytest.mark.anyio


async def test_ctrl_c_right_as_the_run_starts_pauses_it_and_keeps_its_node(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    steps = json.dumps([{"stall": True}])
    request = RunRequest(keep_node=True, store=url, json_output=True)
    options = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": steps}}

    async def start(orchestrator: Orchestrator) -> Run:
        run = await orchestrator.start(
            "task", provider="fake", provider_settings={"root": str(tmp_path / "nodes")}, options=options
        )
        async for event in run.events():
            if isinstance(event, NodeReady):
                break
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, before `run` has even returned
        return run

    assert await drive_run(request, start) == "paused"
    async with await Store.open(url) as store:
        (record,) = await store.runs()
        (snapshot,) = await store.snapshots(record.id)
    assert (record.state, snapshot.pause_kind, snapshot.node_kept) == ("paused", "human", True)
    assert [p.name for p in (tmp_path / "nodes").iterdir()] == [snapshot.node_id]
