"""The ACP driver (nodeprov.agents.acp) against a fake ACP agent: a few lines of Python that
speak the protocol, run through the ``acp`` agent (any ACP agent by its command) on a local
node. Every step of a session: initialize with the client's capabilities, a new session and
a loaded one (its history not relayed again), a prompt's updates to its result, the agent's
fs requests served on the node, its permission requests answered by the run's permission, a
cancel, an agent that exits mid-turn, a resume on a fresh node from the archive, a kept agent
followed from another session."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeHandle, get_provider
from nodeprov.agents import AgentText, Message, Notice, Result, ToolResult, ToolUse
from nodeprov.agents.acp import ConfiguredAcpAgent
from nodeprov.agents.registry import get_agent
from nodeprov.errors import AgentExitError, ConfigError
from nodeprov.node.keeper import KeepOptions
from nodeprov.prompts import ImageBlock, TextBlock
from nodeprov.testing.agent_conformance import MemoryArchive
from nodeprov.testing.images import sample_png

from .fake_acp_agent import FAKE_ACP_AGENT as _FAKE

pytestmark = pytest.mark.anyio


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as handle:
        yield handle


def _options(**more: Any) -> dict[str, Any]:
    return {"command": [sys.executable, "-c", _FAKE], "state_paths": ["sessions"], **more}


async def _turn(session: Any, prompt: Any) -> list[Message]:
    with anyio.fail_after(60):
        return [message async for message in session.turn(prompt)]


def _texts(messages: list[Message]) -> list[str]:
    return [message.text for message in messages if isinstance(message, AgentText)]


async def test_a_turn_is_the_session_notice_its_chunks_as_one_text_and_a_result(node: NodeHandle) -> None:
    async with get_agent("acp", _options()).session(node) as session:
        messages = await _turn(session, "say hello world")
    assert isinstance(messages[0], Notice)
    assert messages[0].session_id == session.session_id
    assert _texts(messages) == ["hello world"]
    result = messages[-1]
    assert isinstance(result, Result)
    assert not result.is_error
    assert (result.text, result.session_id, result.usage) == (
        "hello world",
        session.session_id,
        {"used": 10, "size": 1000},
    )


@pytest.mark.parametrize(
    ("permission", "offered"),
    [
        ("read-only", {"fs": {"readTextFile": True, "writeTextFile": False}, "terminal": False}),
        ("edit", {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False}),
        ("full", {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}),
    ],
)
async def test_the_client_offers_what_the_permission_allows(
    node: NodeHandle, permission: str, offered: Any
) -> None:
    async with get_agent("acp", _options(permission=permission)).session(node) as session:
        messages = await _turn(session, "caps")
    assert json.loads(_texts(messages)[0]) == offered


async def test_a_kept_agent_is_offered_no_terminal(node: NodeHandle) -> None:
    async with get_agent("acp", _options(permission="full")).session(node, keep=KeepOptions()) as session:
        messages = await _turn(session, "caps")
    assert json.loads(_texts(messages)[0])["terminal"] is False


async def test_the_agent_reads_and_writes_files_on_the_node_through_the_client(node: NodeHandle) -> None:
    await node.write_file("notes/plan.txt", b"line one\nline two\n")
    inside, outside = f"{node.workdir}/notes/plan.txt", f"{node.workdir}/../elsewhere.txt"
    async with get_agent("acp", _options()).session(node) as session:
        read = _texts(await _turn(session, f"read {inside}"))
        missing = _texts(await _turn(session, f"read {node.workdir}/none.txt"))
        written = _texts(await _turn(session, f"write {node.workdir}/out.txt from the agent"))
        refused = _texts(await _turn(session, f"write {outside} escape"))
        relative = _texts(await _turn(session, "read notes/plan.txt"))
    assert read == ["line one\nline two\n"]
    assert missing[0].startswith("error: Resource not found:")
    assert written == ["written"]
    async with node.read_file("out.txt") as chunks:
        assert b"".join([chunk async for chunk in chunks]) == b"from the agent"
    assert refused[0].startswith("error:")
    assert "outside" in refused[0]
    assert relative[0].startswith("error: a path must be absolute")


@pytest.mark.parametrize(
    ("permission", "kind", "allowed"),
    [
        ("read-only", "read", True),
        ("read-only", "edit", False),
        ("read-only", "execute", False),
        ("edit", "edit", True),
        ("edit", "execute", False),
        ("full", "execute", True),
        ("full", "fetch", True),
    ],
)
async def test_permission_requests_are_answered_by_the_runs_permission(
    node: NodeHandle, permission: str, kind: str, allowed: bool
) -> None:
    async with get_agent("acp", _options(permission=permission)).session(node) as session:
        messages = await _turn(session, f"tool {kind}")
    use = next(m for m in messages if isinstance(m, ToolUse))
    result = next(m for m in messages if isinstance(m, ToolResult))
    assert (use.name, use.input) == (f"a {kind}", {"k": kind})
    assert (
        (result.output, result.is_error) == ("ran", False)
        if allowed
        else (result.is_error and result.output.startswith(f"refused: the run's permission ({permission})"))
    )


async def test_a_terminal_runs_on_the_node_for_a_full_permission_only(node: NodeHandle) -> None:
    async with get_agent("acp", _options(permission="full")).session(node) as session:
        status, output, released = json.loads(_texts(await _turn(session, "term"))[0])
    async with get_agent("acp", _options(permission="edit")).session(node) as session:
        refused = _texts(await _turn(session, "term"))[0]
    assert status == {"exitCode": 4, "signal": None}
    assert output["truncated"] is True
    assert len(output["output"].encode()) <= 12
    assert output["exitStatus"] == status
    assert released is True  # a released terminal is no more
    assert refused.startswith("error: terminal/create is not offered")


async def test_an_image_goes_to_the_agent_as_base64_with_its_media_type(node: NodeHandle) -> None:
    png, seeing = sample_png(), _options(command=[sys.executable, "-c", _FAKE, "image"])
    prompt = [TextBlock("image"), ImageBlock(png, "image/png")]
    async with get_agent("acp", seeing).session(node) as session:
        messages = await _turn(session, prompt)
    assert _texts(messages) == [f"image/png {len(base64.b64encode(png))}"]
    async with get_agent("acp", _options()).session(node) as blind:
        with anyio.fail_after(60), pytest.raises(ConfigError, match="takes no images"):
            await _turn(blind, prompt)
    async with get_agent("acp", _options(images="text-only")).session(node) as blind:
        assert _texts(await _turn(blind, [TextBlock("say no image"), ImageBlock(png, "image/png")])) == [
            "no image"
        ]


async def test_an_interrupt_cancels_the_turn_which_ends_with_a_cancelled_result(node: NodeHandle) -> None:
    async with get_agent("acp", _options()).session(node) as session:
        messages: list[Message] = []
        with anyio.fail_after(60):
            async for message in session.turn("wait"):
                messages.append(message)
                if isinstance(message, Notice) and message.subtype == "plan":
                    await session.interrupt()
        after = await _turn(session, "say goes on")  # the session takes another turn
    result = messages[-1]
    assert isinstance(result, Result)
    assert result.is_error
    assert "cancelled" in result.text
    assert _texts(after) == ["goes on"]


async def test_an_agent_that_exits_mid_turn_says_its_status_and_last_words(node: NodeHandle) -> None:
    async with get_agent("acp", _options()).session(node) as session:
        with (
            anyio.fail_after(60),
            pytest.raises(AgentExitError, match="status 3: the fake agent dies") as raised,
        ):
            async for _ in session.turn("exit"):
                pass
    assert raised.value.exit_code == 3


async def test_a_flood_of_updates_is_relayed_whole_and_in_order(node: NodeHandle) -> None:
    async with get_agent("acp", _options()).session(node) as session:
        messages = await _turn(session, "flood 3000")
    assert _texts(messages) == ["".join(f"{n}," for n in range(3000))]


async def test_a_resume_on_a_fresh_node_loads_the_archived_session_without_relaying_its_history(
    tmp_path: Path,
) -> None:
    archive, agent = MemoryArchive(), get_agent("acp", _options())
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as first, agent.session(first, archive=archive) as session:
        await _turn(session, "say one two")
        key, sid = agent.state_key(first), session.session_id
    assert sid is not None
    async with await provider.provision() as fresh:
        assert await agent.import_state(fresh, sid, key, archive)
        async with agent.session(fresh, resume=sid, archive=archive) as resumed:
            messages = await _turn(resumed, "history")
    assert _texts(messages) == ["say one two | history"]  # nothing "(replayed)" relayed
    assert resumed.session_id == sid


async def test_a_history_replayed_after_the_loads_answer_is_not_relayed_after_its_settle(
    tmp_path: Path,
) -> None:
    late = _options(command=[sys.executable, "-c", _FAKE, "late-replay"])
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        async with get_agent("acp", late).session(node) as session:
            await _turn(session, "say one two")
        for settle, relayed in ((0.0, True), (3.0, False)):  # 3 s: a loaded machine's pause, not a gap
            agent = get_agent("acp", {**late, "history_settle": settle})
            async with agent.session(node, resume=session.session_id) as resumed:
                texts = _texts(await _turn(resumed, "say three"))
            assert any("(replayed)" in text for text in texts) is relayed, texts
            assert texts[-1].endswith("three")


async def test_a_session_the_agent_does_not_have_fails_to_resume(node: NodeHandle) -> None:
    async with get_agent("acp", _options()).session(node, resume="fake-none") as session:
        with anyio.fail_after(60), pytest.raises(Exception, match="no session fake-none"):
            await _turn(session, "history")


async def test_a_kept_agent_is_followed_from_the_start_of_its_turn(node: NodeHandle) -> None:
    agent = get_agent("acp", _options())
    keep = KeepOptions()
    async with agent.session(node, keep=keep) as session:
        seen: list[Message] = []
        with anyio.fail_after(60):
            async for message in session.turn("wait"):
                seen.append(message)
                if isinstance(message, Notice) and message.subtype == "plan":
                    break  # the control plane goes; the agent waits on
        keeper = session.keeper
        assert keeper is not None
        await session.detach()
    async with agent.session(node, keep=keep) as follower:
        followed: list[Message] = []
        with anyio.fail_after(60):
            async for message in follower.follow(keeper, skip=2):  # the session's notice and text
                followed.append(message)
                if isinstance(message, Notice) and message.subtype == "plan":
                    await follower.interrupt()
    assert [type(message) for message in seen] == [Notice, AgentText, Notice]
    assert follower.session_id == session.session_id
    assert [type(message) for message in followed] == [Notice, Result]
    assert followed[0] == seen[-1]
    assert isinstance(followed[-1], Result)
    assert "cancelled" in followed[-1].text


async def test_an_acp_agent_takes_no_output_schema_and_a_model_only_with_its_flag(node: NodeHandle) -> None:
    with pytest.raises(ConfigError, match="no structured output"):
        get_agent("acp", _options(output_schema={"type": "object"}))
    with pytest.raises(ConfigError, match="no model_flag"):
        get_agent("acp", _options(model="m"))
    agent = get_agent("acp", _options(model="m", model_flag="--model"))
    assert isinstance(agent, ConfiguredAcpAgent)
    assert agent.command(node, "/h", resume=None) == [sys.executable, "-c", _FAKE, "--model", "m"]
    with pytest.raises(ConfigError, match="inside it"):
        get_agent("acp", _options(state_paths=["../x"]))
