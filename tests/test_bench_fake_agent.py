"""The compiled fake agent of the benchmarks (bench/fake_agent.c) against the Python fake
(nodeprov.testing.fake_agent): for stream steps they write the same lines, byte for byte but
for uuids, times, durations and pids, on stdout and in the transcript; and both nodeprov's
Claude agent and the SDK alone run it to the end."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ClaudeSDKClient, ResultMessage

from bench.compiled_agent import CPU_FILE_ENV, CompilerMissingError, compiled_fake_agent
from nodeprov.agents import AgentText
from nodeprov.runs import AgentMessage, Orchestrator, RunFinished
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.pytest_plugin import engine_missing

pytestmark = pytest.mark.anyio

TIMEOUT = 30
SESSION = "5f0e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
_INITIALIZE = {"type": "control_request", "request_id": "req_1_init", "request": {"subtype": "initialize"}}
_INTERRUPT = {"type": "control_request", "request_id": "req_2_stop", "request": {"subtype": "interrupt"}}
_UNKNOWN = {"type": "control_request", "request_id": "req_3_mode", "request": {"subtype": "set_model"}}


def _user(text: str) -> dict[str, Any]:
    message = {"role": "user", "content": text}
    return {"type": "user", "session_id": "", "message": message, "parent_tool_use_id": None}


@pytest.fixture(scope="module")
def compiled() -> str:
    try:
        return compiled_fake_agent()
    except CompilerMissingError as error:
        engine_missing("a C compiler", str(error))


@dataclass(frozen=True)
class Scenario:
    steps: list[dict[str, Any]]
    args: list[str]
    stdin: list[dict[str, Any] | str]  # a str is written as it is
    interrupt: bool = False  # sent once the first assistant message is read


SCENARIOS = {
    "one turn, mirrored": Scenario(
        [{"stream": [3, 64, 0]}], ["--session-id", SESSION, "--session-mirror"], [_INITIALIZE, _user("go")]
    ),
    "resumed, two turns and steps, noise": Scenario(
        [{"stream": [2, 10, 0]}, {"stream": [1, 100, 0.01]}],
        [f"--resume={SESSION}", "--permission-mode", "bypassPermissions"],
        [
            _INITIALIZE,
            "not json",
            _user('first "é" 😀'),
            _UNKNOWN,
            '{"type": "control_response"}',
            _user("2"),
        ],
    ),
    "forked, nothing to stream": Scenario(
        [], ["--resume", SESSION, "--fork-session", "--session-mirror"], [_INITIALIZE, _user("go")]
    ),
    "interrupted": Scenario(
        [{"stream": [100, 64, 0.02]}],
        ["--session-id", SESSION, "--session-mirror"],
        [_INITIALIZE, _user("go")],
        interrupt=True,
    ),
}


@dataclass(frozen=True)
class Transcript:
    stdout: list[str]
    files: list[str]
    status: int


async def _converse(command: str, scenario: Scenario, workdir: Path, config: Path) -> Transcript:
    env = {
        "NODEPROV_FAKE_AGENT": json.dumps(scenario.steps),
        "CLAUDE_CONFIG_DIR": str(config),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    lines: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with await anyio.open_process([command, *scenario.args], env=env, cwd=workdir) as process:
            assert process.stdin is not None
            assert process.stdout is not None
            text = "".join(f"{s if isinstance(s, str) else json.dumps(s)}\n" for s in scenario.stdin)
            await process.stdin.send(text.encode())
            reader = BufferedByteReceiveStream(process.stdout)
            while scenario.interrupt:
                lines.append((await reader.receive_until(b"\n", 1 << 20)).decode())
                if json.loads(lines[-1])["type"] == "assistant":
                    await process.stdin.send(json.dumps(_INTERRUPT).encode() + b"\n")
                    break
            await process.stdin.aclose()  # stdin EOF ends no turn: the agent exits after the last
            rest = b""
            try:
                while True:
                    rest += await reader.receive()
            except anyio.EndOfStream:
                pass
            lines += rest.decode().splitlines()
            status = await process.wait()
    return Transcript(lines, _transcript_lines(config), status)


def _transcript_lines(config: Path) -> list[str]:
    return [line for path in sorted(config.rglob("*.jsonl")) for line in path.read_text().splitlines()]


_VOLATILE = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r'"t=\d+\.\d{6} '), '"t=<time> '),
    (re.compile(r'("(?:duration_ms|duration_api_ms|pid)":\s?)\d+'), r"\g<1>0"),
    (re.compile(r'("timestamp":\s?)"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z"'), r'\g<1>"<time>"'),
]


def _normalized(lines: list[str], config: Path, *, collapse: bool) -> list[str]:
    """The lines with what differs from run to run masked; ``collapse``: a streamed message
    (and its frame) once, however many were sent before an interrupt."""
    found: list[str] = []
    for line in lines:
        masked = line.replace(json.dumps(str(config))[1:-1], "<config>")
        for pattern, replacement in _VOLATILE:
            masked = pattern.sub(replacement, masked)
        if not (collapse and masked in found[-2:]):
            found.append(masked)
    return found


@pytest.mark.parametrize("name", SCENARIOS)
async def test_the_compiled_agent_writes_what_the_python_fake_writes(
    name: str, compiled: str, tmp_path: Path
) -> None:
    scenario = SCENARIOS[name]
    workdir = tmp_path / "wörk dir"  # escaped in JSON, and a single '-' in the project key
    workdir.mkdir()
    said = {}
    for which, command in {"python": fake_agent_command(tmp_path), "compiled": compiled}.items():
        config = tmp_path / f"config-{which}"
        transcript = await _converse(command, scenario, workdir, config)
        stdout = _normalized(transcript.stdout, config, collapse=scenario.interrupt)
        files = _normalized(transcript.files, config, collapse=scenario.interrupt)
        said[which] = (stdout, files, transcript.status)
    assert said["compiled"] == said["python"]
    stdout, files, status = said["python"]
    kinds = [json.loads(line)["type"] for line in stdout]
    assert kinds.count("result") == (2 if "two turns" in name else 1)
    assert status == (1 if scenario.interrupt else 0)
    assert ("transcript_mirror" in kinds) == ("--session-mirror" in scenario.args)
    assert files, "no transcript"


async def test_a_run_through_nodeprov_on_a_local_node(compiled: str, tmp_path: Path) -> None:
    steps = [{"stream": [5, 200, 0]}]
    options = {"cli_path": compiled, "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
    texts: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with (
            await Store.open(f"sqlite:///{tmp_path}/runs.db") as store,
            Orchestrator(store) as orchestrator,
        ):
            run = await orchestrator.start(
                "go",
                provider="local",
                provider_settings={"root": str(tmp_path / "nodes")},
                options=options,
                permission="full",
            )
            async for event in run.events():
                if isinstance(event, AgentMessage) and isinstance(event.message, AgentText):
                    texts.append(event.message.text)
                elif isinstance(event, RunFinished):
                    assert event.outcome == "ok", event.error
            record = await store.run(run.id)
            assert record is not None
            assert record.project_key
            assert record.agent_session_id
            entries = await store.transcripts.load(
                {"project_key": record.project_key, "session_id": record.agent_session_id}
            )
    assert len(texts) == 5
    assert all(text.startswith("t=") and len(text) == 200 for text in texts)
    assert entries is not None
    assert [entry["type"] for entry in entries] == ["user", *["assistant"] * 5]  # mirrored


async def test_the_sdk_alone_runs_it_and_it_reports_its_cpu(
    compiled: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK", "1")
    cpu_file = tmp_path / "cpu"
    env = {
        "NODEPROV_FAKE_AGENT": json.dumps([{"stream": [4, 100, 0]}]),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "config"),
        CPU_FILE_ENV: str(cpu_file),
    }
    options = ClaudeAgentOptions(cli_path=compiled, env=env, cwd=tmp_path)
    with anyio.fail_after(TIMEOUT):
        async with ClaudeSDKClient(options=options) as client:
            await client.query("go")
            messages = [message async for message in client.receive_response()]
    assert sum(isinstance(message, AssistantMessage) for message in messages) == 4
    [result] = [message for message in messages if isinstance(message, ResultMessage)]
    assert result.subtype == "success"
    assert not result.is_error
    assert re.fullmatch(r"\d+ \d+\n", cpu_file.read_text())  # one agent, one line
