"""The scripted Gemini API, spoken to over HTTP as the ``@google/genai`` SDK speaks it, and
by the real Gemini CLI."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from nodeprov.agents._installed import installed_cli
from nodeprov.offline.gemini import API_KEY
from nodeprov.testing import (
    GeminiFunctionCall,
    GeminiHttpError,
    GeminiStall,
    GeminiText,
    GeminiTurn,
    ScriptedGemini,
    ShellCommand,
)
from nodeprov.testing.pytest_plugin import require_engine

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
SHELL_TOOL = {
    "functionDeclarations": [
        {
            "name": "run_shell_command",
            "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}},
        }
    ]
}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
# How the SDK (processStreamResponse) cuts an event off its buffer: JavaScript's `.` takes no
# \r or \n, so an event is one line.
EVENT = re.compile(r"\s*data: ([^\r\n]*)(?:\n\n|\r\r|\r\n\r\n)")


@asynccontextmanager
async def client(model: ScriptedGemini, key: str | None = API_KEY) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"x-goog-api-key": key} if key is not None else {}
    async with httpx.AsyncClient(base_url=model.url, headers=headers, trust_env=False, timeout=30) as http:
        yield http


def agent_body(*texts: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": text}]} for text in texts],
        "systemInstruction": {"role": "user", "parts": [{"text": "be scripted"}]},
        "tools": [SHELL_TOOL] if tools is None else tools,
        "generationConfig": {"temperature": 1},
    }


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The stream's responses, split as the SDK splits them (and as Google frames them: one
    ``data:`` line each, then ``\\r\\n\\r\\n``); nothing but whitespace may be left over."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/event-stream"
    buffer, found = response.text, []
    while match := EVENT.match(buffer):
        assert match[0].endswith("\r\n\r\n")
        found.append(json.loads(match[1]))
        buffer = buffer[match.end() :]
    assert not buffer.strip(), buffer
    return found


def parts(answer: dict[str, Any]) -> list[dict[str, Any]]:
    (candidate,) = answer["candidates"]
    assert candidate["content"]["role"] == "model"
    return list(candidate["content"]["parts"])


def finish(answer: dict[str, Any]) -> str | None:
    reason = answer["candidates"][0].get("finishReason")
    return str(reason) if reason is not None else None


async def test_streams_a_text_turn_with_its_thought_as_google_does() -> None:
    async with (
        ScriptedGemini([GeminiText("all done", thought="**Weighing** it")]) as model,
        client(model) as http,
    ):
        assert model.url.startswith("http://127.0.0.1:")
        chunks = events(await http.post(STREAM, json=agent_body("go")))
    assert [parts(chunk) for chunk in chunks] == [
        [{"text": "**Weighing** it", "thought": True}],
        [{"text": "all done"}],
    ]
    assert [finish(chunk) for chunk in chunks] == [None, "STOP"]
    for chunk in chunks:
        usage = chunk["usageMetadata"]
        assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"] > 0
        assert chunk["modelVersion"] == "gemini-2.5-flash"  # the path's model
    assert len({chunk["responseId"] for chunk in chunks}) == 1


async def test_function_calls_and_shell_commands_streamed_and_not() -> None:
    script: list[GeminiTurn] = [
        GeminiFunctionCall("write_file", {"file_path": "a.txt", "content": "x"}, text="writing"),
        ShellCommand("echo hi > out.txt"),
        ShellCommand("ls", description="Lists the files", dir_path="sub", text="looking"),
    ]
    async with ScriptedGemini(script) as model, client(model) as http:
        chunks = events(await http.post(STREAM, json=agent_body("go")))
        assert [parts(chunk) for chunk in chunks] == [
            [{"text": "writing"}],
            [{"functionCall": {"name": "write_file", "args": {"file_path": "a.txt", "content": "x"}}}],
        ]
        assert finish(chunks[-1]) == "STOP"
        (chunk,) = events(await http.post(STREAM, json=agent_body("go")))
        call = {"command": "echo hi > out.txt", "description": "Runs a scripted command"}
        assert parts(chunk) == [{"functionCall": {"name": "run_shell_command", "args": call}}]
        answer = (await http.post(GENERATE, json=agent_body("go"))).json()
    call = {"command": "ls", "description": "Lists the files", "dir_path": "sub"}
    assert parts(answer) == [
        {"text": "looking"},
        {"functionCall": {"name": "run_shell_command", "args": call}},
    ]
    assert finish(answer) == "STOP"
    assert answer["usageMetadata"]["totalTokenCount"] == 15
    assert answer["modelVersion"] == "gemini-2.5-flash"


def json_request(schema: dict[str, Any], key: str = "responseJsonSchema") -> dict[str, Any]:
    """A side request for JSON, as the CLI's ``generateJson`` makes one."""
    config = {"responseMimeType": "application/json", key: schema}
    return {"contents": [{"role": "user", "parts": [{"text": "decide"}]}], "generationConfig": config}


NEXT_SPEAKER = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "next_speaker": {"type": "string", "enum": ["user", "model"]},
    },
    "required": ["reasoning", "next_speaker"],
}
ROUTER = {  # the numerical classifier's, in the upper-case names of Gemini's Type
    "type": "OBJECT",
    "properties": {"complexity_reasoning": {"type": "STRING"}, "complexity_score": {"type": "INTEGER"}},
}
LOOP_CHECK = {
    "type": "object",
    "properties": {
        "unproductive_state_analysis": {"type": "string"},
        "unproductive_state_confidence": {"type": "number"},
    },
}


async def test_side_requests_get_fixed_replies_and_do_not_consume_the_script() -> None:
    async with (
        ScriptedGemini([GeminiText("the real answer")], fallback=GeminiText("fallback")) as model,
        client(model) as http,
    ):
        decided = (await http.post(GENERATE, json=json_request(NEXT_SPEAKER))).json()
        assert json.loads(parts(decided)[0]["text"]) == {"next_speaker": "user", "reasoning": "scripted"}
        assert finish(decided) == "STOP"
        routed = (await http.post(GENERATE, json=json_request(ROUTER, "responseSchema"))).json()
        assert json.loads(parts(routed)[0]["text"]) == {
            "complexity_reasoning": "scripted",
            "complexity_score": 1,
        }
        checked = (await http.post(GENERATE, json=json_request(LOOP_CHECK))).json()
        assert json.loads(parts(checked)[0]["text"])["unproductive_state_confidence"] == 0
        (titled,) = events(await http.post(STREAM, json=agent_body("Generate a title", tools=[])))
        assert parts(titled) == [{"text": "ok"}]
        counted = (
            await http.post("/v1beta/models/gemini-2.5-flash:countTokens", json=agent_body("q"))
        ).json()
        assert isinstance(counted["totalTokens"], int)
        assert counted["totalTokens"] > 0

        (answer,) = events(await http.post(STREAM, json=agent_body("q")))
        assert parts(answer) == [{"text": "the real answer"}]
        (answer,) = events(await http.post(STREAM, json=agent_body("q")))
        assert parts(answer) == [{"text": "fallback"}]
        model.extend([GeminiText("extended")])
        answer = (await http.post(GENERATE, json=agent_body("q"))).json()  # not streamed: a turn too
        assert parts(answer) == [{"text": "extended"}]
        assert [r.is_agent_turn for r in model.requests] == [False] * 5 + [True] * 3
        assert len(model.agent_requests) == 3
    with pytest.raises(RuntimeError, match="not running"):
        _ = model.url


async def test_the_key_is_checked_as_google_checks_it() -> None:
    async with ScriptedGemini([GeminiText("for the key holder")]) as model:
        async with client(model, key=None) as http:
            missing = await http.post(STREAM, json=agent_body("go"))
        assert missing.status_code == 403
        assert missing.json()["error"]["status"] == "PERMISSION_DENIED"
        async with client(model, key="some-other-key") as http:
            wrong = await http.post(STREAM, json=agent_body("go"))
            listing = await http.get("/v1beta/models")
        assert (wrong.status_code, listing.status_code) == (400, 400)
        error = wrong.json()["error"]
        assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
        assert error["message"] == "API key not valid. Please pass a valid API key."
        assert error["details"][0]["reason"] == "API_KEY_INVALID"
        async with client(model, key=None) as http:  # the key as a query parameter, too
            (answer,) = events(await http.post(f"{STREAM}&key={API_KEY}", json=agent_body("go")))
        assert parts(answer) == [{"text": "for the key holder"}]  # the refused took no turn
        assert [r.is_agent_turn for r in model.requests] == [False, False, False, True]


async def test_http_error_turns_unknown_routes_and_bad_bodies_answer_as_google() -> None:
    script: list[GeminiTurn] = [GeminiHttpError(503, "down"), GeminiHttpError(429, "slow down")]
    async with ScriptedGemini(script) as model, client(model) as http:
        for status, name, message in [(503, "UNAVAILABLE", "down"), (429, "RESOURCE_EXHAUSTED", "slow down")]:
            refused = await http.post(STREAM, json=agent_body("go"))
            assert refused.status_code == status
            assert refused.json() == {"error": {"code": status, "message": message, "status": name}}
        unknown = await http.post("/v1beta/models/gemini-2.5-flash:embedContent", json=agent_body("go"))
        assert unknown.status_code == 404
        assert unknown.json()["error"]["status"] == "NOT_FOUND"
        assert not model.requests[-1].is_agent_turn
        for bad in [b"{not json", b"[1, 2]"]:
            answer = await http.post(GENERATE, content=bad)
            assert answer.status_code == 400
            assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_records_requests_their_text_tool_outputs_and_images() -> None:
    body = agent_body("look at this")
    body["contents"][0]["parts"] += [
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}},
        {"inlineData": {"mimeType": "image/png", "data": "!!not base64!!"}},
    ]
    body["contents"] += [
        {"role": "model", "parts": [{"text": "a thought", "thought": True}, {"text": "an answer"}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "out.txt"}}}],
        },
        {"role": "user", "parts": [{"text": "and now?"}]},
    ]
    async with ScriptedGemini() as model, client(model) as http:
        await http.post(STREAM, json=body)
    (request,) = model.requests
    assert request.is_agent_turn
    assert (request.method, request.path, request.model) == ("POST", STREAM, "gemini-2.5-flash")
    assert request.tool_names == ["run_shell_command"]
    assert request.text() == "look at this\nand now?"  # the user's, not the model's or the system's
    assert request.function_responses == [{"output": "out.txt"}]
    assert request.images() == [("image/png", PNG)]
    assert request.headers["x-goog-api-key"] == API_KEY
    assert request.body == body


async def test_models_versions_and_cli_settings() -> None:
    async with ScriptedGemini(model="my-model") as model, client(model) as http:
        listing = (await http.get("/v1beta/models")).json()
        assert [entry["name"] for entry in listing["models"]] == ["models/my-model"]
        one = (await http.get("/v1beta/models/gemini-2.5-pro")).json()
        assert one["name"] == "models/gemini-2.5-pro"
        assert "generateContent" in one["supportedGenerationMethods"]
        assert (await http.get("/v1beta/elsewhere")).status_code == 404
        (answer,) = events(
            await http.post("/v1alpha/models/x:streamGenerateContent?alt=sse", json=agent_body())
        )
        assert answer["modelVersion"] == "x"
        assert [(r.method, r.model, r.is_agent_turn) for r in model.requests[:2]] == [
            ("GET", "", False),
            ("GET", "gemini-2.5-pro", False),
        ]
        assert model.agent_env() == {"GEMINI_API_KEY": API_KEY, "GOOGLE_GEMINI_BASE_URL": model.url}
        settings = model.gemini_settings()
    assert settings["model"] == {"name": "my-model"}
    assert settings["privacy"] == {"usageStatisticsEnabled": False}
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"


async def test_a_stall_holds_the_stream_open_until_stop() -> None:
    model = ScriptedGemini([GeminiStall("hmm")])
    model.start()
    received = b""
    try:
        async with client(model) as http, http.stream("POST", STREAM, json=agent_body("go")) as response:
            chunks = response.aiter_raw()
            with anyio.fail_after(30):
                # The text, then a ping (whitespace, which the SDK skips): the stream is open.
                while not re.fullmatch(rb"data: [^\r\n]*\r\n\r\n(\r\n)+", received):
                    received += await anext(chunks)
                await anyio.to_thread.run_sync(model.stop)
                received += b"".join([chunk async for chunk in chunks])
    finally:
        model.stop()
    (event,) = events(httpx.Response(200, headers={"content-type": "text/event-stream"}, content=received))
    assert parts(event) == [{"text": "hmm"}]
    assert finish(event) is None  # never finished
    model.stop()  # idempotent


def gemini_cli() -> str | None:
    """The Gemini CLI: on PATH, else where ``scripts/gemini.sh`` links or installs it."""
    bundles = sorted(REPO.glob(".tools/gemini-*/node_modules/@google/gemini-cli/bundle/gemini.js"))
    return shutil.which("gemini") or installed_cli("gemini") or (str(bundles[-1]) if bundles else None)


async def test_the_real_gemini_cli_runs_a_command_and_answers(tmp_path: Path) -> None:
    """``gemini -p`` in a home of its own, whose settings keep it on the server (nothing else
    in its environment: no proxy, no other key): a command, its output back to the model,
    the answer printed."""
    cli = gemini_cli()
    require_engine(
        "the Gemini CLI", cli is not None and shutil.which("node") is not None, "run scripts/gemini.sh"
    )
    assert cli is not None
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    script: list[GeminiTurn] = [ShellCommand("echo hi", text="Running it."), GeminiText("It printed hi.")]
    async with ScriptedGemini(script) as model:
        (home / ".gemini").mkdir(parents=True)
        (home / ".gemini" / "settings.json").write_text(json.dumps(model.gemini_settings()))
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(home),
            **model.agent_env(),
            "NO_PROXY": "127.0.0.1,localhost",
        }
        # --skip-trust: run headless (-p), the CLI refuses a folder it does not trust.
        argv = [cli, "-p", "Say hi from the shell.", "--output-format", "json", "--yolo", "--skip-trust"]
        with anyio.fail_after(180):
            done = await anyio.run_process(argv, cwd=work, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["response"] == "It printed hi."
    first, second = model.agent_requests
    assert "Say hi from the shell." in first.text()
    assert "run_shell_command" in first.tool_names
    (output,) = second.function_responses
    assert "Output: hi" in output["output"]
    # The settings' model on the streamed path; no side request (no routing with a model set).
    assert [(r.path, r.model) for r in model.requests] == [(STREAM, model.model)] * 2
    assert {r.headers["x-goog-api-key"] for r in model.requests} == {API_KEY}
