"""``nodeprov acp``: nodeprov as an ACP agent for an editor, the ACP Python library acting as
the editor, the fake ACP agent (tests/fake_acp_agent.py) running on local nodes through the
``acp`` agent, a real store. An editor session is one run whose prompts are its turns on one
node and one agent session; a cancel pauses the turn and the next prompt resumes it; another
editor loads the session later and goes on with it on a fresh node; an editor that leaves
mid-turn (its input closed, or SIGTERM) leaves the run paused and no node behind; what the
protocol refuses is refused with its codes."""

from __future__ import annotations

import json
import signal
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import RequestError, audio_block, text_block

from nodeprov.runs import NodeReady, RunPaused, RunStarted, RunState, event_from_json
from nodeprov.store import NodeRecordState, Store

from .editor import NODEPROV, EditorSide, acp_process
from .fake_acp_agent import FAKE_ACP_AGENT

pytestmark = pytest.mark.anyio


_NOT_DESTROYED = tuple(state for state in NodeRecordState if state != NodeRecordState.DESTROYED)


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/store.db"


def _args(tmp_path: Path) -> list[str]:
    """A local node under ``tmp_path`` per session, the fake ACP agent on it."""
    return [
        "--setting", f"root={tmp_path / 'nodes'}",
        "--agent", "acp",
        "--option", f"command={json.dumps([sys.executable, '-c', FAKE_ACP_AGENT])}",
        "--option", 'state_paths=["sessions"]',
        "--option", "model_flag=--model",
        "--model", "fake-model",
        "--permission", "full",
        "--no-ship-cli",
    ]  # fmt: skip


def _editor(tmp_path: Path) -> Any:
    return acp_process(_args(tmp_path), tmp_path / "acp.log", {"NODEPROV_STORE": _store(tmp_path)})


async def _prompt(side: EditorSide, session: str, text: str) -> str:
    with anyio.fail_after(120):
        answer = await side.connection.prompt(session_id=session, prompt=[text_block(text)])
    return str(answer.stop_reason)


async def _events(tmp_path: Path, run_id: str) -> list[Any]:
    async with await Store.open(_store(tmp_path)) as store:
        return [event_from_json(json.loads(row.body)) for row in await store.events(run_id)]


async def _nodes_left(tmp_path: Path, run_id: str) -> list[Any]:
    async with await Store.open(_store(tmp_path)) as store:
        return await store.nodes(states=_NOT_DESTROYED, run_id=run_id)


async def _state(tmp_path: Path, run_id: str) -> str:
    async with await Store.open(_store(tmp_path)) as store:
        record = await store.run(run_id)
    assert record is not None
    return record.state


async def test_an_editor_session_is_one_run_whose_prompts_are_turns_on_one_node(tmp_path: Path) -> None:
    async with _editor(tmp_path) as side:
        session = await side.start()
        assert await _prompt(side, session, "say hello world") == "end_turn"
        assert side.editor.texts(session) == ["hello world"]
        assert await _prompt(side, session, "write-here notes.txt from the editor's agent") == "end_turn"
        assert await _prompt(side, session, "read-here notes.txt") == "end_turn"  # its fs: on the node
        assert await _prompt(side, session, "history") == "end_turn"
        said = side.editor.texts(session)
        assert said[1:3] == ["written", "from the editor's agent"]
        assert said[3].split(" | ") == [  # one agent session, turn after turn
            "say hello world",
            "write-here notes.txt from the editor's agent",
            "read-here notes.txt",
            "history",
        ]
    assert side.process.returncode == 0
    events = await _events(tmp_path, session)  # the session is the run of its id
    assert [e.prompt for e in events if isinstance(e, RunStarted)][1:] == [
        "write-here notes.txt from the editor's agent",
        "read-here notes.txt",
        "history",
    ]
    readies = [e for e in events if isinstance(e, NodeReady)]
    assert [e.reused for e in readies] == [False, True, True, True]
    assert len({e.node_id for e in readies}) == 1
    assert await _state(tmp_path, session) == RunState.PAUSED  # a session loaded later goes on
    assert await _nodes_left(tmp_path, session) == []  # the editor left: its node went
    logs = await anyio.run_process([*NODEPROV, "logs", session, "--store", _store(tmp_path)], check=False)
    assert logs.returncode == 0, logs.stderr.decode()
    assert "hello world" in logs.stdout.decode()
    assert "from the editor's agent" in logs.stdout.decode()


async def test_a_cancel_pauses_the_turn_and_the_next_prompt_resumes_it(tmp_path: Path) -> None:
    async with _editor(tmp_path) as side, anyio.create_task_group() as tg:
        session = await side.start()
        stopped: list[str] = []
        answered = anyio.Event()

        async def waiting() -> None:
            stopped.append(await _prompt(side, session, "wait"))
            answered.set()

        tg.start_soon(waiting)
        plan = await side.editor.wait_for(session, "plan")  # the agent's plan, as it said it
        assert plan["entries"][0]["content"] == "wait"
        await side.connection.cancel(session_id=session)
        with anyio.fail_after(120):
            await answered.wait()
        assert stopped == ["cancelled"]
        assert await _prompt(side, session, "say goes on") == "end_turn"
        assert side.editor.texts(session)[-1] == "goes on"
    paused = [e for e in await _events(tmp_path, session) if isinstance(e, RunPaused)]
    assert (paused[0].pause_kind, paused[0].reason) == ("human", "cancelled in the editor")
    assert [e.node_kept for e in paused][:2] == [True, True]


async def test_another_editor_loads_the_session_later_and_goes_on_with_it(tmp_path: Path) -> None:
    async with _editor(tmp_path) as side:
        session = await side.start()
        assert await _prompt(side, session, "say first words") == "end_turn"
    async with _editor(tmp_path) as later:
        await later.connection.initialize(protocol_version=1)
        with anyio.fail_after(60):
            await later.connection.load_session(cwd="/elsewhere", session_id=session, mcp_servers=[])
        assert later.editor.texts(session, "user_message_chunk") == ["say first words"]
        assert later.editor.texts(session) == ["first words"]  # its turns replayed
        assert await _prompt(later, session, "history") == "end_turn"
        assert later.editor.texts(session)[-1] == "say first words | history"  # the same agent session
    readies = [e for e in await _events(tmp_path, session) if isinstance(e, NodeReady)]
    assert [(e.reused, e.transcript_restored) for e in readies] == [(False, False), (False, True)]


@pytest.mark.parametrize("leaving", ["input closed", "SIGTERM"])
async def test_an_editor_that_leaves_mid_turn_leaves_the_run_paused_and_no_node(
    tmp_path: Path, leaving: str
) -> None:
    async with _editor(tmp_path) as side, anyio.create_task_group() as tg:
        session = await side.start()

        async def waiting() -> None:
            with suppress(Exception):  # answered "cancelled" as nodeprov leaves, or cut off
                await _prompt(side, session, "wait")

        tg.start_soon(waiting)
        await side.editor.wait_for(session, "plan")
        if leaving == "SIGTERM":
            side.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(120):
                await side.process.wait()
        tg.cancel_scope.cancel()
    assert side.process.returncode == 0
    paused = [e for e in await _events(tmp_path, session) if isinstance(e, RunPaused)]
    assert [(e.pause_kind, e.reason, e.node_kept) for e in paused] == [("system", "the editor left", False)]
    assert await _state(tmp_path, session) == RunState.PAUSED
    assert await _nodes_left(tmp_path, session) == []
    assert list((tmp_path / "nodes").iterdir()) == []


async def test_what_the_protocol_refuses_is_refused_with_its_codes(tmp_path: Path) -> None:
    async with _editor(tmp_path) as side, anyio.create_task_group() as tg:
        session = await side.start()
        with pytest.raises(RequestError) as unknown:
            await side.connection.prompt(session_id="run-nobody", prompt=[text_block("say hi")])
        assert unknown.value.code == -32002
        with pytest.raises(RequestError) as audio:
            await side.connection.prompt(session_id=session, prompt=[audio_block("AAAA", "audio/wav")])
        assert audio.value.code == -32602
        with pytest.raises(RequestError) as not_loaded:
            await side.connection.load_session(cwd="/x", session_id="run-none", mcp_servers=[])
        assert not_loaded.value.code == -32002
        with pytest.raises(RequestError) as method:
            await side.connection.ext_method("nodeprov/nothing", {})
        assert method.value.code == -32601
        tg.start_soon(_prompt, side, session, "wait")
        await side.editor.wait_for(session, "plan")
        with pytest.raises(RequestError) as busy:
            await side.connection.prompt(session_id=session, prompt=[text_block("say two at once")])
        assert busy.value.code == -32602
        await side.connection.cancel(session_id=session)
    assert side.process.returncode == 0
