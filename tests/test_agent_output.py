"""An agent whose output is not its protocol ends the turn clearly and soon: one that exits
before answering anything (say, before ``initialize``) at once, with its status and its last
words on stderr; one that prints noise and then nothing, once its grace is up."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from nodeprov import NodeHandle, SpawnedProcess, SpawnOptions, get_agent
from nodeprov.agents import AgentText, Result
from nodeprov.agents.claude import channel
from nodeprov.errors import AgentError, AgentExitError, AgentOutputError
from nodeprov.testing import fake_agent_command

pytestmark = pytest.mark.anyio


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "not-claude"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o700)
    return str(path)


@pytest.mark.parametrize("gone_first", [False, True], ids=["exits", "gone before written to"])
async def test_an_agent_that_exits_before_answering_is_reported_at_once(
    tmp_path: Path, local_node: NodeHandle, monkeypatch: pytest.MonkeyPatch, gone_first: bool
) -> None:
    cli = _script(tmp_path, "echo 'claude: cannot read the settings file' >&2; exit 0")
    if gone_first:  # the write of `initialize` fails, rather than the read finding the end
        spawn = local_node.spawn

        async def spawned_and_gone(options: SpawnOptions) -> SpawnedProcess:
            process = await spawn(options)
            await process.wait()
            return process

        monkeypatch.setattr(local_node, "spawn", spawned_and_gone)
    agent = get_agent("claude", {"cli_path": cli})
    with anyio.fail_after(30):  # the SDK's own wait for `initialize` is a minute
        async with agent.session(local_node) as session:
            with pytest.raises(AgentExitError, match="status 0 before answering initialize") as raised:
                async for _ in session.turn("go"):
                    pass
    assert "cannot read the settings file" in str(raised.value).splitlines()[0]


async def test_noise_then_silence_ends_the_turn(
    tmp_path: Path, local_node: NodeHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent answers, prints a line that is not its protocol, and waits for ever."""
    monkeypatch.setattr(channel, "NOISE_GRACE", 1.0)
    steps = [{"garbage": "Please log in at https://example.invalid and press Enter:"}, {"stall": True}]
    options = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
    agent = get_agent("claude", options)
    with anyio.fail_after(30):
        async with agent.session(local_node) as session:
            with pytest.raises(
                AgentOutputError, match=r"not its protocol .*Please log in.* and then nothing"
            ):
                async for _ in session.turn("go"):
                    pass


async def test_noise_followed_by_the_protocol_is_no_failure(
    tmp_path: Path, local_node: NodeHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channel, "NOISE_GRACE", 1.0)
    steps = [{"garbage": "a warning the CLI printed"}, {"sleep": 0.1}, {"text": "done"}]
    options = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
    async with get_agent("claude", options).session(local_node) as session:
        messages = [message async for message in session.turn("go")]
    assert type(messages[-1]).__name__ == "Result"


def _fake(tmp_path: Path, steps: list[dict[str, object]], refuse: str = "") -> dict[str, object]:
    env = {"NODEPROV_FAKE_AGENT": json.dumps(steps), "NODEPROV_FAKE_AGENT_REFUSE": refuse}
    return {"cli_path": fake_agent_command(tmp_path), "env": env}


async def test_an_agent_that_refuses_to_initialize_ends_the_turn_saying_so(
    tmp_path: Path, local_node: NodeHandle
) -> None:
    agent = get_agent("claude", _fake(tmp_path, [{"text": "done"}], refuse="initialize"))
    with anyio.fail_after(30):
        async with agent.session(local_node) as session:
            with pytest.raises(AgentError, match="refused to initialize: no initialize now"):
                async for _ in session.turn("go"):
                    pass


async def test_a_refused_interrupt_leaves_the_turn_and_the_session_going(
    tmp_path: Path, local_node: NodeHandle
) -> None:
    """The CLI may refuse an interrupt (the turn was ending): the turn ends as it would have,
    and the next turn runs."""
    flag = tmp_path / "interrupted"
    agent = get_agent(
        "claude", _fake(tmp_path, [{"wait_for": str(flag)}, {"text": "done"}], refuse="interrupt")
    )
    with anyio.fail_after(30):
        async with agent.session(local_node) as session:
            messages = []
            async for message in session.turn("go"):
                messages.append(message)
                if type(message).__name__ == "Notice" and not flag.exists():
                    await session.interrupt()
                    flag.touch()
            assert [m.text for m in messages if isinstance(m, AgentText)] == ["done"]
            second = [message async for message in session.turn("again")]
    assert isinstance(messages[-1], Result)
    assert isinstance(second[-1], Result)
    assert not second[-1].is_error


async def test_the_clis_own_requests_are_answered_with_an_error(
    tmp_path: Path, local_node: NodeHandle
) -> None:
    """No permission prompt, hook or SDK MCP server is registered: a request for one is
    refused at once, never left unanswered (the CLI would wait on it)."""
    agent = get_agent("claude", _fake(tmp_path, [{"ask": "can_use_tool"}, {"ask": "hook_callback"}]))
    with anyio.fail_after(30):
        async with agent.session(local_node) as session:
            said = [m.text for m in [m async for m in session.turn("go")] if isinstance(m, AgentText)]
    assert said == ["answered: error", "answered: error"]


def test_a_bad_option_names_the_field_and_the_reason_in_one_line() -> None:
    from nodeprov.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        get_agent("claude", {"max_turns": -3, "colour": "red"})
    (line,) = str(raised.value).splitlines()
    assert "max_turns: Input should be greater than 0" in line
    assert "colour: Extra inputs are not permitted" in line
    assert "validation error" not in line
