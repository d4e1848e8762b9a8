"""The scripted Responses API, spoken to over HTTP as any client would."""

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import anyio
import pytest

from nodeprov.testing import (
    ExecCommand,
    ResponsesHttpError,
    ResponsesStall,
    ResponsesText,
    ScriptedResponses,
)

TURN = json.dumps({"request_kind": "turn", "thread_id": "t"})
EXEC_TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]


def post(
    model: ScriptedResponses, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[str, bytes]:
    request = urllib.request.Request(
        model.url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read()


def get(model: ScriptedResponses, path: str) -> Any:
    with urllib.request.urlopen(model.url + path, timeout=10) as response:
        return json.loads(response.read())


def sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of every event; checks the framing on the way."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: "), block
        assert lines[1].startswith("data: "), block
        data = json.loads(lines[1][6:])
        assert data["type"] == lines[0][7:]
        events.append((lines[0][7:], data))
    assert raw.endswith(b"\n\n")
    return events


def agent_body(*texts: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "model": "scripted-model",
        "stream": True,
        "tools": EXEC_TOOLS if tools is None else tools,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
            for text in texts
        ],
    }


def test_streams_a_text_turn_as_codex_parses_it() -> None:
    with ScriptedResponses([ResponsesText("all done")]) as model:
        assert model.url.startswith("http://127.0.0.1:")
        kind, raw = post(model, "/v1/responses", agent_body("go"), {"x-codex-turn-metadata": TURN})
        assert kind == "text/event-stream"
        events = sse(raw)
        assert [name for name, _ in events] == [
            "response.created",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert events[3][1]["delta"] == "all done"
        item = events[6][1]["item"]
        assert item["type"] == "message"
        assert item["role"] == "assistant"
        assert item["content"] == [{"type": "output_text", "text": "all done", "annotations": []}]
        completed = events[-1][1]["response"]
        assert completed["status"] == "completed"
        assert completed["id"] == events[0][1]["response"]["id"]
        assert completed["output"] == [item]
        usage = completed["usage"]
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
        assert usage["input_tokens_details"] == {"cached_tokens": 0}
        assert usage["output_tokens_details"] == {"reasoning_tokens": 0}


def test_exec_command_calls_the_shell_tool_the_request_offers() -> None:
    script = [ExecCommand(["sh", "-c", "echo hi > out.txt"], text="writing")] * 4
    with ScriptedResponses(script) as model:
        _, raw = post(model, "/v1/responses", agent_body("go"))
        done = [data["item"] for name, data in sse(raw) if name == "response.output_item.done"]
        assert [item["type"] for item in done] == ["message", "function_call"]
        call = done[1]
        assert call["name"] == "exec_command"
        assert json.loads(call["arguments"]) == {"cmd": "sh -c 'echo hi > out.txt'"}
        assert call["call_id"]

        offers = {
            "shell": {"command": ["sh", "-c", "echo hi > out.txt"]},
            "shell_command": {"command": "sh -c 'echo hi > out.txt'"},
        }
        for name, arguments in offers.items():
            body = agent_body("go", tools=[{"type": "function", "name": name}])
            _, raw = post(model, "/v1/responses", body)
            call = next(
                d["item"]
                for n, d in sse(raw)
                if n == "response.output_item.done" and d["item"]["type"] == "function_call"
            )
            assert (call["name"], json.loads(call["arguments"])) == (name, arguments)

        _, raw = post(model, "/v1/responses", {**agent_body("go"), "stream": False})
        response = json.loads(raw)
        assert response["status"] == "completed"
        assert [item["type"] for item in response["output"]] == ["message", "function_call"]


def test_records_requests_and_reads_their_input() -> None:
    with ScriptedResponses([ResponsesText("first")]) as model:
        body = agent_body("the question")
        body["input"] += [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "an answer"}],
            },
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "Process exited with code 0"},
        ]
        post(model, "/v1/responses", body, {"x-codex-turn-metadata": TURN})
        (request,) = model.requests
        assert request.is_agent_turn
        assert request.body["model"] == "scripted-model"
        assert request.tool_names == ["exec_command"]
        assert request.metadata["request_kind"] == "turn"
        assert request.text() == "the question\nan answer\nProcess exited with code 0"
        assert request.function_call_outputs == ["Process exited with code 0"]


def test_non_agent_requests_do_not_consume_the_script_and_the_fallback_follows_it() -> None:
    with ScriptedResponses([ResponsesText("the real answer")], fallback=ResponsesText("fallback")) as model:
        compaction = json.dumps({"request_kind": "compaction"})
        _, raw = post(model, "/v1/responses", agent_body("summarize"), {"x-codex-turn-metadata": compaction})
        assert sse(raw)[3][1]["delta"] == "ok"
        _, raw = post(model, "/v1/responses", agent_body("no tools, no metadata", tools=[]))
        assert sse(raw)[3][1]["delta"] == "ok"
        _, raw = post(model, "/v1/responses", agent_body("q"), {"x-codex-turn-metadata": TURN})
        assert sse(raw)[3][1]["delta"] == "the real answer"
        _, raw = post(model, "/v1/responses", agent_body("q"), {"x-codex-turn-metadata": TURN})
        assert sse(raw)[3][1]["delta"] == "fallback"
        model.extend([ResponsesText("extended")])
        _, raw = post(model, "/v1/responses", agent_body("q"))
        assert sse(raw)[3][1]["delta"] == "extended"
        assert [r.is_agent_turn for r in model.requests] == [False, False, True, True, True]
        assert len(model.agent_requests) == 3
        with pytest.raises(urllib.error.HTTPError) as caught:
            post(model, "/v1/unknown", {})
        assert caught.value.code == 404
    with pytest.raises(RuntimeError, match="not running"):
        _ = model.url


def test_reasoning_and_http_error_turns() -> None:
    with ScriptedResponses(
        [ResponsesText("answer", reasoning="pondering"), ResponsesHttpError(503, "down")]
    ) as model:
        _, raw = post(model, "/v1/responses", agent_body("go"))
        events = sse(raw)
        assert ("response.reasoning_summary_text.delta", "pondering") in [
            (name, data.get("delta")) for name, data in events
        ]
        done = [data["item"] for name, data in events if name == "response.output_item.done"]
        assert done[0] == {
            "type": "reasoning",
            "id": done[0]["id"],
            "summary": [{"type": "summary_text", "text": "pondering"}],
        }
        with pytest.raises(urllib.error.HTTPError) as caught:
            post(model, "/v1/responses", agent_body("go"))
        assert caught.value.code == 503
        assert json.loads(caught.value.read())["error"]["message"] == "down"


def test_model_catalog_and_codex_settings() -> None:
    with ScriptedResponses(model="my-model") as model:
        listing = get(model, "/v1/models?client_version=0.169.0")
        assert listing["data"][0]["id"] == "my-model"
        assert listing["models"][0]["slug"] == "my-model"
        assert model.requests[0].method == "GET"
        assert not model.requests[0].is_agent_turn
        assert model.codex_config(catalog=False) == {
            "name": "scripted",
            "base_url": f"{model.url}/v1",
            "wire_api": "responses",
            "env_key": "NODEPROV_SCRIPTED_KEY",
        }
        assert model.codex_config()["model_catalog_url"] == f"{model.url}/v1/models"
        assert model.agent_env("K") == {"K": "dummy"}
        args = model.codex_args("K")
        assert "model_provider=scripted" in args
        assert "features.api_key_model_discovery=true" in args
        table = next(a for a in args if a.startswith("model_providers.scripted="))
        assert f'model_catalog_url="{model.url}/v1/models"' in table
        assert 'env_key="K"' in table
        assert "features.api_key_model_discovery=true" not in model.codex_args(catalog=False)


def test_stall_holds_the_stream_open_until_stop() -> None:
    model = ScriptedResponses([ResponsesStall("hmm")])
    model.start()
    host, port = model.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request(
        "POST", "/v1/responses", json.dumps(agent_body("go")), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    assert response.status == 200
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(response.read()), daemon=True)
    reader.start()
    reader.join(0.6)
    assert reader.is_alive()  # the stream is still open
    started = time.monotonic()
    model.stop()
    reader.join(30)
    assert not reader.is_alive()
    assert time.monotonic() - started < 10  # not a server's shutdown wait; 10: a loaded machine
    names = [name for name, _ in sse(received[0].replace(b": ping\n\n", b""))]
    assert names[0] == "response.created"
    assert "response.output_text.delta" in names
    assert "response.completed" not in names
    connection.close()
    model.stop()  # idempotent


@pytest.mark.anyio
async def test_async_context_manager_and_fixture(scripted_responses: ScriptedResponses) -> None:
    async with ScriptedResponses([ResponsesText("async")]) as model:
        _, raw = await anyio.to_thread.run_sync(post, model, "/v1/responses", agent_body("go"))
        assert sse(raw)[3][1]["delta"] == "async"
    scripted_responses.extend([ResponsesText("from the fixture")])
    _, raw = post(scripted_responses, "/v1/responses", agent_body("go"))
    assert sse(raw)[3][1]["delta"] == "from the fixture"
