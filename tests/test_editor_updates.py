"""What ``nodeprov acp`` tells an editor and takes from it (nodeprov.editors.updates): each
message kind as its ``session/update``, an ACP agent's own words passed on, the history of a
run; and a prompt's content blocks, hostile ones refused as ConfigError and nothing else."""

from __future__ import annotations

import base64
from contextlib import suppress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeprov.agents import AgentText, Notice, Result, Thinking, ToolResult, ToolUse
from nodeprov.editors.updates import history_updates, prompt_of, updates_of
from nodeprov.errors import ConfigError
from nodeprov.prompts import ImageBlock, TextBlock
from nodeprov.runs import AgentMessage, RunStarted
from nodeprov.testing.images import sample_png


def test_each_message_is_told_as_its_update() -> None:
    assert updates_of(AgentText("hi")) == [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    ]
    assert updates_of(Thinking("hmm"))[0]["sessionUpdate"] == "agent_thought_chunk"
    assert updates_of(ToolUse("t1", "Bash", {"command": "ls"})) == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "t1",
            "title": "Bash",
            "kind": "other",
            "status": "in_progress",
            "rawInput": {"command": "ls"},
        }
    ]
    assert updates_of(ToolResult("t1", "a\nb", is_error=True)) == [
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": "a\nb"}}],
        }
    ]
    assert updates_of(ToolResult("t1", "")) == [
        {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}
    ]
    assert updates_of(Result(False, "done")) == []  # the prompt's answer says it
    assert updates_of(Notice("retry", "the API is busy")) == []


def test_an_acp_agents_own_words_are_passed_on_and_a_kind_it_made_up_is_not() -> None:
    said = {
        "sessionUpdate": "tool_call",
        "toolCallId": "c",
        "title": "notes.txt",
        "kind": "read",
        "locations": [{"path": "/workspace/notes.txt"}],
    }
    [update] = updates_of(ToolUse("c", "read_file", {}, raw=said))
    assert (update["title"], update["kind"], update["locations"]) == ("notes.txt", "read", said["locations"])
    [odd] = updates_of(ToolUse("c", "x", {}, raw={**said, "kind": "launch-missiles"}))
    assert odd["kind"] == "other"
    plan = {"sessionUpdate": "plan", "entries": [{"content": "a", "status": "pending", "priority": "low"}]}
    assert updates_of(Notice("plan", "[pending] a", raw=plan)) == [plan]
    assert updates_of(AgentText("x", raw={"not": "acp"})) == updates_of(AgentText("x"))


def test_a_runs_history_is_its_prompts_and_messages() -> None:
    started = RunStarted(run_id="r", seq=1, at="", prompt="do it", provider="local")
    told = AgentMessage(run_id="r", seq=2, at="", message=AgentText("done"))
    assert [u["sessionUpdate"] for e in (started, told) for u in history_updates(e)] == [
        "user_message_chunk",
        "agent_message_chunk",
    ]


def test_a_prompts_blocks_become_nodeprovs() -> None:
    png = sample_png()
    image = {"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"}
    assert prompt_of([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "a\n\nb"
    made = prompt_of(
        [
            {"type": "text", "text": "look"},
            image,
            {"type": "resource", "resource": {"uri": "file:///x.py", "text": "print(1)"}},
            {"type": "resource_link", "uri": "file:///y.py", "name": "y.py"},
        ]
    )
    assert made == [
        TextBlock("look"),
        ImageBlock(png, "image/png"),
        TextBlock("file:///x.py:\nprint(1)\n\ny.py: file:///y.py"),
    ]


@pytest.mark.parametrize(
    "blocks",
    [
        None,
        [],
        "text",
        [None],
        [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}],
        [{"type": "image", "data": "%%%", "mimeType": "image/png"}],
        [{"type": "image", "data": base64.b64encode(b"not an image").decode(), "mimeType": "image/png"}],
        [{"type": "resource", "resource": {"uri": "file:///a.bin", "blob": "AAAA"}}],
        [{"type": "telepathy"}],
    ],
)
def test_what_a_prompt_cannot_hold_is_refused(blocks: Any) -> None:
    with pytest.raises(ConfigError):
        prompt_of(blocks)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "resource", "resource_link", "audio", "x"])},
    optional=dict.fromkeys(("text", "data", "uri", "name", "resource", "mimeType"), _JSON),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_BLOCK | _JSON, max_size=5) | _JSON)
def test_hostile_blocks_are_taken_or_refused_as_config_errors_only(blocks: Any) -> None:
    with suppress(ConfigError):  # anything else fails the test
        prompt_of(blocks)
