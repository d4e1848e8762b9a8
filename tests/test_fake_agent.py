"""The fake agent executable (nodeprov.testing.fake_agent) through the SDK and the bridge."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    Message,
    ResultMessage,
    SystemMessage,
    TextBlock,
    UserMessage,
    query,
)

from nodeprov import AgentExitError, AgentOutputError, NodeHandle, StopPolicy, get_provider
from nodeprov.agents.claude import NodeTransport
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until

pytestmark = pytest.mark.anyio

FAST_STOP = StopPolicy(eof_grace=0.3, term_grace=0.5, kill_grace=5)
TIMEOUT = 30


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as node:
        yield node


def agent(tmp_path: Path, *steps: dict[str, Any], **fields: Any) -> ClaudeAgentOptions:
    env = {"NODEPROV_FAKE_AGENT": json.dumps(steps)}
    return ClaudeAgentOptions(cli_path=fake_agent_command(tmp_path), env=env, **fields)


async def run_query(node: NodeHandle, options: ClaudeAgentOptions, **kwargs: Any) -> list[Message]:
    transport = NodeTransport.for_node(node, options, stop_policy=FAST_STOP, **kwargs)
    with anyio.fail_after(TIMEOUT):
        return [message async for message in query(prompt="go", options=options, transport=transport)]


def texts(messages: list[Message]) -> list[str]:
    return [
        block.text
        for message in messages
        if isinstance(message, AssistantMessage)
        for block in message.content
        if isinstance(block, TextBlock)
    ]


def inits(messages: list[Message]) -> list[SystemMessage]:
    return [m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init"]


def results(messages: list[Message]) -> list[ResultMessage]:
    return [m for m in messages if isinstance(m, ResultMessage)]


async def test_client_gets_init_text_and_result_for_each_message(node: NodeHandle, tmp_path: Path) -> None:
    options = agent(tmp_path, {"text": "hello"}, {"sleep": 0.05}, {"text": "done"})
    transport = NodeTransport.for_node(node, options, stop_policy=FAST_STOP)
    turns: list[list[Message]] = []
    with anyio.fail_after(TIMEOUT):
        async with ClaudeSDKClient(options=options, transport=transport) as client:
            for prompt in ("first", "second"):
                await client.query(prompt)
                turns.append([m async for m in client.receive_response()])
    for messages in turns:
        [init] = inits(messages)
        [result] = results(messages)
        assert init.data["cwd"] == node.workdir
        assert texts(messages) == ["hello", "done"]
        assert result.subtype == "success"
        assert not result.is_error
        assert result.result == "done"
        assert result.session_id == init.data["session_id"]
        assert result.usage is not None
        assert result.usage["output_tokens"] > 0
        assert result.total_cost_usd is not None
        assert result.duration_ms >= 0
    assert results(turns[0])[0].session_id == results(turns[1])[0].session_id
    uuid.UUID(results(turns[0])[0].session_id)
    assert [results(turn)[0].num_turns for turn in turns] == [1, 2]


async def test_resume_keeps_the_session_id(node: NodeHandle, tmp_path: Path) -> None:
    first = results(await run_query(node, agent(tmp_path, {"text": "a"})))[0].session_id
    second = results(await run_query(node, agent(tmp_path, {"text": "b"})))[0].session_id
    assert first != second
    resumed = await run_query(node, agent(tmp_path, {"text": "c"}, resume=first))
    assert inits(resumed)[0].data["session_id"] == first
    assert results(resumed)[0].session_id == first
    forked = await run_query(node, agent(tmp_path, {"text": "d"}, resume=first, fork_session=True))
    assert results(forked)[0].session_id not in (first, second)


async def test_interrupt_ends_a_stalled_turn_like_the_cli(node: NodeHandle, tmp_path: Path) -> None:
    options = agent(tmp_path, {"text": "thinking"}, {"stall": True})
    transport = NodeTransport.for_node(node, options, stop_policy=FAST_STOP)
    with anyio.fail_after(TIMEOUT):
        async with ClaudeSDKClient(options=options, transport=transport) as client:
            await client.query("think forever")
            seen: list[Message] = []
            async for message in client.receive_messages():
                seen.append(message)
                if isinstance(message, AssistantMessage):
                    break
            await client.interrupt()
            seen += [m async for m in client.receive_response()]
            interrupted = [m for m in seen if isinstance(m, UserMessage)]
            assert interrupted[0].content == [TextBlock(text="[Request interrupted by user]")]
            [result] = results(seen)
            assert result.subtype == "error_during_execution"
            assert result.is_error
            assert result.stop_reason is None
            # The session goes on: the next message gets a turn of its own.
            await client.query("again")
            async for message in client.receive_messages():
                if isinstance(message, AssistantMessage):
                    break
            await client.interrupt()
            assert results([m async for m in client.receive_response()])[0].is_error


async def test_a_retry_step_is_an_api_retry_notice(node: NodeHandle, tmp_path: Path) -> None:
    step = {"retry": "connect ECONNREFUSED 127.0.0.1:9"}
    messages = await run_query(node, agent(tmp_path, step, step, {"text": "through"}))
    retries = [m for m in messages if isinstance(m, SystemMessage) and m.subtype == "api_retry"]
    assert [m.data["attempt"] for m in retries] == [1, 2]
    notice = retries[0].data
    assert notice["error"] == "connect ECONNREFUSED 127.0.0.1:9"
    assert notice["error_status"] is None
    assert {"max_retries", "retry_delay_ms", "session_id", "uuid"} <= set(notice)
    assert results(messages)[0].subtype == "success"


async def test_an_error_result_in_the_agents_words(node: NodeHandle, tmp_path: Path) -> None:
    options = agent(tmp_path, {"error_result": "API Error: 529 overloaded"}, {"text": "never said"})
    transport = NodeTransport.for_node(node, options, stop_policy=FAST_STOP)
    seen: list[Message] = []

    async def consume() -> None:
        async for message in query(prompt="go", options=options, transport=transport):
            seen.append(message)

    with anyio.fail_after(TIMEOUT), pytest.raises(AgentExitError) as caught:
        await consume()
    assert caught.value.exit_code == 1  # as the real CLI exits after an error result
    [result] = results(seen)
    assert result.is_error
    assert result.result == "API Error: 529 overloaded"
    assert texts(seen) == ["API Error: 529 overloaded"]


async def test_exit_without_a_result(node: NodeHandle, tmp_path: Path) -> None:
    options = agent(tmp_path, {"text": "hi"}, {"stderr": "fatal: out of luck"}, {"exit": 3})
    with pytest.raises(AgentExitError) as caught:
        await run_query(node, options)
    assert caught.value.exit_code == 3
    assert "out of luck" in str(caught.value)


async def test_garbage_output(node: NodeHandle, tmp_path: Path) -> None:
    skipped = await run_query(node, agent(tmp_path, {"garbage": "debug noise"}, {"text": "fine"}))
    assert texts(skipped) == ["fine"]
    with pytest.raises(AgentOutputError, match="not valid JSON"):
        await run_query(node, agent(tmp_path, {"garbage": "{not json"}, {"text": "never"}))


async def test_close_stdout_and_keep_running(node: NodeHandle, tmp_path: Path) -> None:
    options = agent(tmp_path, {"close_stdout": True}, {"stall": True})
    with pytest.raises(AgentExitError, match="still running"):
        await run_query(node, options, exit_timeout=0.5)


async def test_ignore_term_then_stall_is_killed_on_close(node: NodeHandle, tmp_path: Path) -> None:
    options = agent(tmp_path, {"ignore_term": True}, {"text": "stuck"}, {"stall": True})
    transport = NodeTransport.for_node(node, options, stop_policy=FAST_STOP)
    with anyio.fail_after(TIMEOUT):
        async with ClaudeSDKClient(options=options, transport=transport) as client:
            await client.query("go")
            async for message in client.receive_messages():
                if isinstance(message, AssistantMessage):
                    break
            process = transport.process
    assert process is not None
    assert process.returncode == -9  # stdin EOF and SIGTERM did not end it


async def test_spawn_wait_for_and_write_file(node: NodeHandle, tmp_path: Path) -> None:
    marker = unique_marker()
    options = agent(
        tmp_path,
        {"write_file": ["notes.txt", "written by the fake agent"]},
        {"spawn": ["sh", "-c", f"echo started > child.part && mv child.part child.txt; exec sleep {marker}"]},
        {"wait_for": "child.txt"},  # else the agent may end, and its child with it, before it ran
        {"text": "ok"},
    )
    await run_query(node, options)
    assert (Path(node.workdir) / "notes.txt").read_text() == "written by the fake agent"
    assert (Path(node.workdir) / "child.txt").read_text() == "started\n"

    async def gone() -> bool:
        return not host_processes_matching(marker)

    assert await wait_until(gone, 10)  # what the agent left ends with it


async def test_runs_on_its_own_and_ignores_unknown_flags(tmp_path: Path) -> None:
    command = fake_agent_command(tmp_path)
    assert os.access(command, os.X_OK)
    with anyio.fail_after(10):
        done = await anyio.run_process(
            [command, "--print", "--resume", "s-1", "--unknown-flag", "x"],
            input=json.dumps({"type": "user", "message": {"role": "user", "content": "hi"}}).encode() + b"\n",
            env={"NODEPROV_FAKE_AGENT": '[{"text": "hi"}]', "PATH": "/usr/bin:/bin"},
        )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["system", "system", "assistant", "result", "system"]
    assert {line["session_id"] for line in lines} == {"s-1"}


async def test_an_unknown_step_is_refused_at_start(node: NodeHandle, tmp_path: Path) -> None:
    with pytest.raises(AgentExitError, match="NODEPROV_FAKE_AGENT must be") as caught:
        await run_query(node, agent(tmp_path, {"text": "fine"}, {"dance": True}))
    assert caught.value.exit_code == 1
