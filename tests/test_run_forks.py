"""Forks and rewinds of runs (``Orchestrator.fork``, ``Orchestrator.rewind``) with the fake
agent on local nodes: a fork from the first turn's checkpoint of a three-turn run goes on
apart from the original (its own node, workspace, session and events, both finishing), forks
of one checkpoint share nothing, and a rewind resumes a run from an earlier checkpoint."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.errors import RunStateError
from nodeprov.runs import AgentMessage, Orchestrator, Run, RunStarted
from nodeprov.runs.events import CheckpointSaved, RunEvent
from nodeprov.store import CheckpointRecord, Store

pytestmark = pytest.mark.anyio

Steps = Callable[..., dict[str, Any]]


async def said(run: Run, text: str) -> None:
    """Wait until the agent said ``text``."""
    async for event in run.events():
        if isinstance(event, AgentMessage) and getattr(event.message, "text", None) == text:
            return
    raise AssertionError(f"run {run.id} ended before its agent said {text!r}: {run.error}")


async def texts(run: Run) -> list[str]:
    return [
        event.message.text  # type: ignore[attr-defined]
        for event in [event async for event in run.events()]
        if isinstance(event, AgentMessage) and type(event.message).__name__ == "AgentText"
    ]


async def workspace(plane: Orchestrator, record: CheckpointRecord) -> dict[str, str]:
    """The files checkpoint ``record`` holds, with their text."""
    manifest = await plane._plane.checkpoints.manifest(record)
    objects = plane._plane.checkpoints.objects(record.objects)
    files = {}
    for entry in manifest.entries:
        if entry.kind == "file":
            pieces = [(await objects.get(p.pack))[p.offset : p.offset + p.length] for p in entry.pieces]
            files[entry.path] = b"".join(pieces).decode()
    return files


async def paused_turn(run: Run, wrote: str) -> str:
    """Wait for the turn to write, pause the run (its node released); its snapshot's token."""
    with anyio.fail_after(60):
        await said(run, wrote)
        return (await run.pause(keep_node=False)).token


def turn(agent: Steps, name: str, *, stall: bool = True) -> dict[str, Any]:
    """The fake agent's script of one turn: write ``NAME.txt``, say what it remembers, then
    wait to be paused (``stall``) or end."""
    steps: list[dict[str, Any]] = [{"write_file": [f"{name}.txt", name]}, {"recall": True}, {"text": name}]
    return agent(*steps, *([{"stall": True}] if stall else []))


async def first_two_turns(plane: Orchestrator, agent: Steps, tmp_path: Path) -> tuple[Run, str]:
    """A run paused after its first turn, resumed and paused after its second; the
    second's token."""
    run = await plane.start(
        "turn one",
        provider="local",
        provider_settings={"root": str(tmp_path / "nodes")},
        permission="edit",
        checkpoint="turn",
        options=turn(agent, "one"),
    )
    token = await paused_turn(run, "one")
    second = await plane.resume(token, message="turn two", options=turn(agent, "two"))
    return second, await paused_turn(second, "two")


async def test_a_fork_from_the_first_turn_of_three_goes_on_apart_from_the_original(
    store: Store, agent: Steps, tmp_path: Path
) -> None:
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:
        original, token = await first_two_turns(plane, agent, tmp_path)
        first = (await plane.checkpoints.of_run(original.id))[0]
        assert (first.reason, first.turn) == ("pause", 1)
        # The third turn and the fork at once: neither waits for, or sees, the other.
        third = await plane.resume(token, message="turn three", options=turn(agent, "three", stall=False))
        fork = await plane.fork(
            original.id, first.id, message="fork turn", options=turn(agent, "fork", stall=False)
        )
        with anyio.fail_after(60):
            assert await third.wait() == "ok", third.error
            assert await fork.wait() == "ok", fork.error

        assert fork.id != original.id
        assert "turn one | turn two | turn three" in await texts(third)
        assert "turn one | fork turn" in await texts(fork)  # the conversation as it stood at turn one
        started = [event async for event in fork.events() if isinstance(event, RunStarted)]
        assert [event.checkpoint for event in started] == [first.id]

        mine, theirs = await store.run(original.id), await store.run(fork.id)
        assert mine is not None
        assert theirs is not None
        assert (theirs.forked_from, theirs.forked_at) == (original.id, first.id)
        assert (mine.forked_from, mine.forked_at) == (None, None)
        assert theirs.agent_session_id not in (None, mine.agent_session_id, first.agent_session_id)
        assert theirs.node_id != mine.node_id

        ours = await plane.checkpoints.of_run(fork.id)
        assert [(record.reason, record.parent) for record in ours] == [
            ("fork", first.id),
            ("turn", ours[0].id),
        ]
        assert ours[0].manifest == first.manifest  # shared, not copied
        assert await workspace(plane, ours[-1]) == {"one.txt": "one", "fork.txt": "fork"}
        last = (await plane.checkpoints.of_run(original.id))[-1]
        assert await workspace(plane, last) == {"one.txt": "one", "two.txt": "two", "three.txt": "three"}


async def test_forks_of_one_checkpoint_at_once_share_nothing(
    store: Store, agent: Steps, tmp_path: Path
) -> None:
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:
        original, _ = await first_two_turns(plane, agent, tmp_path)
        first = (await plane.checkpoints.of_run(original.id))[0]
        forks: list[Run] = []

        async def fork(index: int) -> None:
            await anyio.sleep(random.uniform(0, 0.05))
            name = f"f{index}"
            options = turn(agent, name, stall=False)
            forks.append(await plane.fork(original.id, first.id, message=name, options=options))

        async with anyio.create_task_group() as group:
            for index in range(4):
                group.start_soon(fork, index)
        with anyio.fail_after(90):
            for run in forks:
                assert await run.wait() == "ok", run.error
        sessions = set()
        for run in forks:
            record = await store.run(run.id)
            assert record is not None
            sessions.add(record.agent_session_id)
            recalled = next(text for text in await texts(run) if text.startswith("turn one | "))
            own = recalled.removeprefix("turn one | ")  # its own prompt alone after turn one's
            assert own.startswith("f")
            assert await workspace(plane, (await plane.checkpoints.of_run(run.id))[-1]) == {
                "one.txt": "one",
                f"{own}.txt": own,
            }
        assert len(sessions) == len(forks) == 4


async def test_a_rewind_resumes_the_run_from_an_earlier_checkpoint(
    store: Store, agent: Steps, tmp_path: Path
) -> None:
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:
        original, _ = await first_two_turns(plane, agent, tmp_path)
        before = await plane.checkpoints.of_run(original.id)
        session = (await store.run(original.id)).agent_session_id  # type: ignore[union-attr]
        assert [record.reason for record in before] == ["pause", "pause"]

        rewound = await plane.rewind(
            original.id, before[0].id, message="again", options=turn(agent, "again", stall=False)
        )
        with anyio.fail_after(60):
            assert await rewound.wait() == "ok", rewound.error
        assert rewound.id == original.id
        assert "turn one | again" in await texts(rewound)
        after = await plane.checkpoints.of_run(original.id)
        assert [(record.reason, record.parent) for record in after[2:]] == [
            ("rewind", before[0].id),
            ("turn", after[2].id),
        ]
        assert await workspace(plane, after[-1]) == {"one.txt": "one", "again.txt": "again"}
        record = await store.run(original.id)
        assert record is not None
        assert record.agent_session_id not in (None, session)
        events: list[RunEvent] = [event async for event in rewound.events()]
        assert [event.reason for event in events if isinstance(event, CheckpointSaved)][-1] == "turn"


async def test_what_cannot_be_forked_or_rewound_says_why(store: Store, agent: Steps, tmp_path: Path) -> None:
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:
        with pytest.raises(RunStateError, match="no run"):
            await plane.fork("run-nope")
        run = await plane.start(
            "stall",
            provider="local",
            provider_settings={"root": str(tmp_path / "nodes")},
            permission="edit",
            checkpoint="off",
            options=agent({"text": "up"}, {"stall": True}),
        )
        with anyio.fail_after(60):
            await said(run, "up")
        with pytest.raises(RunStateError, match="no checkpoint to fork from"):
            await plane.fork(run.id)
        with pytest.raises(RunStateError, match="has no checkpoint ck-nope"):
            await plane.fork(run.id, "ck-nope")
        taken = await plane.checkpoints.take(run.id)
        with pytest.raises(RunStateError, match="exists already"):
            await plane.fork(run.id, taken.id, fork_id=run.id)
        with pytest.raises(RunStateError, match="only a paused or failed run"):
            await plane.rewind(run.id, taken.id)
        with anyio.fail_after(60):
            await run.pause(keep_node=False)
