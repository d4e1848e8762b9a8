"""Checkpoints of runs (nodeprov.runs.checkpointing) with the fake agent on local nodes: a
pause checkpoints the workspace with the session, a resume on a fresh node finds the first
turn's files, and a checkpoint whose object store fails mid-write is absent while the run
goes on."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.checkpoints import DirectoryObjects, ObjectStore
from nodeprov.errors import CheckpointError, ConfigError, RunStateError
from nodeprov.runs import AgentMessage, NodeReady, Orchestrator, Run
from nodeprov.runs.checkpointing import Checkpointing
from nodeprov.runs.events import CheckpointFailed, CheckpointSaved, NodeReleased, RunEvent
from nodeprov.runs.retention import prune
from nodeprov.store import Store
from tests.conftest import MakeStore

pytestmark = pytest.mark.anyio


async def said(run: Run, text: str) -> None:
    """Wait until the agent said ``text``."""
    async for event in run.events():
        if isinstance(event, AgentMessage) and getattr(event.message, "text", None) == text:
            return
    raise AssertionError(f"run {run.id} ended before its agent said {text!r}: {run.error}")


async def all_events(run: Run) -> list[RunEvent]:
    return [event async for event in run.events()]


def texts(events: list[RunEvent]) -> list[str]:
    return [
        event.message.text  # type: ignore[attr-defined]
        for event in events
        if isinstance(event, AgentMessage) and type(event.message).__name__ == "AgentText"
    ]


async def test_a_resume_on_a_fresh_node_finds_the_files_of_the_turn_before(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    settings = {"root": str(tmp_path / "nodes")}
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:
        run = await plane.start(
            "write your notes",
            provider="local",
            provider_settings=settings,
            permission="edit",
            options=agent({"write_file": ["src/notes.txt", "turn one"]}, {"text": "wrote"}, {"stall": True}),
        )
        with anyio.fail_after(60):
            await said(run, "wrote")
            snapshot = await run.pause(keep_node=False)
        first = await all_events(run)
        saved = [event for event in first if isinstance(event, CheckpointSaved)]
        assert [(event.reason, event.added) for event in saved] == [("pause", 2)]  # src/ and its file
        assert [event.kept for event in first if isinstance(event, NodeReleased)] == [False]
        first_node = next(event.node_id for event in first if isinstance(event, NodeReady))
        assert not (tmp_path / "nodes" / first_node).exists()

        resumed = await plane.resume(snapshot.token, options=agent({"read_file": "src/notes.txt"}))
        with anyio.fail_after(60):
            assert await resumed.wait() == "ok"
        second = await all_events(resumed)
        ready = [event for event in second if isinstance(event, NodeReady)][-1]
        assert ready.node_id != first_node
        assert ready.workspace_restored == saved[0].checkpoint_id
        assert "turn one" in texts(second)
        records = await store.checkpoints.of_run(run.id)
        assert [(record.id, record.reason, record.agent_session_id) for record in records] == [
            (saved[0].checkpoint_id, "pause", run.agent_session_id)
        ]
        key, session = records[0].project_key, records[0].agent_session_id
        assert key is not None
        assert session is not None
        assert records[0].session_counts is not None  # the session as it stood: where a fork cuts it
        then = json.loads(records[0].session_counts)[""]
        assert 0 < then < (await store.transcripts.counts({"project_key": key, "session_id": session}))[""]


class _FailsMidWrite(DirectoryObjects):
    """A real directory store whose second write fails, as a full disk would."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writes = 0

    async def put(self, name: str, data: bytes | bytearray) -> None:
        self.writes += 1
        if self.writes == 2:
            raise CheckpointError(f"could not write object {name}: No space left on device")
        await super().put(name, data)


async def test_a_checkpoint_whose_store_fails_mid_write_is_absent_and_the_run_goes_on(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = _FailsMidWrite(tmp_path / "checkpoints")

    def objects(self: Checkpointing, url: str) -> ObjectStore:
        return failing

    monkeypatch.setattr(Checkpointing, "objects", objects)
    settings = {"root": str(tmp_path / "nodes")}
    # 12 MiB, over a pack: the capture writes several.
    fill = 'for n in 0 1 2 3; do head -c 3145728 /dev/urandom > "part-$n.txt"; done; touch filled'
    steps = [{"spawn": ["sh", "-c", fill]}, {"wait_for": "filled"}]
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:
        run = await plane.start(
            "write",
            provider="local",
            provider_settings=settings,
            permission="edit",
            options=agent(*steps, {"text": "wrote"}, {"stall": True}),
        )
        with anyio.fail_after(60):
            await said(run, "wrote")
            snapshot = await run.pause(keep_node=False)
        events = await all_events(run)
        failed = [event for event in events if isinstance(event, CheckpointFailed)]
        assert [(event.reason, "No space left" in event.error) for event in failed] == [("pause", True)]
        assert not [event for event in events if isinstance(event, CheckpointSaved)]
        assert await store.checkpoints.of_run(run.id) == []
        assert failing.writes >= 2
        resumed = await plane.resume(snapshot.token, options=agent({"read_file": "part-0.txt"}))
        with anyio.fail_after(60):
            assert await resumed.wait() == "ok"
        ready = [event for event in await all_events(resumed) if isinstance(event, NodeReady)][-1]
        assert ready.workspace_restored is None
        assert texts(await all_events(resumed)) == ["missing: part-0.txt"]


async def test_retention_deletes_the_checkpoints_of_runs_it_deletes_and_then_their_objects(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    settings = {"root": str(tmp_path / "nodes")}
    url = (tmp_path / "checkpoints").as_uri()
    async with Orchestrator(store, checkpoints=url) as plane:
        runs = []
        for name in ("gone", "kept"):
            run = await plane.start(
                name,
                provider="local",
                provider_settings=settings,
                permission="edit",
                options=agent({"write_file": [f"{name}.txt", name]}, {"text": "wrote"}, {"stall": True}),
            )
            with anyio.fail_after(60):
                await said(run, "wrote")
                await run.pause(keep_node=False)
            runs.append(run)
        checkpointing = Checkpointing(store, url)
        objects = DirectoryObjects(tmp_path / "checkpoints")
        kept = await checkpointing.manifest((await store.checkpoints.of_run(runs[1].id))[0])
        young = await objects.names()
        assert await checkpointing.collect() == 0  # nothing is a day old

        await store.db.execute("UPDATE runs SET updated_at = '2000-01-01' WHERE id = ?", (runs[0].id,))
        report = await prune(store, 86400)
        assert (report.runs, report.checkpoints) == (1, 1)
        assert await checkpointing.collect() == 0  # unnamed now, but young: a capture may be writing
        collected = await checkpointing.collect(older_than=0)
        assert collected > 0
        left = await objects.names()
        assert left < young
        assert left == await store.checkpoints.named(url)
        assert kept.packs() <= left  # the other run's checkpoint keeps all it names


async def test_a_checkpoint_on_request_here_and_from_another_control_plane_and_their_diff(
    make_store: MakeStore, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    store = await make_store(False)
    settings = {"root": str(tmp_path / "nodes")}
    url = (tmp_path / "checkpoints").as_uri()
    script = [
        {"write_file": ["notes.txt", "one\ntwo\n"]},
        {"text": "first"},
        {"wait_for": "go"},
        {"write_file": ["notes.txt", "one\n2\n"]},
        {"write_file": ["added.txt", "new\n"]},
        {"text": "second"},
        {"stall": True},
    ]
    async with Orchestrator(store, checkpoints=url, poll_interval=0.05) as plane:
        run = await plane.start(
            "work", provider="local", provider_settings=settings, permission="edit", options=agent(*script)
        )
        with anyio.fail_after(60):
            await said(run, "first")
        first = await plane.checkpoints.take(run.id)  # driven here
        workdir = next((tmp_path / "nodes").rglob("notes.txt")).parent
        (workdir / "go").write_text("")
        with anyio.fail_after(60):
            await said(run, "second")
        other_store = await make_store(False)
        async with Orchestrator(other_store, checkpoints=url, reconcile_interval=0) as other:
            with anyio.fail_after(60):
                second = await other.checkpoints.take(run.id)  # asked of the plane that drives it
            with pytest.raises(RunStateError, match="no checkpoint"):
                await other.checkpoints.get(run.id, "ck-none")
            found = await other.checkpoints.diff(run.id, first.id, second.id)
        await other_store.aclose()
        assert [record.id for record in await plane.checkpoints.of_run(run.id)] == [first.id, second.id]
        assert (second.reason, second.seq, second.parent) == ("request", 2, first.id)
        assert (found.changes.added, found.changes.modified, found.binary) == (
            ("added.txt", "go"),
            ("notes.txt",),
            (),
        )
        assert "-two\n+2\n" in "".join(found.patches)
        await run.pause(keep_node=False)
        saved = [event for event in await all_events(run) if isinstance(event, CheckpointSaved)]
        assert [(event.checkpoint_id, event.reason) for event in saved][:2] == [
            (first.id, "request"),
            (second.id, "request"),
        ]
        with pytest.raises(RunStateError, match="only a running run"):
            await plane.checkpoints.take(run.id)
    await store.aclose()


async def test_a_run_checkpoints_after_each_turn_or_never_as_it_asked(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    settings = {"root": str(tmp_path / "nodes")}
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:
        with pytest.raises(ConfigError, match="checkpoint is one of pause, turn, off"):
            await plane.start("x", provider="local", provider_settings=settings, checkpoint="sometimes")  # type: ignore[arg-type]
        turn = await plane.start(
            "write",
            provider="local",
            provider_settings=settings,
            permission="edit",
            checkpoint="turn",
            options=agent({"write_file": ["done.txt", "done"]}, {"text": "wrote"}),
        )
        with anyio.fail_after(60):
            assert await turn.wait() == "ok"
        saved = [event for event in await all_events(turn) if isinstance(event, CheckpointSaved)]
        assert [(event.reason, event.added) for event in saved] == [("turn", 1)]

        off = await plane.start(
            "write",
            provider="local",
            provider_settings=settings,
            permission="edit",
            checkpoint="off",
            options=agent({"write_file": ["a.txt", "a"]}, {"text": "wrote"}, {"stall": True}),
        )
        with anyio.fail_after(60):
            await said(off, "wrote")
            snapshot = await off.pause(keep_node=False)
            resumed = await plane.resume(
                snapshot.token, options=agent({"read_file": "a.txt"}, {"stall": True})
            )
            await said(resumed, "missing: a.txt")  # off: a fresh node starts as provisioned
            await resumed.pause(keep_node=False)  # and its resumes keep the run's own mode
        events = await all_events(off) + await all_events(resumed)
        assert not [event for event in events if isinstance(event, CheckpointSaved | CheckpointFailed)]
        assert await store.checkpoints.of_run(off.id) == []


async def test_checkpoints_in_the_store_stop_at_its_cap_and_say_what_to_do(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    settings = {"root": str(tmp_path / "nodes")}
    fill = "head -c 300000 /dev/urandom > big.bin; touch filled"
    capped = "store:?max_bytes=200000"
    async with Orchestrator(store, checkpoints=capped) as plane:
        run = await plane.start(
            "fill",
            provider="local",
            provider_settings=settings,
            permission="edit",
            options=agent({"write_file": ["small.txt", "small"]}, {"text": "small"}, {"stall": True}),
        )
        with anyio.fail_after(60):
            await said(run, "small")
            small = await plane.checkpoints.take(run.id)  # under the cap
            await run.pause(keep_node=False)
        assert small.objects == capped
        filling = agent(
            {"spawn": ["sh", "-c", fill]}, {"wait_for": "filled"}, {"text": "full"}, {"stall": True}
        )
        resumed = await plane.resume_run(run.id, options={**filling, "env": {**filling["env"]}})
        with anyio.fail_after(60):
            await said(resumed, "full")
            await resumed.pause(keep_node=False)
        events = await all_events(resumed)
    failed = [event for event in events if isinstance(event, CheckpointFailed)]
    assert [event.reason for event in failed] == ["pause"]
    assert "cap of 200,000" in failed[0].error
    assert "s3://" in failed[0].error
    assert [record.reason for record in await store.checkpoints.of_run(run.id)] == ["request", "pause"]
    assert (await store.run(run.id)).state == "paused"  # type: ignore[union-attr]
    # Retention keeps what checkpoints name whatever parameters their URL gave.
    await Checkpointing(store, "store:").collect(older_than=0)
    assert {*small.pack_names, small.manifest} <= await store.checkpoints.object_names()
