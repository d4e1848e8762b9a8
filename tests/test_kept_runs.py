"""Kept agents in runs, with the fake CLI on local nodes (issue 45). A run records where its
agent is kept before the agent starts, so that a control plane killed before the agent said
anything leaves an agent another can take over (before, only its first message recorded
it: until then, nobody could, for the agent's whole grace). An agent its keeper stopped
says why in the run's error."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeConfig
from nodeprov.errors import RunStateError
from nodeprov.runs import Orchestrator
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import wait_until

pytestmark = pytest.mark.anyio


def _fake(tmp_path: Path, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The run options of the fake Claude CLI playing ``steps``."""
    return {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}


@asynccontextmanager
async def _kept_runs(tmp_path: Path) -> AsyncIterator[tuple[Store, Orchestrator]]:
    """A store in ``tmp_path`` and a control plane on it whose agents are kept."""
    async with (
        await Store.open(f"sqlite:///{tmp_path}/runs.db") as store,
        Orchestrator(store, agent_grace=30) as plane,
    ):
        yield store, plane


def _local(tmp_path: Path) -> dict[str, Any]:
    # Named, as on this machine any model but the scripted one must (the fake agent ignores it).
    return {"provider": "local", "provider_settings": {"root": str(tmp_path / "nodes")}, "permission": "edit"}


async def test_a_kept_agent_is_findable_before_it_says_anything(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    async with _kept_runs(tmp_path) as (store, plane):
        options = _fake(tmp_path, [{"wait_for": str(flag)}, {"text": "hi"}])
        run = await plane.start("go", options=options, **_local(tmp_path))

        async def recorded() -> bool:
            record = await store.run(run.id)
            return record is not None and record.agent_keeper is not None

        assert await wait_until(recorded, 30), "the run never said where its agent is kept"
        # The agent has said nothing yet (its "hi" waits for the flag); the CLI's own system
        # messages at the turn's start may be stored already.
        said = [
            message.get("text")
            for event in await store.events(run.id)
            if event.kind == "agent.message"
            and (message := json.loads(event.body)["message"])["kind"] == "text"
        ]
        assert said == []
        flag.touch()
        assert await run.wait() == "ok", run.error


async def test_a_kept_agent_stopped_at_the_nodes_lifetime_says_so(tmp_path: Path) -> None:
    """Before, the run failed with "the agent process exited with status 143"."""
    async with _kept_runs(tmp_path) as (_, plane):
        options = _fake(tmp_path, [{"text": "working"}, {"wait_for": str(tmp_path / "never")}])
        config = NodeConfig(ttl=timedelta(seconds=3))
        run = await plane.start("go", options=options, node_config=config, **_local(tmp_path))
        with anyio.fail_after(60):
            assert await run.wait() == "error"
    assert run.error is not None
    assert "the node reached the end of its lifetime, and its keeper stopped the agent" in run.error


async def test_a_keeper_that_cannot_start_says_why(tmp_path: Path) -> None:
    """Before, a node whose PATH finds nothing failed the run with "the keeper ... is gone"."""
    async with _kept_runs(tmp_path) as (_, plane):
        config = NodeConfig(env={"PATH": "/nonexistent"})
        run = await plane.start("go", options=_fake(tmp_path, []), node_config=config, **_local(tmp_path))
        with anyio.fail_after(60):
            assert await run.wait() == "error"
    assert run.error is not None
    assert "its keeper did not start (no mkdir on the PATH it was given, /nonexistent" in run.error


_DIES_AT_THE_RESULT = """
import os, signal, sys, anyio
from nodeprov.runs import Orchestrator, RunState
from nodeprov.runs import driver
from nodeprov.store import Store

moved = driver.Driver._move

async def dying(self, drive, target, **changes):
    if target is RunState.FINISHING:  # the result is stored: die before the run's end is
        await self._journal.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return await moved(self, drive, target, **changes)

driver.Driver._move = dying
store_url, root, options = sys.argv[1], sys.argv[2], sys.argv[3]

async def main():
    async with await Store.open(store_url) as store:
        async with Orchestrator(store, agent_grace=30, lease_ttl=2) as plane:
            given = __import__("json").loads(options)
            where = {"provider": "local", "provider_settings": {"root": root}, "permission": "edit"}
            run = await plane.start("go", options=given, **where)
            print(run.id, flush=True)
            await run.wait()

anyio.run(main)
"""


async def test_a_take_over_after_the_result_was_stored_ends_the_run_with_it(tmp_path: Path) -> None:
    """Issue 45: a take-over that landed after the turn's result was stored, but before the
    run's end, re-read the agent's output past the result and found no end of the turn."""
    options = _fake(tmp_path, [{"text": "the answer"}])
    url = f"sqlite:///{tmp_path}/runs.db"
    died = await anyio.run_process(
        [sys.executable, "-c", _DIES_AT_THE_RESULT, url, str(tmp_path / "nodes"), json.dumps(options)],
        check=False,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr.decode()[-2000:]
    run_id = died.stdout.decode().split()[0]
    async with await Store.open(url) as store:
        record = await store.run(run_id)
        assert record is not None
        assert record.state == "running"  # died before the run's end
        kinds = [
            json.loads(event.body)["message"].get("kind")
            for event in await store.events(run_id)
            if event.kind == "agent.message"
        ]
        assert "result" in kinds, kinds  # and after its result was stored
        async with Orchestrator(store, agent_grace=30, take_over=False) as plane:

            async def adopted() -> bool:
                try:
                    await plane.adopt(run_id)
                except RunStateError:
                    return False  # its control plane not yet known dead
                return True

            assert await wait_until(adopted, 30)
            with anyio.fail_after(60):
                assert await plane.run(run_id).wait() == "ok"


async def test_a_run_keeps_its_own_grace_and_a_resume_keeps_it_too(tmp_path: Path) -> None:
    """The agent's grace is the run's (stored with it), not its control plane's: a run that
    asks for none is not kept under a control plane that keeps agents, one that asks for 7 s
    is kept for 7 s under one that keeps none, and its resume keeps that unless told."""
    flag = tmp_path / "flag"
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        async with Orchestrator(store, agent_grace=30) as plane:
            options = _fake(tmp_path, [{"text": "hi"}])
            unkept = await plane.start("go", options=options, agent_grace=0, **_local(tmp_path))
            assert await unkept.wait() == "ok", unkept.error
            assert unkept.agent_grace is None
        record = await store.run(unkept.id)
        assert record is not None
        assert (record.agent_grace, record.agent_keeper) == (0.0, None)
        async with Orchestrator(store) as plane:
            options = _fake(tmp_path, [{"text": "working"}, {"wait_for": str(flag)}, {"text": "done"}])
            kept = await plane.start("go", options=options, agent_grace=7, **_local(tmp_path))

            async def keeper_recorded() -> bool:
                found = await store.run(kept.id)
                return found is not None and found.agent_keeper is not None

            assert await wait_until(keeper_recorded, 30), "the run's agent was not kept"
            await kept.pause("human", "for the resume")
            record = await store.run(kept.id)
            assert record is not None
            assert record.agent_grace == 7.0
            flag.touch()
            resumed = await plane.resume_run(kept.id, options=options)
            assert resumed.agent_grace == 7.0
            assert await resumed.wait() == "ok", resumed.error
        record = await store.run(kept.id)
        assert record is not None
        assert record.agent_grace == 7.0
