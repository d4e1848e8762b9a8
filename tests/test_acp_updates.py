"""An ACP turn's session/update notifications as nodeprov's messages
(nodeprov.agents.acp.updates), on updates shaped as the protocol's schema gives them."""

from __future__ import annotations

from typing import Any

from nodeprov.agents.acp.updates import Turn
from nodeprov.agents.messages import AgentText, Message, Notice, Thinking, ToolResult, ToolUse


def _chunk(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def _all(turn: Turn, *updates: dict[str, Any]) -> list[Message]:
    return [message for update in updates for message in turn.take(update)] + turn.flush()


def test_a_run_of_chunks_is_one_message_given_when_another_kind_comes() -> None:
    turn = Turn("s-1")
    said = _all(
        turn,
        _chunk("agent_thought_chunk", "Let me "),
        _chunk("agent_thought_chunk", "think."),
        _chunk("agent_message_chunk", "Hello "),
        _chunk("agent_message_chunk", "there"),
        {"sessionUpdate": "available_commands_update", "availableCommands": []},
        _chunk("agent_message_chunk", "Done."),
    )
    assert said == [Thinking("Let me think."), AgentText("Hello there"), AgentText("Done.")]
    assert turn.result({"stopReason": "end_turn"}).text == "Done."


def test_a_tool_call_is_a_use_then_one_result_when_it_completes_or_fails() -> None:
    turn = Turn("s-1")
    said = _all(
        turn,
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Read a.py",
            "kind": "read",
            "status": "pending",
            "rawInput": {"path": "/w/a.py"},
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "Read /w/a.py"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress"},
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "print(1)"}}],
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"},
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c2",
            "title": "Run ls",
            "kind": "execute",
            "status": "failed",
            "rawOutput": "ls: cannot access",
        },
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c3",
            "kind": "edit",
            "status": "completed",
            "content": [{"type": "diff", "path": "/w/b.py", "oldText": "a", "newText": "b"}],
        },
    )
    assert said == [
        ToolUse("c1", "Read /w/a.py", {"path": "/w/a.py"}),  # said once it runs, as updated
        ToolResult("c1", "print(1)"),
        ToolUse("c2", "Run ls", {}),
        ToolResult("c2", "ls: cannot access", is_error=True),
        ToolUse("c3", "edit", {}),
        ToolResult("c3", "(edited /w/b.py)"),
    ]


def test_a_plan_is_a_notice_and_usage_goes_to_the_result() -> None:
    turn = Turn("s-1")
    said = _all(
        turn,
        {
            "sessionUpdate": "plan",
            "entries": [
                {"content": "Read the code", "priority": "high", "status": "completed"},
                {"content": "Fix the bug", "priority": "high", "status": "in_progress"},
            ],
        },
        {"sessionUpdate": "usage_update", "used": 1200, "size": 200000},
        _chunk("agent_message_chunk", "Fixed."),
    )
    assert said == [
        Notice("plan", "[completed] Read the code\n[in_progress] Fix the bug", session_id="s-1"),
        AgentText("Fixed."),
    ]
    result = turn.result({"stopReason": "end_turn"})
    assert (result.is_error, result.text, result.session_id, result.usage) == (
        False,
        "Fixed.",
        "s-1",
        {"used": 1200, "size": 200000},
    )


def test_a_turn_that_did_not_end_well_is_an_error_result_saying_why() -> None:
    for reason in ("refusal", "max_tokens", "max_turn_requests", "cancelled"):
        turn = Turn("s-1")
        _all(turn, _chunk("agent_message_chunk", "partial"))
        result = turn.result({"stopReason": reason})
        assert (result.is_error, result.text) == (True, f"the agent stopped: {reason}")
