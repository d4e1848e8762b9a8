"""The scripted Messages API, spoken to over HTTP as any client would."""

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from nodeprov.testing import ScriptedModel, Text, ToolUse

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


def post(model: ScriptedModel, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
    request = urllib.request.Request(
        model.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read()


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]


def test_streams_text_and_tool_use_turns_in_order() -> None:
    with ScriptedModel([ToolUse("Bash", {"command": "ls -la"}, text="looking"), Text("all done")]) as model:
        assert model.url.startswith("http://127.0.0.1:")
        body = {"model": "m", "stream": True, "tools": TOOLS, "messages": [{"role": "user", "content": "go"}]}
        kind, raw = post(model, "/v1/messages?beta=true", body)
        assert kind == "text/event-stream"
        events = sse_events(raw)
        assert [e["type"] for e in events] == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        assert events[4]["content_block"]["name"] == "Bash"
        assert json.loads(events[5]["delta"]["partial_json"]) == {"command": "ls -la"}
        assert events[7]["delta"]["stop_reason"] == "tool_use"

        _, raw = post(model, "/v1/messages", {**body, "stream": False})
        message = json.loads(raw)
        assert message["content"] == [{"type": "text", "text": "all done"}]
        assert message["stop_reason"] == "end_turn"

        _, raw = post(model, "/v1/messages", {**body, "stream": False})
        assert json.loads(raw)["content"][0]["text"] == "ok"  # the fallback, once the script is used up


def test_auxiliary_requests_do_not_consume_the_script_and_all_are_recorded() -> None:
    with ScriptedModel([Text("the real answer")]) as model:
        post(model, "/v1/messages", {"model": "haiku", "messages": [{"role": "user", "content": "title?"}]})
        _, raw = post(model, "/v1/messages/count_tokens", {"messages": []})
        assert json.loads(raw) == {"input_tokens": 1}
        _, raw = post(
            model,
            "/v1/messages",
            {
                "model": "m",
                "tools": TOOLS,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "the question"}]}],
            },
        )
        assert json.loads(raw)["content"][0]["text"] == "the real answer"
        assert len(model.requests) == 3
        assert [r.is_agent_turn for r in model.requests] == [False, False, True]
        assert model.agent_requests[0].text() == "the question"
        with pytest.raises(urllib.error.HTTPError) as caught:
            post(model, "/v2/unknown", {})
        assert caught.value.code == 404
    with pytest.raises(RuntimeError, match="not running"):
        _ = model.url
