"""The conformance suite every agent must pass, against its real CLI and a scripted model.

An :class:`AgentHarness` says how to drive one agent: its options pointing at a running
scripted model, and how to script that model's turns (text, a shell command, a stall).
Each ``check_*`` coroutine is one requirement, run on a node::

    @pytest.mark.parametrize("check", AGENT_CHECKS)
    async def test_conformance(check, harness, node, tmp_path):
        await check(harness, node, tmp_path)
"""

from __future__ import annotations

import posixpath
import socket
import textwrap
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from ..agents import AgentSession, AgentText, Message, Result, StateKey, ToolResult, ToolUse
from ..agents.registry import agent_class, get_agent
from ..errors import AgentError, ConfigError, DeadlineError
from ..node import NodeHandle
from ..prompts import ImageBlock, Prompt, TextBlock
from .conformance import host_processes_matching, unique_marker, wait_until
from .images import sample_png

__all__ = [
    "AGENT_CHECKS",
    "AgentHarness",
    "MemoryArchive",
    "check_image_turn",
    "check_resume_on_a_fresh_node",
    "run_turn",
]

TURN_TIMEOUT = 120.0


@dataclass
class AgentHarness:
    """One agent against its scripted model.

    ``options``: the agent's options, talking to the model, allowed to run commands.
    ``script(turns)``: append turns to the model's script. ``text(t)``, ``shell(cmd)`` and
    ``stall()`` make turns, and ``structured(value)`` a turn whose answer is that JSON value
    (as the agent gives an answer under an output schema); ``requests()`` gives the text of
    each agent request the model received, oldest first, and ``images()`` the images of
    each (media type and decoded bytes); ``down(port)`` gives options whose endpoint is that
    closed port. ``tools``: the CLIs its nodes get (:attr:`NodeConfig.tools`); None: the
    agent's own CLI on this machine (:meth:`Agent.local_cli`).
    """

    agent: str
    options: dict[str, Any]
    script: Callable[[Sequence[Any]], None]
    text: Callable[[str], Any]
    shell: Callable[[str], Any]
    stall: Callable[[], Any]
    structured: Callable[[Any], Any]
    requests: Callable[[], list[str]]
    images: Callable[[], list[list[tuple[str, bytes]]]]
    down: Callable[[int], dict[str, Any]]
    tools: dict[str, str] | None = None


class MemoryArchive:
    """A :class:`~nodeprov.agents.SessionArchive` in memory: where a session's state goes
    between two nodes in :func:`check_resume_on_a_fresh_node`."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, str], list[dict[str, Any]]] = {}

    @staticmethod
    def _key(key: StateKey) -> tuple[str, str, str]:
        return key["project_key"], key["session_id"], key.get("subpath", "")

    def add(self, key: StateKey, entries: list[dict[str, Any]], *, summarize: Any = None) -> None:
        self.entries.setdefault(self._key(key), []).extend(entries)

    async def flush(self) -> None:
        pass

    async def load(self, key: StateKey) -> list[dict[str, Any]] | None:
        return list(self.entries.get(self._key(key), [])) or None

    async def subpaths(self, key: StateKey) -> list[str]:
        project, session, _ = self._key(key)
        return sorted(sub for (p, s, sub) in self.entries if (p, s) == (project, session) and sub)

    async def replace(self, key: StateKey, entries: list[dict[str, Any]], *, summarize: Any = None) -> None:
        self.entries[self._key(key)] = list(entries)


async def run_turn(session: AgentSession, prompt: Prompt) -> list[Message]:
    """Every message of one turn, bounded in time."""
    with anyio.fail_after(TURN_TIMEOUT):
        return [message async for message in session.turn(prompt)]


def _result(messages: list[Message]) -> Result:
    assert messages, "the turn said nothing"
    result = messages[-1]
    assert isinstance(result, Result), messages
    return result


async def check_text_turn(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """A turn of text: the agent's words, then a successful result; its session id is known."""
    harness.script([harness.text("hello from the scripted model")])
    async with get_agent(harness.agent, harness.options).session(node) as session:
        messages = await run_turn(session, "say hello")
    result = _result(messages)
    assert not result.is_error, result
    assert "hello from the scripted model" in [m.text for m in messages if isinstance(m, AgentText)]
    assert session.session_id
    assert all(m.raw is not None for m in messages)  # the agent's own message is kept


async def check_tool_turn(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """A command the model asks for really runs on the node: it writes a file there."""
    name = f"made-{unique_marker().replace('.', '')}.txt"
    harness.script([harness.shell(f"echo made on the node > {name}"), harness.text("done")])
    async with get_agent(harness.agent, harness.options).session(node) as session:
        messages = await run_turn(session, "make the file")
    assert not _result(messages).is_error
    assert any(isinstance(m, ToolUse) for m in messages), messages
    assert any(isinstance(m, ToolResult) and not m.is_error for m in messages), messages
    async with node.read_file(posixpath.join(node.workdir, name)) as chunks:
        assert b"".join([chunk async for chunk in chunks]) == b"made on the node\n"


async def check_resume(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """A session resumed by its id carries the earlier conversation to the model."""
    harness.script([harness.text("noted"), harness.text("quince")])
    agent = get_agent(harness.agent, harness.options)
    async with agent.session(node) as first:
        assert not _result(await run_turn(first, "remember: the word is quince")).is_error
    assert first.session_id
    async with agent.session(node, resume=first.session_id) as again:
        messages = await run_turn(again, "what was the word?")
    assert not _result(messages).is_error
    assert again.session_id == first.session_id
    last = harness.requests()[-1]
    assert "remember: the word is quince" in last, last
    assert "what was the word?" in last


def _long_command(harness: AgentHarness, node: NodeHandle) -> tuple[str, AgentSession]:
    """A session whose model asks for a ``sleep`` findable by its marker."""
    marker = unique_marker()
    harness.script([harness.shell(f"sh -c 'sleep {marker}'"), harness.text("unreachable")])
    return marker, get_agent(harness.agent, harness.options).session(node)


async def check_resume_on_a_fresh_node(
    harness: AgentHarness, node: NodeHandle, fresh: NodeHandle, tmp_path: Path
) -> None:
    """A session whose state went off ``node`` through an archive (:meth:`Agent.export_state`)
    resumes on ``fresh``, another node where nothing of it was (:meth:`Agent.import_state`):
    the model is sent the earlier conversation. Not in :data:`AGENT_CHECKS`: it needs a
    second node."""
    harness.script([harness.text("noted"), harness.text("quince")])
    agent, archive = get_agent(harness.agent, harness.options), MemoryArchive()
    async with agent.session(node, archive=archive) as first:
        assert not _result(await run_turn(first, "remember: the word is quince")).is_error
    assert first.session_id
    key = agent.state_key(node)
    await agent.export_state(node, first.session_id, key, archive)
    assert await agent.import_state(fresh, first.session_id, key, archive)
    async with agent.session(fresh, resume=first.session_id) as again:
        messages = await run_turn(again, "what was the word?")
    assert not _result(messages).is_error
    last = harness.requests()[-1]
    assert "remember: the word is quince" in last, last
    assert "what was the word?" in last


async def check_image_turn(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """An image of the prompt reaches the model byte for byte, with the prompt's text."""
    image = ImageBlock.from_bytes(sample_png(16, 9, seed=5))
    harness.script([harness.text("a gradient")])
    async with get_agent(harness.agent, harness.options).session(node) as session:
        messages = await run_turn(session, [TextBlock("what is in this picture?"), image])
    assert not _result(messages).is_error
    assert harness.images()[-1] == [("image/png", image.data)]
    assert "what is in this picture?" in harness.requests()[-1]


async def check_interrupt_leaves_no_process(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """An interrupt mid-turn ends the turn with a result; closing leaves no process."""
    marker, session = _long_command(harness, node)
    messages: list[Message] = []

    async def turn() -> None:
        messages.extend(await run_turn(session, "run the long command"))

    async with session, anyio.create_task_group() as tg:
        tg.start_soon(turn)
        assert await wait_until(_running(marker), 60), "the command never started"
        await session.interrupt()
    assert isinstance(messages[-1], Result), messages
    assert await wait_until(_gone(marker), 30), "a process of the turn outlived it"


async def check_abort_leaves_no_process(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """Aborting mid-turn (closing the session, as a cancelled run does) leaves no process."""
    marker, session = _long_command(harness, node)
    async with anyio.create_task_group() as tg:

        async def turn() -> None:
            async with session:
                await run_turn(session, "run the long command")

        tg.start_soon(turn)
        assert await wait_until(_running(marker), 60), "the command never started"
        tg.cancel_scope.cancel()
    assert await wait_until(_gone(marker), 30), "a process of the turn outlived the abort"


async def check_endpoint_down(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """A model endpoint that is down ends the turn with a clear error within the no-output
    limit (the CLIs retry for a long time, or for ever, on their own)."""
    with socket.socket() as probe:  # a port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = {**harness.down(port), "no_output_timeout": 5}
    started = anyio.current_time()
    async with get_agent(harness.agent, options).session(node) as session:
        with pytest.raises(DeadlineError, match="said nothing for 5 s"):
            await run_turn(session, "anyone there?")
    assert anyio.current_time() - started < 5 + 30


async def check_malformed_output(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """An agent CLI whose output is not its protocol ends the turn with a clear error."""
    cli = posixpath.join(node.workdir, f"garbled-{harness.agent}")
    script = textwrap.dedent("""\
        #!/bin/sh
        echo '{"type": "thread.started", "thread_id": '
        sleep 1
    """)
    await node.write_file(cli, script.encode(), mode=0o755)
    options = {**harness.options, "cli_path": cli, "ship_cli": False}
    async with get_agent(harness.agent, options).session(node) as session:
        with pytest.raises(AgentError, match="JSON"):
            await run_turn(session, "hello?")


_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


async def check_structured_output(harness: AgentHarness, node: NodeHandle, tmp_path: Path) -> None:
    """Under an output schema a matching answer is the result's ``structured`` value, and one
    that does not match ends the turn with an error result that says so (the Claude CLI
    refuses it and the model, asked again, answers in plain text here). An agent without
    structured output (its capabilities say so) refuses an output schema in its options."""
    if not agent_class(harness.agent).capabilities.structured_output:
        with pytest.raises(ConfigError, match="output"):
            get_agent(harness.agent, {**harness.options, "output_schema": _SCHEMA})
        return
    agent = get_agent(harness.agent, {**harness.options, "output_schema": _SCHEMA})
    harness.script([harness.structured({"answer": "42"})])
    async with agent.session(node) as session:
        result = _result(await run_turn(session, "answer in JSON"))
    assert not result.is_error, result
    assert result.structured == {"answer": "42"}
    harness.script([harness.structured({"answer": 42})])
    async with agent.session(node) as session:
        result = _result(await run_turn(session, "answer in JSON"))
    assert result.is_error, result
    assert "output schema" in result.text, result


def _running(marker: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(host_processes_matching(marker))

    return check


def _gone(marker: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not host_processes_matching(marker)

    return check


AGENT_CHECKS = (
    check_text_turn,
    check_tool_turn,
    check_image_turn,
    check_resume,
    check_interrupt_leaves_no_process,
    check_abort_leaves_no_process,
    check_endpoint_down,
    check_malformed_output,
    check_structured_output,
)
