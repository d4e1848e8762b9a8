"""Run events and transcript frames in the store: followers skip what this version cannot
read (a newer control plane's), frames are stored before their result is reported, and a
stream of messages is written in batches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.agents import Result
from nodeprov.errors import StoreError
from nodeprov.runs import AgentMessage, Orchestrator, RunStarted
from nodeprov.runs import journal as journal_module
from nodeprov.runs.journal import Journal
from nodeprov.store import EventRecord, Store, now
from nodeprov.store.entries import EntryKey
from nodeprov.testing import fake_agent_command
from tests.test_store import _run

pytestmark = pytest.mark.anyio


async def test_an_unreadable_stored_event_is_skipped_not_raised(tmp_path: Path) -> None:
    options = {
        "cli_path": fake_agent_command(tmp_path),
        "env": {"NODEPROV_FAKE_AGENT": json.dumps([{"text": "hi"}])},
    }
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        async with Orchestrator(store) as orchestrator:
            run = await orchestrator.start(
                "go", provider="fake", provider_settings={"root": str(tmp_path / "nodes")}, options=options
            )
            assert await run.wait() == "ok"
        last = await store.last_event_seq(run.id)
        await store.append_events(
            [
                EventRecord(
                    run.id, last + 1, "from.the.future", now(), json.dumps({"type": "from.the.future"})
                ),
                EventRecord(run.id, last + 2, "garbled", now(), "{not json"),
            ]
        )
        async with Orchestrator(store) as reader:
            kinds = [event.kind async for event in reader.events(run.id, after=0)]
    assert kinds[0] == "run.started"
    assert kinds[-1] == "run.finished"
    assert "from.the.future" not in kinds


async def test_a_result_is_reported_once_its_turn_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's transcript frames reach the store before its result reaches the caller,
    though the writer would otherwise let them gather for an hour."""
    monkeypatch.setattr(journal_module, "_FLUSH_GATHER", 3600.0)
    steps = [{"text": "first"}, {"stream": [5, 100, 0]}]
    options = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
    async with (
        await Store.open(f"sqlite:///{tmp_path}/runs.db") as store,
        Orchestrator(store) as orchestrator,
    ):
        run = await orchestrator.start(
            "go", provider="fake", provider_settings={"root": str(tmp_path / "nodes")}, options=options
        )
        async for event in run.events():
            if isinstance(event, AgentMessage) and isinstance(event.message, Result):
                record = await store.run(run.id)
                assert record is not None
                assert record.project_key
                entries = await store.transcripts.load(
                    {"project_key": record.project_key, "session_id": str(event.message.session_id)}
                )
                break
        await run.wait()
    assert entries is not None
    assert [entry["type"] for entry in entries] == ["user", *["assistant"] * 6]
    first: dict[str, Any] = dict(entries[1])
    assert first["message"]["content"] == [{"type": "text", "text": "first"}]


async def test_transcript_frames_and_events_are_written_in_one_batch(tmp_path: Path) -> None:
    """A stream of messages costs far fewer transactions than messages."""
    steps = [{"stream": [200, 100, 0]}]
    options = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        commits = 0
        commit = store.db._commit

        async def counting(batch: list[Any]) -> list[BaseException | None]:
            nonlocal commits
            commits += 1
            return await commit(batch)

        store.db._commit = counting  # type: ignore[method-assign]
        async with Orchestrator(store) as orchestrator:
            run = await orchestrator.start(
                "go", provider="fake", provider_settings={"root": str(tmp_path / "nodes")}, options=options
            )
            assert await run.wait() == "ok"
        record = await store.run(run.id)
        assert record is not None
        assert record.agent_session_id
        assert record.project_key
        entries = await store.transcripts.load(
            {"project_key": record.project_key, "session_id": record.agent_session_id}
        )
        assert entries is not None
        assert len(entries) == 201
        assert await store.last_event_seq(run.id) > 200
        # The Claude agent's summary is folded in the same batches, over all 201 entries.
        [summary] = await store.transcripts.summaries(record.project_key)
        assert summary["session_id"] == record.agent_session_id
        assert summary["data"]
    assert 0 < commits < 50


async def test_a_batch_of_unknown_fate_is_written_again_without_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of a transcript file that the agent never mirrored, and that carry no uuid (as
    every line of a Codex rollout), are archived when the run pauses; their batch commits but
    is reported failed (a connection lost as it committed), and is written again: each line
    is stored once."""
    from nodeprov import get_provider
    from nodeprov.errors import StoreError
    from nodeprov.store import EntryStore

    steps = [{"text": "hi"}, {"stall": True}]
    options = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
    settings = {"root": str(tmp_path / "nodes")}
    extra = [{"type": "note", "text": f"unmirrored {n}"} for n in range(3)]
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        unkeyed_in_batch = False
        append_in = EntryStore.append_in

        def noting(self: EntryStore, statements: Any, batches: Any) -> None:
            nonlocal unkeyed_in_batch
            unkeyed_in_batch |= any(entry in extra for batch in batches for _, entry in batch.entries)
            append_in(self, statements, batches)

        monkeypatch.setattr(EntryStore, "append_in", noting)
        commit, faults = store.db._commit, 0

        async def lost_as_it_committed(batch: list[Any]) -> list[BaseException | None]:
            nonlocal unkeyed_in_batch, faults
            errors = await commit(batch)
            if unkeyed_in_batch and not faults and not any(errors):
                faults += 1
                return [StoreError("the connection was lost as the batch committed (it may have)")] * len(
                    batch
                )
            unkeyed_in_batch = False
            return errors

        store.db._commit = lost_as_it_committed  # type: ignore[method-assign]
        async with Orchestrator(store) as orchestrator:
            run = await orchestrator.start(
                "go", provider="local", provider_settings=settings, options=options, permission="edit"
            )
            async for event in run.events():
                if isinstance(event, AgentMessage):
                    break
            record = await store.run(run.id)
            assert record is not None
            assert record.node_id is not None
            assert record.project_key is not None
            assert record.agent_session_id is not None
            node = await get_provider("local", **settings).attach(record.node_id)
            projects = f"{node.base_env['HOME']}/.claude/projects"
            path = f"{projects}/{record.project_key}/{record.agent_session_id}.jsonl"
            lines = bytearray()
            async with node.read_file(path) as chunks:
                async for chunk in chunks:
                    lines += chunk
            await node.write_file(
                path, bytes(lines) + b"".join(json.dumps(e).encode() + b"\n" for e in extra)
            )
            await run.pause("human", "archive what the node holds")
        assert faults == 1
        entries = await store.transcripts.load(
            {"project_key": record.project_key, "session_id": record.agent_session_id}
        )
    assert entries is not None
    assert [entry for entry in entries if entry in extra] == extra


async def test_an_event_written_while_a_late_reader_reads_the_store_reaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event emitted before a reader came, and written by the journal's writer while the
    reader reads the store (the read misses it, and by the time the read returns it is no
    longer unwritten), still reaches the reader: it is in one or the other."""
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        session = await store.active_session("ws", "claude")
        run = _run(session.id)
        await store.create_run(run)
        journal = Journal(store, lambda: run.owner)
        events = journal.stream("run-1", 1)
        events.emit(RunStarted, prompt="go", provider="fake")
        write = journal.flush
        read = store.events

        async def writer_holds_the_batch() -> None:
            """The writer took the batch: a reader's flush finds nothing to write."""

        async def read_then_written(run_id: str, *, after: int = 0, limit: int = 1000) -> list[EventRecord]:
            found = await read(run_id, after=after, limit=limit)
            await write()  # the writer's commit lands as the read returns
            return found

        monkeypatch.setattr(journal, "flush", writer_holds_the_batch)
        monkeypatch.setattr(store, "events", read_then_written)
        reader = events.replay(after=0)
        with anyio.fail_after(10):
            first = await reader.__anext__()
        await reader.aclose()  # type: ignore[attr-defined]  # an async generator: it has aclose
    assert (first.kind, first.seq) == ("run.started", 1)


async def test_frames_are_written_one_batch_per_session_in_order_even_after_a_failed_write(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs' frames interleave; a write takes each session's as one batch (a batch costs the
    store its statements whatever its size), in the order they came, and a write that
    failed is written again before what came after it."""
    journal = Journal(store, lambda: "lease:test")
    first = EntryKey(project_key="p", session_id="a")
    second = EntryKey(project_key="p", session_id="b")
    written: list[list[str]] = []
    failures = [StoreError("the database is locked")]
    append = store.append_events

    async def failing_once(events: Any, frames: Any = (), *, writer: str | None = None) -> None:
        written.append([entry["uuid"] for batch in frames for _, entry in batch.entries])
        if failures:
            raise failures.pop()
        await append(events, frames, writer=writer)

    monkeypatch.setattr(store, "append_events", failing_once)
    for key, uuid in ((first, "a1"), (second, "b1"), (first, "a2"), (second, "b2")):
        journal.queue_frames(key, [{"uuid": uuid}])
    with pytest.raises(StoreError):
        await journal.flush()
    journal.queue_frames(first, [{"uuid": "a3"}])
    await journal.flush()
    assert written == [["a1", "a2", "b1", "b2"], ["a1", "a2", "a3", "b1", "b2"]]
    assert await store.transcripts.load(first) == [{"uuid": "a1"}, {"uuid": "a2"}, {"uuid": "a3"}]
    assert await store.transcripts.load(second) == [{"uuid": "b1"}, {"uuid": "b2"}]


async def test_a_flush_asked_for_during_another_waits_for_one_that_began_after_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Callers that come while a flush is under way wait for it together, then for the next
    one, which writes what they queued; when that one fails, one of them writes again and the
    others wait for it; whoever's write fails raises."""
    session = await store.active_session("ws", "claude")
    await store.create_run(_run(session.id))
    journal = Journal(store, lambda: None)  # type: ignore[arg-type, return-value]
    events = journal.stream("run-1", 1)
    append = store.append_events
    entered, release = anyio.Event(), anyio.Event()
    writes: list[list[int]] = []
    failures = [StoreError("the database is locked")]

    async def held_then_failing_once(records: Any, frames: Any = (), *, writer: str | None = None) -> None:
        writes.append([record.seq for record in records])
        if len(writes) == 1:
            entered.set()
            await release.wait()
        elif failures:
            raise failures.pop()
        await append(records, frames, writer=writer)

    monkeypatch.setattr(store, "append_events", held_then_failing_once)
    events.emit(RunStarted, prompt="go", provider="fake")
    outcomes: list[str] = []

    async def flush(needed: set[int]) -> None:
        try:
            await journal.flush()
        except StoreError:
            outcomes.append("failed")
        else:
            stored = {e.seq for e in await store.events("run-1")}
            outcomes.append("stored" if needed <= stored else f"missing {needed - stored}")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(flush, {1})
            await entered.wait()  # the first flush took event 1 and is writing it
            events.emit(RunStarted, prompt="again", provider="fake")  # event 2, for the next flush
            for _ in range(5):
                tg.start_soon(flush, {1, 2})
            await anyio.wait_all_tasks_blocked()
            release.set()
    assert writes == [[1], [2], [2]]  # one write each time, not one per caller
    assert sorted(outcomes) == ["failed", *["stored"] * 5]


async def test_a_replaced_session_copy_of_unknown_fate_is_written_again(tmp_path: Path) -> None:
    """A pause's export replaces the archived copy of a session when the node's file differs
    from it; a replace whose commit is reported failed (it may have committed) is written
    again, whole: the copy is the file's, once."""
    from nodeprov.errors import StoreError
    from nodeprov.runs.archive import Archive
    from nodeprov.runs.journal import Journal

    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        commit, faults = store.db._commit, 0

        async def lost_as_it_committed(batch: list[Any]) -> list[BaseException | None]:
            nonlocal faults
            errors = await commit(batch)
            if not faults and not any(errors):
                faults += 1
                return [StoreError("the connection was lost as the batch committed (it may have)")] * len(
                    batch
                )
            return errors

        key: Any = {"project_key": "elsewhere", "session_id": "s"}
        await store.transcripts.append({"project_key": "run-key", "session_id": "s"}, [{"n": 1}, {"n": 3}])
        store.db._commit = lost_as_it_committed  # type: ignore[method-assign]
        archive = Archive(Journal(store, lambda: "lease:x"), store.transcripts, "run-key", lambda _: None)
        await archive.replace(key, [{"n": 1}, {"n": 2}, {"n": 3}])
        assert faults == 1
        assert await archive.load(key) == [{"n": 1}, {"n": 2}, {"n": 3}]
