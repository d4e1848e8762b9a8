"""``nodeprov run`` with Codex as users run it: the model's name picks the agent, the real
Codex CLI on a local node, the scripted Responses API as its (only) endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeprov.testing import ExecCommand, ResponsesText, ScriptedResponses

from .agents import require_codex_cli
from .test_cli import lines, nodeprov


@pytest.fixture
def gpt5() -> object:
    """The scripted API, its catalog describing ``gpt-5-codex``: a model name that routes to
    Codex, served on 127.0.0.1 (a real name without a local endpoint would reach OpenAI)."""
    require_codex_cli()
    with ScriptedResponses(model="gpt-5-codex") as server:
        yield server


def provider_option(server: ScriptedResponses) -> str:
    return "model_provider=" + json.dumps(server.codex_config())


def test_a_codex_model_runs_codex(gpt5: ScriptedResponses, tmp_path: Path) -> None:
    gpt5.extend(
        [ExecCommand(["sh", "-c", "echo from codex > made.txt; cat made.txt"]), ResponsesText("made it")]
    )
    done = nodeprov(
        tmp_path,
        "run",
        "--json",
        "--model",
        "gpt-5-codex",
        "--permission",
        "full",
        "-o",
        provider_option(gpt5),
        "-e",
        "NODEPROV_SCRIPTED_KEY=sk-from-the-command-line",
        "-s",
        f"root={tmp_path / 'nodes'}",
        "make a file; $(rm -rf ~)",
    )
    assert done.returncode == 0, done.stderr
    events = lines(done.stdout)
    assert events[0]["type"] == "run.started"
    assert events[0]["agent"] == "codex"
    messages = [e["message"] for e in events if e["type"] == "agent.message"]
    tool_result = next(m for m in messages if m["kind"] == "tool_result")
    assert tool_result["output"] == "from codex\n"
    assert messages[-1]["kind"] == "result"
    assert messages[-1]["text"] == "made it"
    assert events[-1]["outcome"] == "ok"
    first, _ = gpt5.agent_requests
    assert first.body["model"] == "gpt-5-codex"
    assert first.headers["authorization"] == "Bearer sk-from-the-command-line"
    assert "make a file; $(rm -rf ~)" in first.text()  # the prompt, word for word
    listed = lines(nodeprov(tmp_path, "runs", "--json").stdout)
    assert [(r["agent"], r["outcome"]) for r in listed] == [("codex", "ok")]


def test_output_schema_prints_the_value(gpt5: ScriptedResponses, tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["answer"]}))
    gpt5.extend([ResponsesText(json.dumps({"answer": "42"}))])
    done = nodeprov(
        tmp_path,
        "run",
        "--agent",
        "codex",
        "--model",
        "gpt-5-codex",
        "--output-schema",
        str(schema),
        "--permission",
        "read-only",
        "-o",
        provider_option(gpt5),
        "-e",
        "NODEPROV_SCRIPTED_KEY=x",
        "-s",
        f"root={tmp_path / 'nodes'}",
        "answer in JSON",
    )
    assert done.returncode == 0, done.stderr
    assert '{"answer": "42"}' in done.stdout.splitlines()
    (request,) = gpt5.agent_requests
    assert request.body["text"]["format"]["schema"] == {"type": "object", "required": ["answer"]}
