"""``nodeprov run`` with Codex as users run it: the model's name picks the agent, the real
Codex CLI on a local node, the scripted Responses API as its (only) endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.testing import ExecCommand, ResponsesText, ScriptedResponses
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until

from .agents import require_codex_cli
from .test_cli import environment, lines, nodeprov
from .test_cli_signals import STOP_BOUND, _remove_run_containers

pytestmark = pytest.mark.anyio


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


def test_the_scripted_demo_runs_codex(tmp_path: Path) -> None:
    """``--agent codex`` with the built-in scripted model: Codex runs the demo's command on
    the node, offline, and says what it did."""
    require_codex_cli()
    done = nodeprov(
        tmp_path, "run", "--agent", "codex", "-s", f"root={tmp_path / 'nodes'}", "hello; $(rm -rf ~)"
    )
    assert done.returncode == 0, done.stderr
    assert "→ command_execution" in done.stdout
    assert "saved your prompt to prompt.txt: hello; $(rm -rf ~)" in done.stdout
    assert "result: ok" in done.stdout


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


def codex_processes(server: ScriptedResponses) -> list[int]:
    """Codex processes told to use ``server`` (its URL is in their arguments), wherever they
    run on this machine (containers' processes are visible from here)."""
    needle = server.url.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if needle in argv and b"exec\0--json" in argv:
                found.append(int(entry.name))
    return found


def start_long_command(
    server: ScriptedResponses, tmp_path: Path, placement: list[str]
) -> tuple[subprocess.Popen[str], str]:
    """``nodeprov run`` of Codex whose model asks for a command that runs until stopped;
    returns once the command runs."""
    marker = unique_marker()
    server.extend([ExecCommand(["sh", "-c", f"sleep {marker}"])])
    argv = ["run", "--json", "--model", "gpt-5-codex", "--permission", "full", "-o", provider_option(server)]
    argv += ["-e", "NODEPROV_SCRIPTED_KEY=x", *placement, "task"]
    process = subprocess.Popen(
        [sys.executable, "-m", "nodeprov", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=environment(tmp_path),
    )
    deadline = time.monotonic() + 90
    while not host_processes_matching(marker):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "codex's command never started"
        time.sleep(0.05)
    return process, marker


@pytest.mark.parametrize("where", ["local", "docker"])
async def test_sigkill_leaves_no_codex_running(
    where: str, gpt5: ScriptedResponses, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """After SIGKILL nothing in ``nodeprov run`` can clean up: Codex's stdin guard sees the
    channel close without its end-of-input line and stops Codex's process group."""
    placement = ["-s", f"root={tmp_path / 'nodes'}"]
    if where == "docker":
        image = request.getfixturevalue("base_image")
        placement = ["--provider", "docker", "--ship-cli", "-s", f"image={image}"]
        placement += ["-s", "network_mode=host", "-s", "pull=never"]
    process, marker = start_long_command(gpt5, tmp_path, [*placement, "--agent-grace", "0"])  # not kept
    assert codex_processes(gpt5)
    process.kill()
    process.communicate(timeout=30)

    async def stopped() -> bool:
        return not codex_processes(gpt5) and not host_processes_matching(marker)

    assert await wait_until(stopped, STOP_BOUND), "codex outlived its control plane"
    requests = len(gpt5.requests)
    await anyio.sleep(1)
    assert len(gpt5.requests) == requests  # nothing calls the model any more
    if where == "docker":
        client: Any = request.getfixturevalue("docker_client")
        _remove_run_containers(client, tmp_path)
