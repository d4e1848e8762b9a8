"""The Claude Code CLI's stream-json messages, as they come off the wire, in the one message
model: each kind, cross-checked with the SDK's own parser where it reads the same field, and
the JSON helper the hot paths use (orjson, the standard library where orjson refuses)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from claude_agent_sdk._internal.message_parser import parse_message

from nodeprov._json import dumps, loads
from nodeprov.agents import AgentText, ErrorMessage, Notice, Result, Thinking, ToolResult, ToolUse
from nodeprov.agents.claude import convert

SESSION = "3f1c2a9e-7b64-4d0e-9a51-0c6e2b8d4f10"
INIT = {
    "type": "system",
    "subtype": "init",
    "cwd": "/work",
    "session_id": SESSION,
    "tools": ["Bash"],
    "model": "claude-sonnet-4-5",
}
ASSISTANT = {
    "type": "assistant",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "the user wants a file", "signature": "sig"},
            {"type": "text", "text": "I'll write it."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo hi > f"}},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 20},
    },
    "parent_tool_use_id": None,
    "session_id": SESSION,
    "uuid": "u-1",
}
TOOL_RESULT = {
    "type": "user",
    "message": {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "done"}],
                "is_error": True,
            }
        ],
    },
    "parent_tool_use_id": None,
    "session_id": SESSION,
    "uuid": "u-2",
}
RESULT = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "duration_ms": 1200,
    "duration_api_ms": 900,
    "num_turns": 2,
    "result": "wrote f",
    "session_id": SESSION,
    "total_cost_usd": 0.0123,
    "usage": {"input_tokens": 10, "output_tokens": 20},
    "structured_output": {"ok": True},
    "uuid": "u-3",
}


def test_each_kind_of_message_converts_and_keeps_the_wire_message() -> None:
    assert convert(INIT) == [Notice("init", "/work", session_id=SESSION)]
    assert convert(ASSISTANT) == [
        Thinking("the user wants a file"),
        AgentText("I'll write it."),
        ToolUse("toolu_1", "Bash", {"command": "echo hi > f"}),
    ]
    assert convert(TOOL_RESULT) == [ToolResult("toolu_1", "done", is_error=True)]
    assert convert(RESULT) == [
        Result(
            False,
            "wrote f",
            session_id=SESSION,
            usage={"input_tokens": 10, "output_tokens": 20},
            cost_usd=0.0123,
            structured={"ok": True},
        )
    ]
    for message in (INIT, ASSISTANT, TOOL_RESULT, RESULT):
        assert all(converted.raw is message for converted in convert(message))  # the very dict, no copy


def test_the_conversion_reads_what_the_sdks_parser_reads() -> None:
    assistant = parse_message(ASSISTANT)
    assert isinstance(assistant, AssistantMessage)
    texts = [block.text for block in assistant.content if isinstance(block, TextBlock)]
    tools = [
        (block.id, block.name, block.input) for block in assistant.content if isinstance(block, ToolUseBlock)
    ]
    converted = convert(ASSISTANT)
    assert texts == [m.text for m in converted if isinstance(m, AgentText)]
    assert tools == [(m.id, m.name, dict(m.input)) for m in converted if isinstance(m, ToolUse)]
    user = parse_message(TOOL_RESULT)
    assert isinstance(user, UserMessage)
    assert isinstance(user.content, list)
    block = user.content[0]
    assert isinstance(block, ToolResultBlock)
    (tool_result,) = convert(TOOL_RESULT)
    assert isinstance(tool_result, ToolResult)
    assert (block.tool_use_id, bool(block.is_error)) == (tool_result.tool_use_id, tool_result.is_error)
    result = parse_message(RESULT)
    assert isinstance(result, ResultMessage)
    (converted_result,) = convert(RESULT)
    assert isinstance(converted_result, Result)
    assert (
        result.is_error,
        result.result,
        result.session_id,
        result.total_cost_usd,
        result.structured_output,
    ) == (
        converted_result.is_error,
        converted_result.text,
        converted_result.session_id,
        converted_result.cost_usd,
        converted_result.structured,
    )


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (
            {"type": "user", "message": {"role": "user", "content": "go on"}, "session_id": SESSION},
            [Notice("user", "go on")],
        ),
        (
            {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}},
            [Notice("user", "hi")],
        ),
        (
            {
                "type": "user",
                "message": {"content": [{"type": "tool_result", "tool_use_id": "t", "content": "plain"}]},
            },
            [ToolResult("t", "plain")],
        ),
        (
            {
                "type": "user",
                "message": {
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}]
                },
            },
            [ToolResult("t", '[{"type": "image"}]')],
        ),
        (
            {
                "type": "assistant",
                "message": {"model": "m", "content": [{"type": "text", "text": "x"}]},
                "error": "rate_limit",
            },
            [AgentText("x"), ErrorMessage("rate_limit")],
        ),
        (
            {"type": "result", "subtype": "error_max_turns", "is_error": True, "session_id": SESSION},
            [Result(True, "the agent ended with error_max_turns", session_id=SESSION)],
        ),
        (
            {
                "type": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "errors": ["boom", "bang"],
            },
            [Result(True, "boom; bang")],
        ),
        (
            {"type": "system", "subtype": "api_retry", "error_status": 529, "error": "overloaded"},
            [Notice("api_retry", "HTTP 529: overloaded", retry=True)],
        ),
        (
            {"type": "system", "subtype": "api_retry", "error": "unknown"},
            [Notice("api_retry", "no response (connection refused, reset or timed out)", retry=True)],
        ),
        ({"type": "system", "subtype": "hook_started", "hook_event": "PreToolUse"}, [Notice("hook_started")]),
        (
            {"type": "system", "subtype": "compact_boundary", "session_id": SESSION},
            [Notice("compact_boundary")],
        ),
        (
            {"type": "stream_event", "uuid": "u", "session_id": SESSION, "event": {"type": "message_start"}},
            [Notice("stream_event")],
        ),
        (
            {
                "type": "rate_limit_event",
                "uuid": "u",
                "session_id": SESSION,
                "rate_limit_info": {"status": "allowed"},
            },
            [Notice("rate_limit_event")],
        ),
        (
            {"type": "assistant", "session_id": SESSION},
            [Notice("assistant")],
        ),  # no message: said, not dropped
        ({"type": "a_kind_from_a_newer_cli", "x": 1}, []),  # skipped, as the SDK skips it
    ],
)
def test_the_other_shapes_of_message(wire: dict[str, Any], expected: list[Any]) -> None:
    assert convert(wire) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"text": "naïve ☃ 日本", "n": 1, "f": 0.5, "none": None, "list": [True, False]},
        {"big": 2**70},  # over 64 bits: orjson refuses, the standard library writes it
        {"lone": "\ud800"},  # a lone surrogate, as json.loads reads "\\ud800"
        {1: "an int key"},
    ],
)
def test_json_round_trips_what_the_standard_library_does(value: dict[Any, Any]) -> None:
    text = dumps(value)
    assert json.loads(text) == json.loads(json.dumps(value))
    assert loads(text) == json.loads(text)
    assert loads(text.encode("utf-8", "surrogatepass")) == json.loads(text)


def test_json_reads_what_the_standard_library_reads_and_refuses_what_it_refuses() -> None:
    assert loads('{"x": NaN}')["x"] != loads('{"x": NaN}')["x"]  # NaN, which orjson refuses
    with pytest.raises(json.JSONDecodeError):
        loads('{"x": ')
    with pytest.raises(ValueError, match="utf-8"):
        loads(b'{"x": "\xff"}')
