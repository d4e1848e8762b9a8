"""The opencode agent without its CLI: routing by OpenCode's model names, its event table (the
events as OpenCode 1.18.33 writes them), its command line and environment, the permission
mapping, its options, images, and where its CLI is found."""

# ruff: noqa: E501 - tables of events, one per line
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeprov import AgentOutputError, ConfigError, NodeHandle, get_agent, route_model
from nodeprov.agents import AgentText, ErrorMessage, Notice, Result, Thinking, ToolResult, ToolUse
from nodeprov.agents.opencode import OpenCodeAgent
from nodeprov.agents.opencode.events import Converter, parse
from nodeprov.prompts import ANTHROPIC_IMAGE_LIMITS, OPENAI_IMAGE_LIMITS, Block, ImageBlock, TextBlock

PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)
SESSION = "ses_deba62daaffea7lo69tbmvha56"
PROVIDER = {"id": "local", "base_url": "http://127.0.0.1:1/v1", "env_key": "LOCAL_KEY", "models": {"coder": {"vision": True}, "blind": {}}}  # fmt: skip


def event(kind: str, part: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    base = {"type": kind, "timestamp": 1795637761865, "sessionID": SESSION}
    return {
        **base,
        **({"part": {"sessionID": SESSION, "messageID": "msg_1", **part}} if part else {}),
        **fields,
    }


def finish(reason: str, cost: float = 0) -> dict[str, Any]:
    tokens = {"total": 15, "input": 10, "output": 5, "reasoning": 2, "cache": {"write": 1, "read": 3}}
    return event(
        "step_finish",
        {"id": "prt_f", "type": "step-finish", "reason": reason, "tokens": tokens, "cost": cost},
    )


def tool(name: str, state: dict[str, Any], call: str = "call_1") -> dict[str, Any]:
    return event("tool_use", {"id": "prt_t", "type": "tool", "tool": name, "callID": call, "state": state})


@pytest.mark.parametrize(
    ("model", "agent"),
    [
        ("opencode/big-pickle", "opencode"),
        ("opencode/claude-sonnet-4-5", "opencode"),
        ("anthropic/claude-sonnet-4-5", "opencode"),
        ("openai/gpt-5", "opencode"),
        ("openrouter/qwen/qwen3-coder", "opencode"),
        ("scripted/scripted-model", "opencode"),
        # OpenCode's pattern takes no name without a provider: claude's and codex's stay theirs.
        ("claude-sonnet-4-5", "claude"),
        ("sonnet", "claude"),
        ("gpt-5", "codex"),
        ("o3", "codex"),
        ("codex-mini-latest", "codex"),
        ("/gpt-5", "claude"),
        ("anthropic/", "claude"),
    ],
)
def test_opencode_models_route_to_it_and_no_other_agents_names(model: str, agent: str) -> None:
    assert route_model(model) == agent


def test_opencode_events_become_messages() -> None:
    converter = Converter()
    events = [
        event("step_start", {"id": "prt_s", "type": "step-start"}),
        event(
            "reasoning",
            {"id": "prt_r", "type": "reasoning", "text": "pondering", "time": {"start": 1, "end": 2}},
        ),
        event("text", {"id": "prt_x", "type": "text", "text": "Running.", "time": {"start": 1, "end": 2}}),
        tool(
            "bash",
            {
                "status": "completed",
                "input": {"command": "ls"},
                "output": "a\n",
                "metadata": {"output": "a\n", "exit": 0},
                "title": "ls",
            },
        ),
        tool(
            "bash",
            {"status": "completed", "input": {"command": "false"}, "output": "", "metadata": {"exit": 1}},
            "call_2",
        ),
        tool(
            "edit",
            {
                "status": "error",
                "input": {"filePath": "/x"},
                "error": "The user rejected permission to use this specific tool call.",
            },
            "call_3",
        ),
        tool(
            "invalid",
            {
                "status": "completed",
                "input": {"tool": "bash", "error": "Model tried to call unavailable tool 'bash'."},
                "output": "The arguments provided to the tool are invalid",
            },
            "call_4",
        ),
        finish("tool-calls", cost=0.25),
        event("step_start", {"id": "prt_s2", "type": "step-start"}),
        event("text", {"id": "prt_y", "type": "text", "text": "all done", "time": {"start": 1, "end": 2}}),
        event("todo.updated"),
        finish("stop", cost=0.5),
    ]
    messages = [m for e in events for m in converter.convert(e)]
    assert [type(m).__name__ for m in messages] == [
        "Notice", "Notice", "Thinking", "AgentText", "ToolUse", "ToolResult", "ToolUse", "ToolResult",
        "ToolUse", "ToolResult", "ToolUse", "ToolResult", "Notice", "Notice", "AgentText", "Notice", "Notice",
    ]  # fmt: skip
    assert messages[0] == Notice("session", session_id=SESSION)  # OpenCode announces no session
    assert messages[1] == Notice("step_start")
    assert messages[2] == Thinking("pondering")
    assert messages[3] == AgentText("Running.")
    assert messages[4:6] == [
        ToolUse("call_1", "bash", {"command": "ls"}),
        ToolResult("call_1", "a\n", is_error=False),
    ]
    assert messages[7] == ToolResult("call_2", "", is_error=True)  # a non-zero exit code
    assert messages[9] == ToolResult(
        "call_3", "The user rejected permission to use this specific tool call.", is_error=True
    )
    assert messages[10] == ToolUse(
        "call_4", "invalid", {"tool": "bash", "error": "Model tried to call unavailable tool 'bash'."}
    )
    assert messages[11].is_error  # type: ignore[attr-defined]
    assert messages[12] == Notice("step_finish", "tool-calls")
    assert messages[15] == Notice("todo.updated")
    assert all(m.raw is not None for m in messages)
    assert not converter.step_open
    result = converter.result(0)
    assert result == Result(
        False,
        "all done",
        session_id=SESSION,
        usage={
            "input_tokens": 20,
            "output_tokens": 10,
            "reasoning_tokens": 4,
            "cache_read_tokens": 6,
            "cache_write_tokens": 2,
            "total_tokens": 30,
        },
        cost_usd=0.75,
    )
    assert result.raw == events[-1]


def test_a_step_is_open_from_its_start_to_its_finish_or_an_error() -> None:
    converter = Converter(SESSION)
    assert not converter.step_open
    converter.convert(event("step_start", {"type": "step-start"}))
    assert converter.step_open
    converter.convert(finish("tool-calls"))
    assert not converter.step_open
    converter.convert(event("step_start", {"type": "step-start"}))
    converter.convert(event("error", error={"name": "UnknownError", "data": {"message": "stream broke"}}))
    assert not converter.step_open


def test_an_error_event_makes_the_turn_an_error_whatever_the_exit() -> None:
    converter = Converter()
    api_error = {
        "name": "APIError",
        "data": {"message": "bad request here", "statusCode": 400, "isRetryable": False},
    }
    said = converter.convert(event("error", error=api_error))
    assert said == [Notice("session", session_id=SESSION), ErrorMessage("bad request here")]
    assert converter.convert(event("error", error={"name": "ProviderAuthError"}))[-1] == ErrorMessage(
        "ProviderAuthError"
    )
    result = converter.result(1)
    assert result is not None
    assert (result.is_error, result.text, result.session_id) == (
        True,
        "bad request here\nProviderAuthError",
        SESSION,
    )


def test_a_turn_opencode_did_not_finish_has_no_result() -> None:
    assert Converter().result(0) is None  # no step at all
    converter = Converter()
    converter.convert(event("step_start", {"type": "step-start"}))
    converter.convert(finish("stop"))
    assert converter.result(1) is None  # a failed exit: the session's stderr says why
    assert converter.result(0) is not None
    free = Converter()
    free.convert(finish("stop"))
    result = free.result(0)
    assert result is not None
    assert result.cost_usd is None  # 0: a model without prices, not a known cost


def test_output_that_is_not_opencode_events() -> None:
    assert parse(b"") is None
    assert parse(b"INFO some log line\n") is None
    assert parse(b'{"type": "text"}\n') == {"type": "text"}
    with pytest.raises(AgentOutputError, match="not valid JSON"):
        parse(b'{"type": "step_start", "sessionID": ')
    with pytest.raises(AgentOutputError, match="not valid JSON"):
        parse(b'{"a": 1} and more')
    with pytest.raises(AgentOutputError, match="without a part"):
        Converter().convert({"type": "text", "sessionID": SESSION})


def test_permissions_are_opencode_permission_rules() -> None:
    rules = {
        mode: OpenCodeAgent.from_options({"permission": mode}).config()["permission"]
        for mode in ("read-only", "edit", "full")
    }
    for mode, permission in rules.items():
        assert next(iter(permission.items())) == ("*", "allow"), mode  # first: the last matching rule wins
        assert permission["question"] == "deny"  # nobody answers on a node
    assert (rules["read-only"]["edit"], rules["read-only"]["bash"]) == ("deny", "deny")
    assert "edit" not in rules["edit"]
    assert rules["edit"]["bash"] == "deny"
    for mode in ("read-only", "edit"):  # what OpenCode asks, and `opencode run` rejects, is refused
        assert rules[mode]["external_directory"] == "deny"
        assert rules[mode]["doom_loop"] == "deny"
        assert rules[mode]["read"]["*.env"] == "deny"
    assert rules["full"] == {"*": "allow", "question": "deny", "plan_enter": "deny", "plan_exit": "deny"}


@pytest.mark.anyio
async def test_the_command_line_carries_no_prompt_and_the_environment_no_key(local_node: NodeHandle) -> None:
    canary = "sk-canary-5b1e"
    agent = get_agent(
        "opencode",
        {
            "model": "local/coder",
            "provider": PROVIDER,
            "env": {"LOCAL_KEY": canary},
            "cli_path": "/opt/opencode",
        },
    )
    assert isinstance(agent, OpenCodeAgent)
    argv = agent.command(local_node, resume=None, files=["/h/a.png", "/h/b.png"])
    assert argv == [
        "/opt/opencode",
        "run",
        "--format",
        "json",
        "--thinking",
        "--model",
        "local/coder",
        "--title",
        "nodeprov",
        "--file=/h/a.png",
        "--file=/h/b.png",
    ]
    resumed = agent.command(local_node, resume=SESSION, files=[])
    assert resumed[-2:] == ["--session", SESSION]  # no title: the session has one
    home = f"{local_node.base_env['HOME']}/.nodeprov/opencode/{agent.state_key(local_node, 'w 1')}"
    env = agent.environment(home)
    assert env["LOCAL_KEY"] == canary  # the key reaches OpenCode in its environment...
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert canary not in env["OPENCODE_CONFIG_CONTENT"]  # ...and its config names it only
    assert config["provider"]["local"]["options"] == {
        "baseURL": "http://127.0.0.1:1/v1",
        "apiKey": "{env:LOCAL_KEY}",
    }
    assert config["provider"]["local"]["npm"] == "@ai-sdk/openai-compatible"
    assert config["provider"]["local"]["models"]["coder"]["modalities"]["input"] == ["text", "image"]
    assert config["provider"]["local"]["models"]["blind"]["modalities"]["input"] == ["text"]
    assert (config["share"], config["autoupdate"], config["snapshot"]) == ("disabled", False, False)
    for name in (
        "XDG_DATA_HOME",
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
        "XDG_CACHE_HOME",
        "OPENCODE_TEST_HOME",
    ):
        assert env[name].startswith(home), name
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    assert agent.state_key(local_node, "w 1").startswith("opencode-w_1-")
    assert agent.state_key(local_node, "w 1") != agent.state_key(local_node, "w_1")


def test_options_opencode_cannot_honour_are_refused() -> None:
    with pytest.raises(ConfigError, match="no structured output"):
        get_agent("opencode", {"output_schema": {"type": "object"}})
    with pytest.raises(ConfigError, match="PROVIDER/MODEL"):
        get_agent("opencode", {"model": "gpt-5"})
    with pytest.raises(ConfigError, match="not one of provider local's models"):
        get_agent("opencode", {"model": "local/other", "provider": PROVIDER})
    with pytest.raises(ConfigError, match="models"):
        get_agent("opencode", {"provider": {**PROVIDER, "models": {}}})
    agent = get_agent("opencode", {"model": "anthropic/claude-sonnet-4-5", "env": {"ANTHROPIC_API_KEY": "k"}})
    assert agent.options.storable() == {"model": "anthropic/claude-sonnet-4-5"}
    assert not agent.capabilities.structured_output


def test_images_follow_the_models_vision_and_its_apis_limits() -> None:
    prompt: list[Block] = [TextBlock("what is this?"), ImageBlock.from_bytes(PNG)]
    seeing = get_agent("opencode", {"model": "local/coder", "provider": PROVIDER})
    assert seeing.prepare_prompt(prompt) == tuple(prompt)
    assert seeing.limits_for_images() == OPENAI_IMAGE_LIMITS  # an OpenAI-compatible endpoint
    info = seeing.model_info()
    assert info is not None
    assert (info.id, info.vision) == ("local/coder", True)
    blind = get_agent("opencode", {"model": "local/blind", "provider": PROVIDER})
    with pytest.raises(ConfigError, match="cannot send images to model local/blind"):
        blind.prepare_prompt(prompt)
    reduced = get_agent("opencode", {"model": "local/blind", "provider": PROVIDER, "images": "text-only"})
    assert reduced.prepare_prompt(prompt) == (TextBlock("what is this?"),)
    with pytest.raises(ConfigError, match="opencode/big-pickle"):
        get_agent("opencode", {"model": "opencode/big-pickle"}).prepare_prompt(prompt)
    assert (
        get_agent("opencode", {"model": "anthropic/claude-sonnet-4-5"}).limits_for_images()
        == ANTHROPIC_IMAGE_LIMITS
    )
    assert (
        get_agent("opencode", {"model": "opencode/claude-sonnet-4-5"}).limits_for_images()
        == ANTHROPIC_IMAGE_LIMITS
    )
    assert get_agent("opencode", {"model": "openai/gpt-5"}).limits_for_images() == OPENAI_IMAGE_LIMITS
    assert (
        get_agent("opencode", {"model": "opencode/gpt-5.1-codex"}).limits_for_images() == OPENAI_IMAGE_LIMITS
    )
    assert (
        get_agent("opencode").limits_for_images() == ANTHROPIC_IMAGE_LIMITS
    )  # OpenCode's pick: the stricter


def test_the_local_cli_follows_the_npm_launcher_to_the_native_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modules = tmp_path / "node_modules"
    launcher = modules / "opencode-ai" / "bin" / "opencode.exe"
    natives = [
        modules / name / "bin" / "opencode" for name in ("opencode-linux-x64-baseline", "opencode-linux-x64")
    ]
    for path in [launcher, *natives]:
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    (modules / ".bin").mkdir()
    (modules / ".bin" / "opencode").symlink_to("../opencode-ai/bin/opencode.exe")
    monkeypatch.delenv("NODEPROV_OPENCODE_CLI", raising=False)
    monkeypatch.setenv("PATH", str(modules / ".bin"))
    assert OpenCodeAgent.local_cli() == str(natives[1])  # the AVX2 build before the baseline one
    monkeypatch.setenv("NODEPROV_OPENCODE_CLI", str(natives[0]))
    assert OpenCodeAgent.local_cli() == str(natives[0])
    monkeypatch.delenv("NODEPROV_OPENCODE_CLI")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # nothing installed by the scripts
    assert OpenCodeAgent.local_cli() is None


def test_the_opencode_agent_loads_no_other_agent() -> None:
    probe = "import sys, nodeprov.agents.opencode; print(sorted(m for m in sys.modules if m.startswith(('claude_agent_sdk', 'nodeprov.agents.c'))))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.stdout.strip() == "[]"
