"""``nodeprov checkpoint``, ``checkpoints`` and ``diff`` as processes, on a run this test's
control plane drives (the fake agent on a local node): the CLI asks for the checkpoint
through the store, lists it, compares it, and ``nodeprov logs`` tells it. ``nodeprov fork``
and ``rewind`` drive a run of this test's control plane on from one of its checkpoints, as
``nodeprov resume`` does from its pause, and say in one line what is not there to start from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.runs import Orchestrator
from nodeprov.store import Store
from tests.test_run_checkpoints import said
from tests.test_run_forks import first_two_turns, turn

pytestmark = pytest.mark.anyio

Steps = Callable[..., dict[str, Any]]


def checkpoints_url(tmp_path: Path) -> str:
    return (tmp_path / "checkpoints").as_uri()


async def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``nodeprov ARGS`` as a process, on the ``store`` fixture's store and this test's checkpoints."""
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "COLUMNS": "200",
        "NODEPROV_STORE": f"sqlite:///{tmp_path}/runs.db",
        "NODEPROV_CHECKPOINTS": checkpoints_url(tmp_path),
    }
    return await anyio.run_process([sys.executable, "-m", "nodeprov", *args], env=env, check=False)


def agent_args(options: dict[str, Any]) -> list[str]:
    """The fake agent's options (the ``agent`` fixture's) as the CLI's ``--option`` and ``--env``."""
    env = [arg for name, value in options["env"].items() for arg in ("--env", f"{name}={value}")]
    return ["--option", f"cli_path={options['cli_path']}", *env]


async def test_the_cli_checkpoints_a_run_driven_elsewhere_lists_and_compares_its_checkpoints(
    store: Store, agent: Steps, tmp_path: Path
) -> None:
    url = checkpoints_url(tmp_path)

    async def nodeprov(*args: str) -> str:
        done = await run_cli(tmp_path, *args)
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


async def test_the_cli_forks_a_paused_run_from_its_first_checkpoint_into_a_run_of_its_own(
    store: Store, agent: Steps, tmp_path: Path
) -> None:
    async with Orchestrator(store, checkpoints=checkpoints_url(tmp_path)) as plane:
        original, _ = await first_two_turns(plane, agent, tmp_path)
        first = (await plane.checkpoints.of_run(original.id))[0]
    fork = ["fork", original.id, "--checkpoint", first.id, "--message", "fork turn", "--json"]
    with anyio.fail_after(120):
        done = await run_cli(tmp_path, *fork, *agent_args(turn(agent, "fork", stall=False)))
        assert done.returncode == 0, done.stderr.decode()
        events = [json.loads(line) for line in done.stdout.decode().splitlines()]
        (fork_id,) = {event["run_id"] for event in events}
        status = await run_cli(tmp_path, "status", fork_id, "--json")
        listed = await run_cli(tmp_path, "checkpoints", fork_id)
    assert fork_id != original.id
    started = next(event for event in events if event["type"] == "run.started")
    assert started["checkpoint"] == first.id
    said = [event["message"].get("text") for event in events if event["type"] == "agent.message"]
    assert "turn one | fork turn" in said  # the conversation as it stood at turn one
    assert events[-1]["type"] == "run.finished"
    assert events[-1]["outcome"] == "ok"
    shown = json.loads(status.stdout)
    assert (shown["forked_from"], shown["forked_at"], shown["state"]) == (original.id, first.id, "finished")
    assert " fork " in listed.stdout.decode()  # the reason of the checkpoint it began at
    record = await store.run(original.id)
    assert record is not None
    assert (record.state, record.forked_from) == ("paused", None)  # the original, untouched


async def test_the_cli_rewinds_a_paused_run_to_its_first_checkpoint(
    store: Store, agent: Steps, tmp_path: Path
) -> None:
    async with Orchestrator(store, checkpoints=checkpoints_url(tmp_path)) as plane:
        original, _ = await first_two_turns(plane, agent, tmp_path)
        before = await plane.checkpoints.of_run(original.id)
    rewind = ["rewind", original.id, "--checkpoint", before[0].id, "--message", "again"]
    with anyio.fail_after(120):
        done = await run_cli(tmp_path, *rewind, *agent_args(turn(agent, "again", stall=False)))
    assert done.returncode == 0, done.stderr.decode()
    shown = done.stdout.decode()
    assert f"run {original.id}\n" in shown  # the run itself, not a new one
    assert f", from checkpoint {before[0].id} of run {original.id}" in shown
    assert "turn one | again" in shown
    after = await store.checkpoints.of_run(original.id)
    assert [(record.reason, record.parent) for record in after[len(before) :]] == [
        ("rewind", before[0].id),
        ("turn", after[len(before)].id),  # the turn it ended, on the rewound workspace
    ]
    record = await store.run(original.id)
    assert record is not None
    assert (record.state, record.outcome, record.forked_from) == ("finished", "ok", None)


async def test_the_cli_says_in_one_line_there_is_no_run_or_checkpoint_to_fork_or_rewind(
    store: Store, agent: Steps, tmp_path: Path
) -> None:
    async with Orchestrator(store, checkpoints=checkpoints_url(tmp_path)) as plane:
        run = await plane.start(
            "stall",
            provider="local",
            provider_settings={"root": str(tmp_path / "nodes")},
            permission="edit",
            checkpoint="off",  # none taken, at the pause neither
            options=agent({"text": "up"}, {"stall": True}),
        )
        with anyio.fail_after(60):
            await said(run, "up")
            await run.pause(keep_node=False)

    async def refused(*args: str) -> tuple[int, str]:
        with anyio.fail_after(60):
            done = await run_cli(tmp_path, *args)
        return done.returncode, done.stderr.decode()

    for call in (["fork", "run-nope"], ["rewind", "run-nope", "--checkpoint", "ck-nope"]):
        assert await refused(*call) == (1, "error: no such run run-nope\n")
    for command in ("fork", "rewind"):
        assert await refused(command, run.id, "--checkpoint", "ck-nope") == (
            1,
            f"error: run {run.id} has no checkpoint ck-nope\n",
        )
    assert await refused("fork", run.id) == (1, f"error: run {run.id} has no checkpoint to fork from\n")
    code, said_ = await refused("rewind", run.id)
    assert code == 2
    assert "Missing option '--checkpoint'" in said_
    assert await store.runs() == [await store.run(run.id)]  # nothing was started
