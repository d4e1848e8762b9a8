"""``nodeprov acp`` on a Docker node: the ACP Python library as the editor, the real Gemini
CLI as the agent on the node, the scripted Gemini API, a real store. One editor session: a
prompt whose command writes a file on the node, streamed to the editor as a tool call; a
prompt whose model reads that file, which the CLI asks for through ACP's ``fs`` and nodeprov
serves on the node; a cancel mid-command, which pauses the turn and stops the command. The
model counts exactly the requests each turn makes; ``nodeprov logs`` then shows the same run,
and no container is left."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from acp import text_block

from nodeprov.runs import TURN_ENDED
from nodeprov.testing import GeminiFunctionCall, GeminiText, ScriptedGemini, ShellCommand
from nodeprov.testing.conformance import host_processes_matching, unique_marker
from tests.editor import NODEPROV, EditorSide, acp_process

from .agents import gemini_mounts, require_gemini_cli, until_tool_runs
from .containers import node_containers

pytestmark = pytest.mark.anyio


@pytest.fixture
def gemini() -> Any:
    with ScriptedGemini() as server:
        yield server


def _args(image: str, gemini: ScriptedGemini) -> list[str]:
    """Gemini CLI sessions on Docker nodes of ``image`` on the host's network (where the
    scripted API listens), the CLI and node.js mounted from this machine."""
    settings = {"image": image, "network_mode": "host", "pull": "never", "mounts": gemini_mounts()}
    env = [arg for name, value in gemini.agent_env().items() for arg in ("--env", f"{name}={value}")]
    return [
        "--provider", "docker",
        *[arg for key, value in settings.items() for arg in ("--setting", f"{key}={json.dumps(value)}")],
        "--agent", "gemini",
        "--model", gemini.model,
        *env,
        "--option", f"cli_path={require_gemini_cli()}",
        "--option", "no_output_timeout=120",
        "--no-ship-cli",
    ]  # fmt: skip


async def _prompt(side: EditorSide, session: str, text: str) -> str:
    with anyio.fail_after(180):
        answer = await side.connection.prompt(session_id=session, prompt=[text_block(text)])
    return str(answer.stop_reason)


async def test_an_editor_session_through_nodeprov_acp_on_a_docker_node(
    tmp_path: Path, base_image: str, gemini: ScriptedGemini, docker_client: docker.DockerClient
) -> None:
    store = f"sqlite:///{tmp_path}/store.db"
    marker = unique_marker()
    editor = acp_process(_args(base_image, gemini), tmp_path / "acp.log", {"NODEPROV_STORE": store})
    async with editor as side:
        session = await side.start()

        gemini.extend([ShellCommand("echo written-on-the-node > notes.txt"), GeminiText("noted")])
        assert await _prompt(side, session, "make a note") == "end_turn"
        [command] = side.editor.of(session, "tool_call")
        assert command["kind"] == "execute"
        assert side.editor.texts(session) == ["noted"]
        assert len(gemini.agent_requests) == 2

        reading = GeminiFunctionCall("read_file", {"file_path": "/workspace/notes.txt"})
        gemini.extend([reading, GeminiText("read")])
        assert await _prompt(side, session, "read the note") == "end_turn"
        read = side.editor.of(session, "tool_call")[-1]
        assert read["kind"] == "read"
        response = gemini.agent_requests[-1].function_responses[-1]  # what ACP's fs read on the node
        assert "written-on-the-node" in json.dumps(response)
        done = [update["status"] for update in side.editor.of(session, "tool_call_update")]
        assert done == ["completed", "completed"]
        assert len(gemini.agent_requests) == 4

        gemini.extend([ShellCommand(f"sleep {marker}")])
        async with anyio.create_task_group() as tg:
            stopped: list[str] = []

            async def waiting() -> None:
                stopped.append(await _prompt(side, session, "wait a while"))

            tg.start_soon(waiting)
            await until_tool_runs(marker)
            await side.connection.cancel(session_id=session)
        assert stopped == ["cancelled"]
        assert not host_processes_matching(marker)  # the command stopped with the turn
        assert len(gemini.agent_requests) == 5  # the model was not asked again
        text = gemini.agent_requests[-1].text()  # one conversation, turn after turn
        assert text.index("make a note") < text.index("read the note") < text.index("wait a while")
    assert side.process.returncode == 0

    logs = await anyio.run_process([*NODEPROV, "logs", session, "--store", store, "--json"], check=False)
    assert logs.returncode == 0, logs.stderr.decode()
    events = [json.loads(line) for line in logs.stdout.decode().splitlines()]
    said = [e["message"].get("text") for e in events if e["type"] == "agent.message"]
    assert "noted" in said
    assert "read" in said
    assert [e["prompt"] for e in events if e["type"] == "run.started"] == [
        "make a note",
        "read the note",
        "wait a while",
    ]
    paused = [e["reason"] for e in events if e["type"] == "run.paused"]
    assert paused == [TURN_ENDED, TURN_ENDED, "cancelled in the editor"]
    nodes = {e["node_id"] for e in events if e["type"] == "node.ready"}
    assert len(nodes) == 1  # one node for the session's turns
    assert node_containers(docker_client, *nodes) == []  # gone once the editor left
