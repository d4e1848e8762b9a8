"""``nodeprov run`` with OpenCode as users run it: the built-in scripted demo offline, a
provider/model name picking the agent, the real OpenCode CLI on a local or Docker node, the
scripted Chat Completions API as its (only) endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.testing import BashCommand, ChatText, ScriptedChat
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until

from .agents import require_opencode_cli
from .test_cli import environment, lines, nodeprov
from .test_cli_signals import STOP_BOUND, _remove_run_containers

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _opencode_cli() -> None:
    require_opencode_cli()


def provider_option(chat: ScriptedChat) -> str:
    return "provider=" + json.dumps(chat.opencode_provider())


def test_the_scripted_demo_runs_opencode(tmp_path: Path) -> None:
    """``--agent opencode`` with the built-in scripted model: OpenCode runs the demo's command
    on the node, offline, and says what it did."""
    done = nodeprov(
        tmp_path, "run", "--agent", "opencode", "-s", f"root={tmp_path / 'nodes'}", "hello; $(rm -rf ~)"
    )
    assert done.returncode == 0, done.stderr
    assert "→ bash" in done.stdout
    assert "saved your prompt to prompt.txt: hello; $(rm -rf ~)" in done.stdout
    assert "result: ok" in done.stdout


def test_a_provider_model_name_runs_opencode(scripted_chat: ScriptedChat, tmp_path: Path) -> None:
    scripted_chat.extend([BashCommand("echo from opencode > made.txt; cat made.txt"), ChatText("made it")])
    done = nodeprov(
        tmp_path,
        "run",
        "--json",
        "--model",
        scripted_chat.opencode_model,
        "--permission",
        "full",
        "-o",
        provider_option(scripted_chat),
        "-e",
        "NODEPROV_SCRIPTED_KEY=sk-from-the-command-line",
        "-s",
        f"root={tmp_path / 'nodes'}",
        "make a file; $(rm -rf ~)",
    )
    assert done.returncode == 0, done.stderr
    events = lines(done.stdout)
    assert events[0]["type"] == "run.started"
    assert events[0]["agent"] == "opencode"
    messages = [e["message"] for e in events if e["type"] == "agent.message"]
    assert messages[0]["kind"] == "notice"
    assert messages[0]["session_id"].startswith("ses_")
    tool_result = next(m for m in messages if m["kind"] == "tool_result")
    assert tool_result["output"] == "from opencode\n"
    assert messages[-1]["kind"] == "result"
    assert messages[-1]["text"] == "made it"
    assert events[-1]["outcome"] == "ok"
    assert events[-1]["agent_session_id"] == messages[0]["session_id"]
    first, _ = scripted_chat.agent_requests
    assert first.body["model"] == scripted_chat.model
    assert first.headers["authorization"] == "Bearer sk-from-the-command-line"
    assert "make a file; $(rm -rf ~)" in first.text()  # the prompt, word for word
    listed = lines(nodeprov(tmp_path, "runs", "--json").stdout)
    assert [(r["agent"], r["outcome"]) for r in listed] == [("opencode", "ok")]


def test_an_output_schema_is_refused_before_a_run(scripted_chat: ScriptedChat, tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object"}))
    done = nodeprov(
        tmp_path,
        "run",
        "--agent",
        "opencode",
        "--output-schema",
        str(schema),
        "-s",
        f"root={tmp_path / 'nodes'}",
        "x",
    )
    assert done.returncode != 0
    assert "OpenCode has no structured output" in done.stderr
    assert not (tmp_path / "nodes").exists() or list((tmp_path / "nodes").iterdir()) == []
    assert scripted_chat.requests == []


def opencode_processes(chat: ScriptedChat) -> list[int]:
    """OpenCode processes told to use ``chat`` (its URL is in their environment's config),
    wherever they run on this machine (containers' processes are visible from here)."""
    needle = chat.url.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ, argv = (entry / "environ").read_bytes(), (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if needle in environ and b"run\0--format\0json" in argv:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("where", ["local", "docker"])
async def test_sigkill_leaves_no_opencode_running(
    where: str, scripted_chat: ScriptedChat, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """After SIGKILL nothing in ``nodeprov run`` can clean up: OpenCode's stdin guard sees the
    channel close without its end-of-input line and stops OpenCode, and sweeps the command
    it started in a session of its own."""
    placement = ["-s", f"root={tmp_path / 'nodes'}"]
    if where == "docker":
        image = request.getfixturevalue("base_image")
        placement = ["--provider", "docker", "--ship-cli", "-s", f"image={image}"]
        placement += ["-s", "network_mode=host", "-s", "pull=never"]
    marker = unique_marker()
    scripted_chat.extend([BashCommand(f"sleep {marker}")])
    argv = ["run", "--json", "--model", scripted_chat.opencode_model, "--permission", "full"]
    argv += ["-o", provider_option(scripted_chat), "-e", "NODEPROV_SCRIPTED_KEY=x", *placement]
    argv += ["--agent-grace", "0", "task"]  # not kept
    process = await anyio.open_process(
        [sys.executable, "-m", "nodeprov", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        env=environment(tmp_path),
    )

    async def started() -> bool:
        assert process.returncode is None, "nodeprov run ended before the command started"
        return bool(host_processes_matching(marker))

    assert await wait_until(started, 90), "opencode's command never started"
    assert opencode_processes(scripted_chat)
    process.kill()
    with anyio.fail_after(30):
        await process.wait()

    async def stopped() -> bool:
        return not opencode_processes(scripted_chat) and not host_processes_matching(marker)

    assert await wait_until(stopped, STOP_BOUND), "opencode outlived its control plane"
    if where == "docker":
        client: Any = request.getfixturevalue("docker_client")
        _remove_run_containers(client, tmp_path)
