"""A conversation held as one run (``pause_after_turn``): each turn ends in a pause whose
resume is the next turn, on the same node and agent session; and a pause racing the turn's
end, many times with random delays (the fake agent on the fake provider)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.agents import Result
from nodeprov.errors import RunStateError
from nodeprov.runs import TURN_ENDED, AgentMessage, NodeReady, Orchestrator, RunPaused, RunState
from nodeprov.store import NodeRecordState, Store

from .test_run_races import fake, iterate, pause_or_refusal, settled

pytestmark = pytest.mark.anyio


async def test_each_turn_pauses_and_the_next_resumes_on_the_same_node_and_session(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    async with Orchestrator(store) as plane:
        run = await plane.start(
            "first", options=agent({"text": "one"}), keep_node=True, pause_after_turn=True, **fake(tmp_path)
        )
        assert await run.wait() == "paused"
        events = [event async for event in run.events()]
        [result] = [
            e.message for e in events if isinstance(e, AgentMessage) and isinstance(e.message, Result)
        ]
        assert result.text == "one"
        [paused] = [e for e in events if isinstance(e, RunPaused)]
        assert (paused.pause_kind, paused.reason, paused.node_kept) == ("system", TURN_ENDED, True)
        assert [e.kind for e in events[-2:]] == ["run.paused", "run.finished"]  # the drive's end
        [node] = await store.nodes(states=(NodeRecordState.KEPT,), run_id=run.id)
        session = run.agent_session_id

        second = await plane.resume_run(
            run.id, message="second", options=agent({"text": "two"}), keep_node=True, pause_after_turn=True
        )
        assert await second.wait() == "paused"
        later = [event async for event in second.events()]
        [ready] = [e for e in later if isinstance(e, NodeReady)]
        assert (ready.node_id, ready.reused) == (node.id, True)
        assert second.agent_session_id == session  # the fake agent kept the --resume id

        last = await plane.resume_run(run.id, message="done", options=agent({"text": "three"}))
        assert await last.wait() == "ok"  # a turn that does not say finishes the run
    assert await settled(store, last) is RunState.FINISHED
    assert await store.nodes(states=(NodeRecordState.KEPT, NodeRecordState.LIVE), run_id=run.id) == []
    assert list((tmp_path / "nodes").iterdir()) == []


async def test_a_turn_that_fails_fails_the_run_as_without_pause_after_turn(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    async with Orchestrator(store) as plane:
        run = await plane.start("go", options=agent({"exit": 3}), pause_after_turn=True, **fake(tmp_path))
        assert await run.wait() == "error"


async def test_a_pause_racing_the_turns_end_is_the_one_pause(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    """Whichever lands first, the run is paused once: by the caller (its snapshot returned)
    or at its turn's end (the caller refused); never finished, never failed."""
    async with Orchestrator(store) as plane:

        async def race(rng: random.Random) -> None:
            options = agent({"sleep": rng.uniform(0, 0.05)}, {"text": "done"})
            settings = fake(tmp_path, provision_delay=rng.uniform(0, 0.03))
            run = await plane.start("go", options=options, pause_after_turn=True, **settings)
            await anyio.sleep(rng.uniform(0, 0.3))
            snapshot = await pause_or_refusal(run)
            assert await settled(store, run) is RunState.PAUSED
            [paused] = [e async for e in run.events() if isinstance(e, RunPaused)]
            assert paused.reason == ("race" if snapshot else TURN_ENDED)
            if snapshot is not None:
                assert snapshot.token == paused.token

        await iterate(race)
    assert list((tmp_path / "nodes").iterdir()) == []


async def test_a_released_kept_node_is_destroyed_and_the_next_turn_gets_a_fresh_one(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    async with Orchestrator(store) as plane:
        run = await plane.start(
            "first", options=agent({"text": "one"}), keep_node=True, pause_after_turn=True, **fake(tmp_path)
        )
        assert await run.wait() == "paused"
        [kept] = await store.nodes(states=(NodeRecordState.KEPT,), run_id=run.id)
        await plane.release_kept_node(run.id)
        await plane.release_kept_node(run.id)  # nothing kept: nothing to do
        assert (await store.node(kept.id)).state == NodeRecordState.DESTROYED  # type: ignore[union-attr]
        assert list((tmp_path / "nodes").iterdir()) == []
        again = await plane.resume_run(run.id, message="next", options=agent({"stall": True}))
        with pytest.raises(RunStateError):
            await plane.release_kept_node(run.id)  # live
        async for event in again.events():
            if isinstance(event, NodeReady):
                assert (event.reused, event.transcript_restored) == (False, True)
                break
        await again.pause("human", "enough")
