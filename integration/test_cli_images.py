"""Prompts with images as users give them: ``nodeprov run --image`` with the real Claude Code
CLI, the real Codex CLI and the real OpenCode CLI, each against its scripted model API, on
local and Docker nodes.
The PNG reaches the model request byte for byte (base64-decoded and compared); after a pause
the resume on a fresh node still shows the model the first turn's image; what a model cannot
take is refused before anything is provisioned, with one line."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeprov.testing import (
    BashCommand,
    ChatText,
    ExecCommand,
    ResponsesText,
    ScriptedChat,
    ScriptedModel,
    ScriptedResponses,
    Text,
    ToolUse,
)
from nodeprov.testing.conformance import host_processes_matching, unique_marker
from nodeprov.testing.images import sample_png

from .agents import require_claude_cli, require_codex_cli, require_opencode_cli
from .test_cli import NODEPROV, environment, lines, nodeprov

IMAGE = sample_png(64, 48, seed=7)


@dataclass
class Model:
    """An agent's scripted model API and the ``nodeprov run`` options that use it."""

    agent: str
    server: ScriptedModel | ScriptedResponses | ScriptedChat
    options: list[str]
    env: list[str]  # -e options: never stored, given again on resume

    def say(self, text: str) -> None:
        said = {"claude": Text, "codex": ResponsesText, "opencode": ChatText}[self.agent](text)
        self.server.extend([said])

    def run_command(self, command: str) -> None:
        if self.agent == "claude":
            self.server.extend([ToolUse("Bash", {"command": command})])  # type: ignore[list-item]
        elif self.agent == "codex":
            self.server.extend([ExecCommand(["sh", "-c", command])])  # type: ignore[list-item]
        else:
            self.server.extend([BashCommand(command)])  # type: ignore[list-item]

    def images(self) -> list[list[tuple[str, bytes]]]:
        """What each of the agent's requests showed the model."""
        return [request.images() for request in self.server.agent_requests]


@pytest.fixture(params=["claude", "codex", "opencode"])
def model(request: pytest.FixtureRequest) -> Iterator[Model]:
    if request.param == "claude":
        require_claude_cli()
        with ScriptedModel() as messages:
            env = _each("-e", [f"{name}={value}" for name, value in messages.agent_env().items()])
            yield Model("claude", messages, ["--model", "claude-sonnet-4-5"], env)
    elif request.param == "codex":
        require_codex_cli()
        with ScriptedResponses(model="gpt-5-codex") as responses:
            provider = "model_provider=" + json.dumps(responses.codex_config())
            env = _each("-e", [f"{name}={value}" for name, value in responses.agent_env().items()])
            yield Model("codex", responses, ["--model", "gpt-5-codex", "-o", provider], env)
    else:
        require_opencode_cli()
        with ScriptedChat() as chat:
            provider = "provider=" + json.dumps(chat.opencode_provider())
            env = _each("-e", [f"{name}={value}" for name, value in chat.agent_env().items()])
            yield Model("opencode", chat, ["--model", chat.opencode_model, "-o", provider], env)


def _each(flag: str, values: list[str]) -> list[str]:
    return [item for value in values for item in (flag, value)]


@pytest.fixture(params=["local", "docker"])
def node_options(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    if request.param == "local":
        return ["-s", f"root={tmp_path / 'nodes'}"]
    image = request.getfixturevalue("base_image")
    settings = [f"image={image}", "network_mode=host", "pull=never"]
    return ["-p", "docker", *_each("-s", settings), "--ship-cli"]


def run_args(model: Model, node_options: list[str], *extra: str) -> list[str]:
    return ["run", "--json", "--permission", "full", *model.options, *model.env, *node_options, *extra]


def test_an_image_reaches_the_model_byte_for_byte(
    model: Model, node_options: list[str], tmp_path: Path
) -> None:
    (tmp_path / "screen.png").write_bytes(IMAGE)
    model.say("a gradient")
    done = nodeprov(tmp_path, *run_args(model, node_options, "--image", "screen.png", "what is this?"))
    assert done.returncode == 0, done.stderr
    events = lines(done.stdout)
    assert events[0]["images"] == [
        {
            "type": "image",
            "sha256": events[0]["images"][0]["sha256"],
            "media_type": "image/png",
            "size": len(IMAGE),
        }
    ]
    assert events[-1]["outcome"] == "ok"
    assert model.images() == [[("image/png", IMAGE)]]
    assert "what is this?" in model.server.agent_requests[0].text()


def test_an_image_from_stdin(model: Model, tmp_path: Path) -> None:
    model.say("seen")
    argv = [*NODEPROV, *run_args(model, ["-s", f"root={tmp_path / 'nodes'}"], "--image", "-", "look")]
    done = subprocess.run(
        argv,
        input=IMAGE,
        capture_output=True,
        timeout=180,
        check=False,
        env=environment(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert model.images() == [[("image/png", IMAGE)]]


def test_a_resume_on_a_fresh_node_still_shows_the_first_image(
    model: Model, node_options: list[str], tmp_path: Path
) -> None:
    (tmp_path / "mockup.png").write_bytes(IMAGE)
    marker = unique_marker()
    model.run_command(f"sh -c 'sleep {marker}'")
    argv = [*NODEPROV, *run_args(model, node_options, "--image", "mockup.png", "build this page")]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=environment(tmp_path),
    )
    _until_running(marker, process)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 3, stderr
    run_id = lines(stdout)[0]["run_id"]

    model.say("built it")
    resumed = nodeprov(tmp_path, "resume", run_id, "--message", "carry on", "--json", *model.env)
    assert resumed.returncode == 0, resumed.stderr
    events = lines(resumed.stdout)
    ready = next(event for event in events if event["type"] == "node.ready")
    assert (ready["reused"], ready["transcript_restored"]) == (False, True)  # a fresh node
    assert events[-1]["outcome"] == "ok"
    last = model.server.agent_requests[-1]
    assert "carry on" in last.text()
    assert last.images() == [("image/png", IMAGE)]  # the first turn's, in the conversation


def _until_running(marker: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not host_processes_matching(marker):
        if process.poll() is not None:
            raise AssertionError(f"the run ended before its tool ran: {process.communicate()}")
        assert time.monotonic() < deadline, "the agent's tool never started"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--model", "o3-mini", "--image", "screen.png"],
            "error: the codex agent cannot send images to model o3-mini",
        ),
        (["--image", "notes.txt"], "error: image notes.txt: not a PNG, JPEG, GIF or WebP image"),
        (
            ["--image", "huge.png"],
            "error: image 1 is 4000000 bytes: the claude agent's model API takes at most",
        ),
        (["--image", "missing.png"], "error: image missing.png: No such file or directory"),
    ],
)
def test_what_a_model_cannot_take_is_refused_before_anything_runs(
    args: list[str], said: str, tmp_path: Path
) -> None:
    (tmp_path / "screen.png").write_bytes(IMAGE)
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "huge.png").write_bytes(IMAGE[:8] + bytes(4_000_000 - 8))
    done = nodeprov(
        tmp_path, "run", "--permission", "full", "-s", f"root={tmp_path / 'nodes'}", *args, "look"
    )
    assert done.returncode == 2  # a usage error
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(said), done.stderr
    assert not (tmp_path / "nodes").exists()
    listed = nodeprov(tmp_path, "runs", "--json")
    assert lines(listed.stdout) == []
