"""Codex's silence limit counts only the model's silence: while any item of the turn runs (a
shell command, an MCP tool call, a web search, a file change), quiet is the tool's work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeprov import get_agent
from nodeprov.agents import Result, ToolResult
from nodeprov.errors import DeadlineError

pytestmark = pytest.mark.anyio


def _fake_codex(tmp_path: Path, item: dict[str, object], seconds: float) -> str:
    """A FAKE codex: a turn whose one item runs ``seconds`` without a word, then ends."""
    started = {**item, "id": "item-1", "status": "in_progress"}
    done = {**item, "id": "item-1", "status": "completed"}
    lines = [
        {"type": "thread.started", "thread_id": "thread-1"},
        {"type": "turn.started"},
        {"type": "item.started", "item": started},
    ]
    tail = [
        {"type": "item.completed", "item": done},
        {"type": "turn.completed", "usage": {"input_tokens": 1}},
    ]
    path = tmp_path / "codex"
    path.write_text(
        "#!/bin/sh\n"
        + "".join(f"printf '%s\\n' '{json.dumps(line)}'\n" for line in lines)
        + f"sleep {seconds}\n"
        + "".join(f"printf '%s\\n' '{json.dumps(line)}'\n" for line in tail)
    )
    path.chmod(0o700)
    return str(path)


@pytest.mark.parametrize(
    "item",
    [
        {
            "type": "mcp_tool_call",
            "server": "docs",
            "tool": "search",
            "arguments": {},
            "result": {"content": []},
        },
        {"type": "web_search", "query": "anyio"},
        {"type": "command_execution", "command": "make test", "aggregated_output": "", "exit_code": 0},
        {"type": "a_kind_codex_adds_later"},
    ],
    ids=lambda item: str(item["type"]),
)
async def test_a_running_item_is_no_silence(
    tmp_path: Path, local_node: object, item: dict[str, object]
) -> None:
    # The item runs twice the limit. The limit leaves the start-up room (the process and its
    # guard, before the first line, count as the model's silence): 0.5 s was once too little
    # on a machine running two suites at once.
    agent = get_agent("codex", {"cli_path": _fake_codex(tmp_path, item, 4.0), "no_output_timeout": 2.0})
    async with agent.session(local_node) as session:  # type: ignore[arg-type]
        messages = [message async for message in session.turn("go")]
    assert isinstance(messages[-1], Result)
    assert not messages[-1].is_error
    if item["type"] != "a_kind_codex_adds_later":
        assert any(isinstance(m, ToolResult) for m in messages)


async def test_the_models_own_silence_still_ends_the_turn(tmp_path: Path, local_node: object) -> None:
    path = tmp_path / "codex"
    path.write_text(
        '#!/bin/sh\nprintf \'%s\\n\' \'{"type": "thread.started", "thread_id": "t"}\'\nexec sleep 60\n'
    )
    path.chmod(0o700)
    agent = get_agent("codex", {"cli_path": str(path), "no_output_timeout": 0.5})
    async with agent.session(local_node) as session:  # type: ignore[arg-type]
        with pytest.raises(DeadlineError, match="said nothing"):
            async for _ in session.turn("go"):
                pass
