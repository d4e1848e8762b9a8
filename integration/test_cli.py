"""``nodeprov run`` as users run it: the installed script, the real Claude Code CLI, a local
node, the built-in scripted model."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeprov.claude import bundled_cli_path
from nodeprov.testing.conformance import host_processes_matching, unique_marker
from nodeprov.testing.pytest_plugin import require_engine

NODEPROV = [sys.executable, "-m", "nodeprov"]


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    require_engine("the Claude Code CLI", bundled_cli_path() is not None, "install claude-agent-sdk")


def nodeprov(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NODEPROV, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        cwd=tmp_path,
    )


def test_run_json_events(tmp_path: Path) -> None:
    root = tmp_path / "nodes"
    done = nodeprov(tmp_path, "run", "--json", "-s", f"root={root}", "list the files; $(rm -rf ~)")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[0]["type"] == "node"
    assert events[0]["state"] == "provisioned"
    kinds = [e["message"]["kind"] for e in events if e["type"] == "message"]
    assert kinds[0] == "SystemMessage"
    assert "AssistantMessage" in kinds
    assert kinds[-1] == "ResultMessage"
    tool_result = next(
        e["message"] for e in events if e["type"] == "message" and e["message"]["kind"] == "UserMessage"
    )
    assert tool_result["content"][0]["kind"] == "ToolResultBlock"
    assert events[-2] == {"type": "node", "state": "destroyed", "node_id": events[0]["node_id"]}
    assert events[-1]["type"] == "result"
    assert events[-1]["ok"] is True
    assert events[-1]["session_id"]
    assert list(root.iterdir()) == []  # the node is gone


def test_run_human_output(tmp_path: Path) -> None:
    done = nodeprov(tmp_path, "run", "-s", f"root={tmp_path / 'nodes'}", "hello")
    assert done.returncode == 0, done.stderr
    assert "→ Bash" in done.stdout
    assert "result: ok" in done.stdout
    assert "session: " in done.stdout
    assert "destroyed" in done.stdout


def test_agent_failure_is_one_line_and_nonzero(tmp_path: Path) -> None:
    done = nodeprov(tmp_path, "run", "-s", f"root={tmp_path / 'nodes'}", "-s", "claude_cli=/bin/false", "hi")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["error: the agent process exited with status 1"]
    assert list((tmp_path / "nodes").iterdir()) == []


def test_ctrl_c_destroys_the_node(tmp_path: Path) -> None:
    marker = unique_marker()
    hung_agent = tmp_path / "hung-agent"
    hung_agent.write_text(f"#!/bin/sh\nsleep {marker}\n")
    hung_agent.chmod(0o755)
    root = tmp_path / "nodes"
    with subprocess.Popen(
        [*NODEPROV, "run", "-s", f"root={root}", "-s", f"claude_cli={hung_agent}", "hi"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
    ) as cli:
        deadline = time.monotonic() + 60
        while not host_processes_matching(marker):
            assert time.monotonic() < deadline, "the agent never started"
            time.sleep(0.05)
        cli.send_signal(signal.SIGINT)
        _, stderr = cli.communicate(timeout=60)
    assert cli.returncode == 130
    assert stderr.strip().splitlines()[-1] == "error: interrupted; the node was destroyed"
    assert list(root.iterdir()) == []
    assert host_processes_matching(marker) == []
