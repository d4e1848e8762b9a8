"""The scripted Chat Completions API, spoken to over HTTP as any client would."""

import base64
import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import anyio
import pytest

from nodeprov.offline import demo_chat
from nodeprov.testing import (
    BashCommand,
    ChatHttpError,
    ChatStall,
    ChatText,
    ChatToolCall,
    ChatTurn,
    ScriptedChat,
)

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {}, "timeout": {}, "workdir": {}}},
    },
}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def post(model: ScriptedChat, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
    request = urllib.request.Request(
        model.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read()


def sse(raw: bytes) -> list[dict[str, Any]]:
    """The data of every event, checking the framing and the closing ``[DONE]``."""
    blocks = [block for block in raw.decode().split("\n\n") if block.strip()]
    assert blocks[-1] == "data: [DONE]", blocks[-1]
    chunks = []
    for block in blocks[:-1]:
        assert block.startswith("data: "), block
        assert "\n" not in block, block
        chunk = json.loads(block[6:])
        assert chunk["object"] == "chat.completion.chunk"
        chunks.append(chunk)
    return chunks


def agent_body(*texts: str, tools: list[dict[str, Any]] | None = None, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "scripted-model",
        "stream": stream,
        "stream_options": {"include_usage": True},
        "tools": [BASH] if tools is None else tools,
        "messages": [{"role": "system", "content": "be scripted"}]
        + [{"role": "user", "content": text} for text in texts],
    }


def deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]


def test_streams_a_text_turn_as_the_ai_sdk_parses_it() -> None:
    with ScriptedChat([ChatText("all done", reasoning="pondering")]) as model:
        assert model.url.startswith("http://127.0.0.1:")
        kind, raw = post(model, "/v1/chat/completions", agent_body("go"))
        assert kind == "text/event-stream"
        chunks = sse(raw)
        assert {chunk["id"] for chunk in chunks} == {chunks[0]["id"]}
        assert deltas(chunks)[:3] == [
            {"role": "assistant", "content": ""},
            {"reasoning_content": "pondering"},
            {"content": "all done"},
        ]
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
        usage = chunks[-1]["usage"]  # stream_options.include_usage: a last chunk without choices
        assert chunks[-1]["choices"] == []
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        body = agent_body("go")
        del body["stream_options"]
        _, raw = post(model, "/v1/chat/completions", body)
        assert all(chunk["choices"] for chunk in sse(raw))  # no usage chunk unless asked for


def test_bash_command_calls_the_bash_tool_with_the_arguments_it_declares() -> None:
    with ScriptedChat([BashCommand("echo hi > out.txt", text="writing")] * 3) as model:
        _, raw = post(model, "/v1/chat/completions", agent_body("go"))
        chunks = sse(raw)
        said = deltas(chunks)
        assert said[1] == {"content": "writing"}
        start, rest = said[2]["tool_calls"][0], said[3]["tool_calls"][0]
        assert start["function"] == {"name": "bash", "arguments": ""}
        assert start["type"] == "function"
        assert start["id"]
        assert (start["index"], rest["index"]) == (0, 0)
        assert json.loads(rest["function"]["arguments"]) == {"command": "echo hi > out.txt"}
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"

        # An older OpenCode's bash tool declares a description: it gets one.
        older = {
            "type": "function",
            "function": {"name": "bash", "parameters": {"properties": {"description": {}}}},
        }
        _, raw = post(model, "/v1/chat/completions", agent_body("go", tools=[older]))
        arguments = deltas(sse(raw))[3]["tool_calls"][0]["function"]["arguments"]
        assert json.loads(arguments) == {
            "command": "echo hi > out.txt",
            "description": "Runs a scripted command",
        }

        _, raw = post(model, "/v1/chat/completions", agent_body("go", stream=False))
        completion = json.loads(raw)
        assert completion["object"] == "chat.completion"
        (choice,) = completion["choices"]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] == "writing"
        (call,) = choice["message"]["tool_calls"]
        assert call["function"]["name"] == "bash"
        assert json.loads(call["function"]["arguments"]) == {"command": "echo hi > out.txt"}


def test_a_tool_call_turn_and_a_non_streamed_text_turn() -> None:
    script: list[ChatTurn] = [ChatToolCall("write", {"filePath": "a.txt", "content": "x"}), ChatText("plain")]
    with ScriptedChat(script) as model:
        _, raw = post(model, "/v1/chat/completions", agent_body("go"))
        call = deltas(sse(raw))[1]["tool_calls"][0]
        assert call["function"]["name"] == "write"
        _, raw = post(model, "/v1/chat/completions", agent_body("go", stream=False))
        choice = json.loads(raw)["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": "plain"}
        assert choice["finish_reason"] == "stop"


def test_records_requests_their_text_tool_outputs_and_images() -> None:
    with ScriptedChat([ChatText("first")]) as model:
        body = agent_body()
        data_url = f"data:image/png;base64,{base64.b64encode(PNG).decode()}"
        body["messages"] += [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look at this"},
                    {"type": "image_url", "image_url": {"url": data_url}},
                    {"type": "image_url", "image_url": {"url": "https://example.invalid/x.png"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!not base64!!"}},
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "out.txt"},
            {"role": "assistant", "content": [{"type": "text", "text": "an answer"}]},
        ]
        post(model, "/v1/chat/completions", body)
        (request,) = model.requests
        assert request.is_agent_turn
        assert request.tool_names == ["bash"]
        assert request.text() == "look at this\nout.txt\nan answer"  # the system prompt left out
        assert request.tool_outputs == ["out.txt"]
        assert request.images() == [("image/png", PNG)]
        assert request.headers["content-type"] == "application/json"


def test_requests_without_tools_do_not_consume_the_script_and_the_fallback_follows_it() -> None:
    with ScriptedChat([ChatText("the real answer")], fallback=ChatText("fallback")) as model:
        _, raw = post(model, "/v1/chat/completions", agent_body("Generate a title", tools=[]))
        assert deltas(sse(raw))[1] == {"content": "ok"}
        _, raw = post(model, "/v1/chat/completions", agent_body("q"))
        assert deltas(sse(raw))[1] == {"content": "the real answer"}
        _, raw = post(model, "/v1/chat/completions", agent_body("q"))
        assert deltas(sse(raw))[1] == {"content": "fallback"}
        model.extend([ChatText("extended")])
        _, raw = post(model, "/chat/completions", agent_body("q"))  # a base URL without /v1
        assert deltas(sse(raw))[1] == {"content": "extended"}
        assert [r.is_agent_turn for r in model.requests] == [False, True, True, True]
        assert len(model.agent_requests) == 3
        with pytest.raises(urllib.error.HTTPError) as caught:
            post(model, "/v1/responses", agent_body("q"))
        assert caught.value.code == 404
        assert not model.requests[-1].is_agent_turn
    with pytest.raises(RuntimeError, match="not running"):
        _ = model.url


def test_http_error_turns_and_bad_bodies() -> None:
    with ScriptedChat([ChatHttpError(503, "down"), ChatHttpError(400, "no such model")]) as model:
        for status, message in [(503, "down"), (400, "no such model")]:
            with pytest.raises(urllib.error.HTTPError) as caught:
                post(model, "/v1/chat/completions", agent_body("go"))
            assert caught.value.code == status
            error = json.loads(caught.value.read())["error"]
            assert error["message"] == message
            assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error")
        request = urllib.request.Request(model.url + "/v1/chat/completions", data=b"[1, 2]")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 400


def test_models_and_opencode_settings() -> None:
    with ScriptedChat(model="my-model", vision=False) as model:
        with urllib.request.urlopen(model.url + "/v1/models", timeout=10) as response:
            listing = json.loads(response.read())
        assert [entry["id"] for entry in listing["data"]] == ["my-model"]
        assert model.requests[0].method == "GET"
        assert not model.requests[0].is_agent_turn
        assert model.opencode_model == "scripted/my-model"
        assert model.agent_env("K") == {"K": "dummy"}
        assert model.opencode_provider("K") == {
            "id": "scripted",
            "name": "Scripted",
            "base_url": f"{model.url}/v1",
            "env_key": "K",
            "models": {"my-model": {"vision": False, "context_window": 200_000}},
        }
        config = model.opencode_config("K")
        assert config["model"] == "scripted/my-model"
        provider = config["provider"]["scripted"]
        assert provider["npm"] == "@ai-sdk/openai-compatible"
        assert provider["options"] == {"baseURL": f"{model.url}/v1", "apiKey": "{env:K}"}
        assert provider["models"]["my-model"]["modalities"] == {"input": ["text"], "output": ["text"]}
    with ScriptedChat() as seeing:
        models = seeing.opencode_config()["provider"]["scripted"]["models"]
        assert models["scripted-model"]["modalities"]["input"] == ["text", "image"]
        assert models["scripted-model"]["attachment"] is True


def test_stall_holds_the_stream_open_until_stop() -> None:
    model = ScriptedChat([ChatStall("hmm")])
    model.start()
    host, port = model.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request(
        "POST", "/v1/chat/completions", json.dumps(agent_body("go")), {"Content-Type": "application/json"}
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
    events = [block for block in received[0].decode().split("\n\n") if block.startswith("data: ")]
    assert [json.loads(event[6:])["choices"][0]["delta"] for event in events] == [
        {"role": "assistant", "content": ""},
        {"content": "hmm"},
    ]
    assert b"[DONE]" not in received[0]
    connection.close()
    model.stop()  # idempotent


def test_the_demo_runs_its_command_with_bash_then_answers() -> None:
    with demo_chat("it's a test") as model:
        _, raw = post(model, "/v1/chat/completions", agent_body("go"))
        said = deltas(sse(raw))
        command = json.loads(said[3]["tool_calls"][0]["function"]["arguments"])["command"]
        assert command == "printf '%s\\n' 'it'\"'\"'s a test' > prompt.txt && uname -sm && pwd"
        _, raw = post(model, "/v1/chat/completions", agent_body("go"))
        assert "saved your prompt to prompt.txt: it's a test" in deltas(sse(raw))[1]["content"]


@pytest.mark.anyio
async def test_async_context_manager_and_fixture(scripted_chat: ScriptedChat) -> None:
    async with ScriptedChat([ChatText("async")]) as model:
        _, raw = await anyio.to_thread.run_sync(post, model, "/v1/chat/completions", agent_body("go"))
        assert deltas(sse(raw))[1] == {"content": "async"}
    scripted_chat.extend([ChatText("from the fixture")])
    _, raw = post(scripted_chat, "/v1/chat/completions", agent_body("go"))
    assert deltas(sse(raw))[1] == {"content": "from the fixture"}
