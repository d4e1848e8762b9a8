"""The agent seam without an agent CLI: routing, the message model, the Codex event table,
structured output, options that never keep a secret, and Codex's argument vector."""

# ruff: noqa: E501 - tables of events, one per line
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeprov import AgentNotFoundError, ConfigError, get_agent, get_provider, route_model
from nodeprov.agents import AgentText, ErrorMessage, Notice, Result, Thinking, ToolResult, ToolUse
from nodeprov.agents.codex import _Converter
from nodeprov.agents.messages import message_from_json, message_to_json
from nodeprov.agents.structured import check_structured
from nodeprov.testing.agent_conformance import MemoryArchive


@pytest.mark.parametrize(
    ("model", "agent"),
    [
        ("claude-sonnet-4-5", "claude"),
        ("claude-opus-4-5-20251101", "claude"),
        ("opus", "claude"),
        ("sonnet", "claude"),
        ("haiku", "claude"),
        ("gpt-5-codex", "codex"),
        ("gpt-5", "codex"),
        ("o1", "codex"),
        ("o3-mini", "codex"),
        ("o4-mini", "codex"),
        ("codex-mini-latest", "codex"),
        ("llama-3.1-70b", "claude"),  # nobody claims it: the default agent
        ("o5", "claude"),
        ("sonnet-ish", "claude"),
        (None, "claude"),
    ],
)
def test_models_route_to_their_agent(model: str | None, agent: str) -> None:
    assert route_model(model) == agent


def test_an_explicit_agent_wins_over_routing() -> None:
    assert route_model("gpt-5-codex", "claude") == "claude"


def test_every_message_kind_survives_its_stored_form() -> None:
    messages = [
        AgentText("hi", raw={"type": "x"}),
        Thinking("hmm"),
        ToolUse("t1", "command_execution", {"command": "ls"}),
        ToolResult("t1", "a\nb", is_error=True),
        Result(False, "done", session_id="s", usage={"input_tokens": 3}, cost_usd=0.01, structured={"a": 1}),
        ErrorMessage("boom"),
        Notice("api_retry", "HTTP 529", retry=True),
    ]
    for message in messages:
        again = message_from_json(json.loads(json.dumps(message_to_json(message))))
        assert again == message
        assert again.raw == message.raw
    with pytest.raises(ValueError, match="not an agent message"):
        message_from_json({"kind": "nope"})


def test_codex_events_become_messages() -> None:
    converter = _Converter()
    events: list[dict[str, Any]] = [
        {"type": "thread.started", "thread_id": "th-1"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "i0", "type": "reasoning", "text": "think"}},
        {"type": "item.started", "item": {"id": "i1", "type": "command_execution", "command": "ls", "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "i1", "type": "command_execution", "command": "ls", "aggregated_output": "x\n", "exit_code": 2, "status": "failed"}},
        {"type": "item.completed", "item": {"id": "i2", "type": "file_change", "changes": [{"path": "a.py", "kind": "add"}], "status": "completed"}},
        {"type": "item.started", "item": {"id": "i3", "type": "mcp_tool_call", "server": "db", "tool": "q", "arguments": {"sql": "1"}, "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "i3", "type": "mcp_tool_call", "server": "db", "tool": "q", "status": "failed", "error": {"message": "no db"}}},
        {"type": "item.completed", "item": {"id": "i4", "type": "web_search", "query": "anyio"}},
        {"type": "item.updated", "item": {"id": "i5", "type": "todo_list", "items": [{"text": "a", "completed": True}, {"text": "b", "completed": False}]}},
        {"type": "item.completed", "item": {"id": "i6", "type": "error", "message": "item failed"}},
        {"type": "error", "message": "Reconnecting... 1/5"},
        {"type": "error", "message": "stream broke"},
        {"type": "item.completed", "item": {"id": "i7", "type": "agent_message", "text": "all done"}},
        {"type": "turn.completed", "usage": {"input_tokens": 7, "output_tokens": 2}},
    ]  # fmt: skip
    messages = [m for event in events for m in converter.convert(event)]
    assert [type(m).__name__ for m in messages] == [
        "Notice", "Notice", "Thinking", "ToolUse", "ToolResult", "ToolUse", "ToolResult", "ToolUse",
        "ToolResult", "ToolUse", "ToolResult", "Notice", "Notice", "Notice", "ErrorMessage",
        "AgentText", "Result",
    ]  # fmt: skip
    assert messages[0] == Notice("thread.started", session_id="th-1")
    assert messages[3] == ToolUse("i1", "command_execution", {"command": "ls"})
    assert messages[4] == ToolResult("i1", "x\n", is_error=True)
    assert messages[6] == ToolResult("i2", "add a.py", is_error=False)
    assert messages[7] == ToolUse("i3", "mcp:db/q", {"sql": "1"})
    assert messages[8] == ToolResult("i3", "no db", is_error=True)
    assert messages[11] == Notice("todo_list", "[x] a\n[ ] b")
    assert messages[12] == Notice("warning", "item failed")  # Codex's error items are not fatal
    assert messages[13] == Notice("error", "Reconnecting... 1/5", retry=True)
    assert messages[-1] == Result(
        False, "all done", session_id="th-1", usage={"input_tokens": 7, "output_tokens": 2}
    )
    assert all(m.raw is not None for m in messages)
    failed = _Converter().convert({"type": "turn.failed", "error": {"message": "quota"}})
    assert failed == [Result(True, "quota")]


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_structured_output_is_parsed_or_a_clear_error() -> None:
    assert check_structured(Result(False, '{"n": 3}'), SCHEMA).structured == {"n": 3}
    assert check_structured(Result(False, '```json\n{"n": 3}\n```'), SCHEMA).structured == {"n": 3}
    wrong = check_structured(Result(False, '{"n": "three"}'), SCHEMA)
    assert wrong.is_error
    assert "does not match the output schema" in wrong.text
    prose = check_structured(Result(False, "three"), SCHEMA)
    assert prose.is_error
    assert "not JSON" in prose.text
    assert check_structured(Result(False, "", structured={"n": 1}), SCHEMA, {"n": 1}).structured == {"n": 1}
    assert check_structured(Result(True, "failed"), SCHEMA) == Result(True, "failed")


def test_options_keep_no_secret_and_reject_unknown_fields() -> None:
    canary = "sk-canary-7f3a"
    mcp = {"db": {"command": "x", "env": {"TOKEN": canary}}}
    claude = get_agent("claude", {"env": {"K": canary}, "mcp_servers": mcp, "model": "opus"})
    assert claude.options.storable() == {"model": "opus"}
    assert canary not in repr(claude.options)
    codex = get_agent("codex", {"env": {"K": canary}, "model": "gpt-5"})
    assert codex.options.storable() == {"model": "gpt-5"}
    with pytest.raises(ConfigError, match="max_turns"):
        get_agent("codex", {"max_turns": 3})  # a claude option
    with pytest.raises(ConfigError):
        get_agent("claude", {"permission": "yolo"})


@pytest.mark.anyio
async def test_codex_argv_carries_no_prompt(tmp_path: Path) -> None:
    """The prompt goes on stdin (``-``): never in an argument vector, which ``ps`` and a
    cluster's audit log show and the kernel caps."""
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        agent = get_agent("codex", {"model": "gpt-5", "permission": "read-only", "model_provider": {"base_url": "http://127.0.0.1:1/v1", "env_key": "K"}})  # fmt: skip
        argv = agent.command(node, resume="th-1", schema_file=None)  # type: ignore[attr-defined]
    assert argv[-2:] == ["--", "-"]
    assert argv[argv.index("resume") + 1] == "th-1"
    assert argv[argv.index("--sandbox") + 1] == "read-only"
    assert (
        'model_providers.nodeprov={ name = "custom", base_url = "http://127.0.0.1:1/v1", wire_api = "responses", env_key = "K" }'
        in argv
    )


def test_the_codex_agent_does_not_load_the_claude_sdk() -> None:
    """Agents are independent: Codex runs on a control plane without the Claude SDK loaded
    (whose import alone takes most of a second)."""
    probe = "import sys, nodeprov.agents.codex; print('claude_agent_sdk' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"


def test_an_unknown_agent_is_an_agent_not_found_error() -> None:
    with pytest.raises(AgentNotFoundError, match=r"no agent named 'nope' \(installed: .*claude.*codex"):
        get_agent("nope")
    assert issubclass(AgentNotFoundError, ConfigError)


def test_a_model_nobody_claims_needs_a_fallback_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback is the agents' own declaration (the core names none): without one, a
    model no agent claims is refused, saying so."""
    from nodeprov.agents.registry import agent_class

    claude = agent_class("claude")
    assert claude.fallback
    assert not agent_class("codex").fallback
    monkeypatch.setattr(claude, "fallback", False)
    with pytest.raises(AgentNotFoundError, match="no installed agent takes models it does not claim"):
        route_model("llama-3.1-70b")
    assert route_model("gpt-5") == "codex"  # a claimed model still routes


def test_importing_the_errors_loads_no_agent() -> None:
    """What every provider imports (``nodeprov.errors``, and so ``nodeprov``) loads no agent
    module and no agent SDK; the agent registry comes on first use."""
    probe = (
        "import sys, nodeprov.errors, nodeprov;"
        "print(sorted(m for m in sys.modules if m.startswith(('nodeprov.agents', 'claude_agent_sdk'))));"
        "nodeprov.get_agent;"
        "print('nodeprov.agents.registry' in sys.modules)"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert shown.stdout.split("\n")[:2] == ["[]", "True"]


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["claude", "codex", "opencode"])
async def test_a_forked_session_is_a_copy_under_a_new_id_of_the_agents_form(name: str) -> None:
    agent = get_agent(name)
    old, new = agent.new_session_id(), agent.new_session_id()
    assert old != new
    assert new.startswith("ses_") if name == "opencode" else len(new) == 36  # a UUID's form
    rollout = f"sessions/2026/11/29/rollout-2026-11-29T07-00-00-{old}"
    source, target = MemoryArchive(), MemoryArchive()
    source.add({"project_key": "p", "session_id": old}, [{"sessionId": old, "text": "one"}])
    source.add({"project_key": "p", "session_id": old, "subpath": rollout}, [{"payload": {"id": old}}])
    source.add({"project_key": "p", "session_id": "another"}, [{"sessionId": "another"}])

    assert await agent.fork_state(old, new, "p", source, target)
    renamed = rollout.replace(old, new)
    assert target.entries == {
        ("p", new, ""): [{"sessionId": new, "text": "one"}],
        ("p", new, renamed): [{"payload": {"id": new}}],
    }
    assert not await agent.fork_state("none-such", new, "p", source, MemoryArchive())
