"""The real Codex CLI (its native binary, no node.js) offline against the scripted Responses API.

The binary is ``NODEPROV_CODEX_CLI`` or the one ``scripts/codex.sh`` installs under ``.tools/``
(``make engines`` runs it). Codex runs with an empty environment but for ``PATH``, ``HOME``,
``CODEX_HOME`` and the provider's key, so nothing of this machine's set-up leaks in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeprov.testing import ExecCommand, ResponsesStall, ResponsesText, ScriptedResponses
from nodeprov.testing.pytest_plugin import require_engine

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT = 60  # one `codex exec` against the local server takes well under a second


def codex_binary() -> str:
    configured = os.environ.get("NODEPROV_CODEX_CLI")
    if configured:
        return configured
    installed = sorted(REPO.glob(".tools/codex-*/node_modules/@openai/codex-linux-*/vendor/*/bin/codex"))
    return str(installed[-1]) if installed else ""


@pytest.fixture(scope="module")
def codex() -> str:
    binary = codex_binary()
    require_engine(
        "the Codex CLI",
        bool(binary) and os.access(binary, os.X_OK),
        "run scripts/codex.sh (`make engines` does) or set NODEPROV_CODEX_CLI",
    )
    return binary


@dataclass
class Run:
    returncode: int
    events: list[dict[str, Any]]
    stderr: str

    def items(self, kind: str) -> list[dict[str, Any]]:
        return [e["item"] for e in self.events if e["type"] == "item.completed" and e["item"]["type"] == kind]

    @property
    def thread_id(self) -> str:
        return str(self.events[0]["thread_id"])


@dataclass
class Codex:
    binary: str
    model: ScriptedResponses
    home: Path
    work: Path

    def argv(self, prompt: str, *options: str, resume: str | None = None, catalog: bool = True) -> list[str]:
        # Without the catalog, just the provider table: Codex warns that it knows nothing of the model.
        provider = self.model.codex_args(catalog=catalog)
        common = [
            "--json",
            "--skip-git-repo-check",
            *provider,
            "-m",
            self.model.model,
            "--dangerously-bypass-approvals-and-sandbox",
            *options,
        ]
        if resume is not None:  # `exec resume` has no -C: it goes before the subcommand
            return [self.binary, "exec", "-C", str(self.work), "resume", *common, resume, prompt]
        return [self.binary, "exec", *common, "-C", str(self.work), prompt]

    def env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "CODEX_HOME": str(self.home),
            **self.model.agent_env(),
        }

    def run(self, prompt: str, *options: str, resume: str | None = None, catalog: bool = True) -> Run:
        done = subprocess.run(
            self.argv(prompt, *options, resume=resume, catalog=catalog),
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
        return Run(done.returncode, _jsonl(done.stdout), done.stderr)


def _jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture
def model() -> Any:
    with ScriptedResponses() as server:
        yield server


@pytest.fixture
def cli(codex: str, model: ScriptedResponses, tmp_path: Path) -> Codex:
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return Codex(codex, model, tmp_path / "home", tmp_path / "work")


def event_types(run: Run) -> Sequence[str]:
    return [e["type"] for e in run.events]


@pytest.mark.parametrize("catalog", [True, False], ids=["catalog", "provider-only"])
def test_text_turn(cli: Codex, model: ScriptedResponses, catalog: bool) -> None:
    model.extend([ResponsesText("hello from the script")])
    run = cli.run("say hello", catalog=catalog)
    assert run.returncode == 0, run.stderr
    assert event_types(run)[:2] == ["thread.started"] + (["turn.started"] if catalog else ["item.completed"])
    assert event_types(run)[-1] == "turn.completed"
    assert [m["text"] for m in run.items("agent_message")] == ["hello from the script"]
    usage = run.events[-1]["usage"]
    assert usage["input_tokens"] == 10
    assert usage["output_tokens"] == 5
    warnings = [item["message"] for item in run.items("error")]
    if catalog:  # the model catalog describes the scripted model
        assert warnings == []
        assert model.requests[0].method == "GET"
        assert model.requests[0].path.startswith("/v1/models")
    else:
        assert len(warnings) == 1
        assert "Model metadata for `scripted-model` not found" in warnings[0]
    (request,) = model.agent_requests
    assert request.body["stream"] is True
    assert request.metadata["request_kind"] == "turn"
    assert "say hello" in request.text()
    assert "exec_command" in request.tool_names
    # the rollout of the thread lands under CODEX_HOME/sessions/YYYY/MM/DD/
    (rollout,) = (cli.home / "sessions").glob(f"*/*/*/rollout-*-{run.thread_id}.jsonl")
    assert "hello from the script" in rollout.read_text()


def test_exec_command_runs_for_real(cli: Codex, model: ScriptedResponses) -> None:
    model.extend([ExecCommand(["sh", "-c", "echo hi > out.txt"], text="writing"), ResponsesText("done")])
    run = cli.run("make out.txt")
    assert run.returncode == 0, run.stderr
    assert (cli.work / "out.txt").read_text() == "hi\n"
    (command,) = run.items("command_execution")
    assert command["exit_code"] == 0
    assert command["status"] == "completed"
    assert "echo hi > out.txt" in command["command"]
    assert [m["text"] for m in run.items("agent_message")] == ["writing", "done"]
    first, second = model.agent_requests
    assert second.function_call_outputs
    assert "Process exited with code 0" in second.function_call_outputs[0]
    call = next(item for item in second.input if item.get("type") == "function_call")
    assert call["name"] == "exec_command"
    assert json.loads(call["arguments"]) == {"cmd": "sh -c 'echo hi > out.txt'"}
    assert "make out.txt" in first.text()


def test_resume_carries_the_earlier_conversation(cli: Codex, model: ScriptedResponses) -> None:
    model.extend([ResponsesText("first answer")])
    first = cli.run("the first prompt")
    assert first.returncode == 0, first.stderr
    model.extend([ResponsesText("second answer")])
    again = cli.run("again", resume=first.thread_id)
    assert again.returncode == 0, again.stderr
    assert again.thread_id == first.thread_id
    assert [m["text"] for m in again.items("agent_message")] == ["second answer"]
    resumed = model.agent_requests[-1]
    assert resumed.metadata["history_initialization"] == "cold_resume"
    text = resumed.text()
    assert text.index("the first prompt") < text.index("first answer") < text.index("again")


def test_output_schema_becomes_text_format(cli: Codex, model: ScriptedResponses, tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))
    last = tmp_path / "last.txt"
    model.extend([ResponsesText(json.dumps({"answer": "42"}))])
    run = cli.run("answer in JSON", "--output-schema", str(schema_file), "-o", str(last))
    assert run.returncode == 0, run.stderr
    (request,) = model.agent_requests
    assert request.body["text"] == {
        "format": {"type": "json_schema", "name": "codex_output_schema", "strict": True, "schema": schema}
    }
    (message,) = run.items("agent_message")
    assert json.loads(message["text"]) == {"answer": "42"}
    assert json.loads(last.read_text()) == {"answer": "42"}


def test_sigterm_mid_turn_ends_codex_at_once(cli: Codex, model: ScriptedResponses) -> None:
    model.extend([ResponsesStall("hmm")])
    process = subprocess.Popen(
        cli.argv("stall"),
        env=cli.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not model.agent_requests and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert model.agent_requests, "codex never asked the model"
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == -signal.SIGTERM  # the default disposition: no clean-up output
    assert [e["type"] for e in _jsonl(stdout)] == ["thread.started", "turn.started"]
