"""Runs end to end: the real Claude Code CLI, the scripted model, real nodes, a real store."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.runs import AgentMessage, NodeReady, Orchestrator, RunFinished, RunPaused, RunStarted
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, unique_marker

from .agents import TURN_TIMEOUT, collect, local, require_claude_cli, run_options, until_tool_runs

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    require_claude_cli()


async def test_a_run_relays_every_message_and_destroys_its_node(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    scripted_model.extend([ToolUse("Bash", {"command": "echo hi > f.txt"}), Text("all done")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start("do it", options=run_options(scripted_model), **local(tmp_path))
        late: list[Any] = []
        events = await collect(run)
        assert await run.wait() == "ok"
        late = [event async for event in run.events()]  # a subscriber joining after the end
    assert [type(e) for e in events] == [type(e) for e in late]
    assert isinstance(events[0], RunStarted)
    assert isinstance(events[1], NodeReady)
    messages = [e.message for e in events if isinstance(e, AgentMessage)]
    assert type(messages[-1]).__name__ == "Result"
    assert isinstance(events[-1], RunFinished)
    assert events[-1].outcome == "ok"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    record = await store.run(run.id)
    assert record is not None
    assert (record.state, record.outcome) == ("finished", "ok")
    assert record.agent_session_id == events[-1].agent_session_id
    assert list((tmp_path / "nodes").iterdir()) == []  # the node is gone


@pytest.mark.parametrize("keep_node", [True, False], ids=["kept-node", "fresh-node"])
async def test_pause_mid_turn_and_resume(
    keep_node: bool, store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "remember: the word is quince", options=run_options(scripted_model), **local(tmp_path)
        )
        await until_tool_runs(marker)
        snapshot = await run.pause("human", "lunch break", keep_node=keep_node)
        assert await run.wait() == "paused"
        assert host_processes_matching(marker) == []  # the agent and its tool are stopped
        events = await collect(run)
        paused = next(e for e in events if isinstance(e, RunPaused))
        assert (paused.pause_kind, paused.reason, paused.token) == ("human", "lunch break", snapshot.token)
        assert snapshot.agent_session_id
        node_dirs = list((tmp_path / "nodes").iterdir())
        assert len(node_dirs) == (1 if keep_node else 0)

        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("resumed: the word was quince")])
        resumed = await orchestrator.resume(
            snapshot.token, message="what was the word?", options=run_options(scripted_model)
        )
        assert resumed.id == run.id
        assert await resumed.wait() == "ok", resumed.error
        ready = [e for e in await collect(resumed) if isinstance(e, NodeReady)][-1]  # this drive's
        assert ready.reused is keep_node
        assert ready.transcript_restored is not keep_node
    first_after_resume = scripted_model.agent_requests[before].text()
    assert "remember: the word is quince" in first_after_resume  # the model sees the earlier conversation
    assert "what was the word?" in first_after_resume
    assert list((tmp_path / "nodes").iterdir()) == []


async def test_a_pause_stores_what_the_agent_had_not_mirrored(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """The CLI mirrors its transcript in batches of its own, so a pause can stop it before it
    sent any: here the mirrored copy is dropped before the pause. The file on the node holds
    it all, and the pause stores it before the node goes; the resume elsewhere sees it."""
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "remember: the word is medlar", options=run_options(scripted_model), **local(tmp_path)
        )
        await until_tool_runs(marker)
        record = await store.run(run.id)
        assert record is not None
        assert record.project_key
        assert run.agent_session_id
        mirrored = {"project_key": record.project_key, "session_id": run.agent_session_id}
        await store.transcripts.delete(mirrored)  # type: ignore[arg-type]
        snapshot = await run.pause("human", "lunch break")
        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("it was medlar")])
        resumed = await orchestrator.resume(
            snapshot.token, message="which?", options=run_options(scripted_model)
        )
        assert await resumed.wait() == "ok", resumed.error
    assert "remember: the word is medlar" in scripted_model.agent_requests[before].text()


async def test_the_conversation_survives_a_fresh_node_then_a_node_death(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """Each fresh local node files the transcript under a key of its own (its directory is
    in it). After one resume elsewhere and then that node's death, the next resume still
    gives the model the first turn: the run's archive kept the whole conversation."""
    from nodeprov import get_provider

    first, second = unique_marker(), unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {first}'"})])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "remember: the word is quince", options=run_options(scripted_model), **local(tmp_path)
        )
        await until_tool_runs(first)
        snapshot = await run.pause("human", "released")
        scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {second}'"})])
        resumed = await orchestrator.resume(
            snapshot.token, message="and the colour is teal", options=run_options(scripted_model)
        )
        await until_tool_runs(second)
        record = await store.run(run.id)
        assert record is not None
        assert record.node_id is not None
        await (await get_provider("local", root=str(tmp_path / "nodes")).attach(record.node_id)).destroy()
        assert await resumed.wait() == "error"  # its node died under it
        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("quince and teal")])
        last = await orchestrator.resume_run(
            run.id, message="what were the word and the colour?", options=run_options(scripted_model)
        )
        assert await last.wait() == "ok", last.error
    seen = scripted_model.agent_requests[before].text()
    assert "the word is quince" in seen
    assert "the colour is teal" in seen


async def paused_run(orchestrator: Orchestrator, model: ScriptedModel, tmp_path: Path, **start: Any) -> Any:
    """A run paused mid-turn (node released); returns (run, snapshot)."""
    marker = unique_marker()
    model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    run = await orchestrator.start("long task", options=run_options(model), **local(tmp_path), **start)
    await until_tool_runs(marker)
    return run, await run.pause("external", "budget check")


async def test_tokens_and_states_are_enforced(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    from nodeprov import ConfigError
    from nodeprov.runs import RunStateError
    from nodeprov.store import TokenError

    async with Orchestrator(store) as orchestrator:
        with pytest.raises(TokenError, match="unknown"):
            await orchestrator.resume("tok-no-such-token")
        run, snapshot = await paused_run(orchestrator, scripted_model, tmp_path)
        with pytest.raises(ConfigError, match="pause kind must be one of"):
            await orchestrator.request_pause(run.id, "lunch")  # type: ignore[arg-type]
        with pytest.raises(RunStateError, match="cannot be paused"):
            await run.pause("human", "again")  # paused already
        scripted_model.extend([Text("finished now")])
        resumed = await orchestrator.resume(snapshot.token, options=run_options(scripted_model))
        assert await resumed.wait() == "ok"
        with pytest.raises(TokenError, match="used already"):
            await orchestrator.resume(snapshot.token)
        with pytest.raises(RunStateError, match="finished: only a paused or failed run"):
            await orchestrator.resume_run(run.id)
        with pytest.raises(RunStateError, match="cannot be paused"):
            await resumed.pause("human", "too late")
        with pytest.raises(RunStateError, match="not running"):
            await orchestrator.request_pause(run.id)
    record = await store.run(run.id)
    assert record is not None
    assert (record.state, record.outcome) == ("finished", "ok")


async def test_two_control_planes_resume_the_same_run(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    await race_to_resume(store, scripted_model, tmp_path)


async def test_two_control_planes_resume_the_same_run_on_postgres(
    postgres_url: str, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    async with await Store.open(postgres_url) as store:
        await race_to_resume(store, scripted_model, tmp_path)


async def race_to_resume(store: Store, scripted_model: ScriptedModel, tmp_path: Path) -> None:
    """Two control planes, each with its own connection, resume one run at once."""
    from nodeprov.runs import RunStateError
    from nodeprov.store import TokenError

    async with Orchestrator(store) as first:
        _, snapshot = await paused_run(first, scripted_model, tmp_path)
    scripted_model.extend([Text("resumed once")])
    async with (
        await Store.open(store.url) as other_store,
        Orchestrator(store) as one,
        Orchestrator(other_store) as two,
    ):
        outcomes: list[Any] = []

        async def resume(orchestrator: Orchestrator) -> None:
            try:
                resumed = await orchestrator.resume(snapshot.token, options=run_options(scripted_model))
                outcomes.append(await resumed.wait())
            except (TokenError, RunStateError) as error:
                outcomes.append(error)

        async with anyio.create_task_group() as tg:
            tg.start_soon(resume, one)
            tg.start_soon(resume, two)
    assert len([o for o in outcomes if o == "ok"]) == 1
    assert any(isinstance(o, (TokenError, RunStateError)) for o in outcomes)
    assert len(scripted_model.agent_requests) == 2  # the first turn and exactly one resume


async def test_leaving_the_orchestrator_pauses_what_runs(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start("long task", options=run_options(scripted_model), **local(tmp_path))
        await until_tool_runs(marker)
    assert run.outcome == "paused"
    paused = next(e for e in await collect(run) if isinstance(e, RunPaused))
    assert paused.pause_kind == "system"
    assert host_processes_matching(marker) == []
    assert list((tmp_path / "nodes").iterdir()) == []
    record = await store.run(run.id)
    assert record is not None
    assert record.state == "paused"


async def test_no_secret_in_rows_events_or_logs(
    store: Store,
    scripted_model: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)  # every log line of the run, the pause kind included
    canary = "sk-canary-" + unique_marker().replace(".", "")
    monkeypatch.setenv("NODEPROV_CANARY_SECRET", canary)
    secret_options = run_options(scripted_model)
    secret_options["env"] = {**secret_options["env"], "ANTHROPIC_AUTH_TOKEN": canary}
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("x"), Text("done")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start("task", options=secret_options, **local(tmp_path))
        await until_tool_runs(marker)
        snapshot = await run.pause("human", "check")
        events = [e.to_json() for e in await collect(run)]
        resumed = await orchestrator.resume(snapshot.token, options=secret_options)
        assert await resumed.wait() == "ok"
        events += [e.to_json() for e in await collect(resumed)]
    import json as _json

    assert canary not in _json.dumps(events, default=str)
    tables = [
        "workspaces",
        "sessions",
        "runs",
        "nodes",
        "snapshots",
        "transcript_entries",
        "transcript_summaries",
    ]
    for table in tables:
        rows = await store.db.fetchall(f"SELECT * FROM {table}")
        assert rows or table in ("workspaces",)
        assert canary not in repr(rows), table
    assert canary not in caplog.text
    assert f"run {run.id} paused (human): check" in caplog.text  # the pause kind reaches the logs


async def test_a_refused_and_a_silent_model_end_the_run_with_the_real_cause(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    from nodeprov.testing import Stall

    with socket.socket() as probe:  # a port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    refused_env = {**scripted_model.agent_env(), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{closed_port}"}
    scripted_model.extend([Stall()])
    async with Orchestrator(store) as orchestrator:
        refused = await orchestrator.start(
            "hello?",
            options=run_options(scripted_model, env=refused_env),
            idle_timeout=8,
            **local(tmp_path),
        )
        silent = await orchestrator.start(
            "hello?", options=run_options(scripted_model), idle_timeout=8, **local(tmp_path)
        )
        with anyio.fail_after(TURN_TIMEOUT):
            assert await refused.wait() == "error"
            assert await silent.wait() == "error"
    assert refused.error is not None
    assert refused.error.startswith(
        "the agent made no progress for 8 s (waiting for the model API, which failed "
    )
    assert refused.error.endswith(" times: no response (connection refused, reset or timed out))")
    assert silent.error == "the agent made no progress for 8 s (waiting for the model API)"
    assert list((tmp_path / "nodes").iterdir()) == []
