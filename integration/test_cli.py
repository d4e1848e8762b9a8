"""``nodeprov run``, ``pause``, ``resume``, ``runs``, ``sessions`` and ``status`` as users run them:
the installed script, the real Claude Code CLI, local nodes, the built-in scripted model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeprov.agents.claude import bundled_cli_path
from nodeprov.testing.conformance import host_processes_matching, unique_marker

from .agents import require_claude_cli

NODEPROV = [sys.executable, "-m", "nodeprov"]


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    require_claude_cli()


def environment(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "NO_COLOR": "1",
        "COLUMNS": "200",
        "NODEPROV_STORE": f"sqlite:///{tmp_path}/store.db",
    }


def nodeprov(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NODEPROV, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=environment(tmp_path),
        cwd=tmp_path,
    )


def lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines()]


def test_run_json_events(tmp_path: Path) -> None:
    root = tmp_path / "nodes"
    done = nodeprov(tmp_path, "run", "--json", "-s", f"root={root}", "list the files; $(rm -rf ~)")
    assert done.returncode == 0, done.stderr
    events = lines(done.stdout)
    assert [e["type"] for e in events[:2]] == ["run.started", "node.ready"]
    kinds = [e["message"]["kind"] for e in events if e["type"] == "agent.message"]
    assert kinds[0] == "notice"
    assert {"text", "tool_use", "tool_result"} <= set(kinds)
    assert kinds[-1] == "result"
    tool_result = next(
        e["message"] for e in events if e["type"] == "agent.message" and e["message"]["kind"] == "tool_result"
    )
    raw = tool_result["raw"]  # the agent's own message, as the CLI wrote it
    assert raw["type"] == "user"
    assert raw["message"]["content"][0]["type"] == "tool_result"
    assert raw["message"]["content"][0]["tool_use_id"] == tool_result["tool_use_id"]
    assert events[-2] == {
        **events[-2],
        "type": "node.released",
        "node_id": events[1]["node_id"],
        "kept": False,
    }
    assert events[-1]["type"] == "run.finished"
    assert events[-1]["outcome"] == "ok"
    assert events[-1]["agent_session_id"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert list(root.iterdir()) == []  # the node is gone

    listed = lines(nodeprov(tmp_path, "runs", "--json").stdout)
    assert [(r["id"], r["state"], r["outcome"]) for r in listed] == [(events[0]["run_id"], "finished", "ok")]
    sessions = lines(nodeprov(tmp_path, "sessions", "--json").stdout)
    assert sessions[0]["provider_session_id"] == events[-1]["agent_session_id"]
    again = nodeprov(tmp_path, "resume", events[0]["run_id"])
    assert again.returncode == 1
    assert again.stderr.strip().endswith("is finished: only a paused or failed run can be resumed")


def test_run_human_output(tmp_path: Path) -> None:
    done = nodeprov(tmp_path, "run", "-s", f"root={tmp_path / 'nodes'}", "hello")
    assert done.returncode == 0, done.stderr
    assert "→ Bash" in done.stdout
    assert "result: ok" in done.stdout
    assert "session: " in done.stdout
    assert "destroyed" in done.stdout


def test_agent_failure_is_one_line_and_nonzero(tmp_path: Path) -> None:
    done = nodeprov(tmp_path, "run", "-s", f"root={tmp_path / 'nodes'}", "-o", "cli_path=/bin/false", "hi")
    assert done.returncode == 1
    said = "error: the agent process exited with status 1 before answering initialize"
    assert done.stderr.strip().splitlines() == [said]
    assert list((tmp_path / "nodes").iterdir()) == []


def two_phase_agent(tmp_path: Path, marker: str) -> Path:
    """A "CLI" that hangs the first time it runs and is the real Claude Code CLI after that."""
    agent = tmp_path / "agent"
    agent.write_text(f"""#!/bin/sh
if [ ! -e {tmp_path}/ran-once ]; then touch {tmp_path}/ran-once; exec sleep {marker}; fi
exec {bundled_cli_path()} "$@"
""")
    agent.chmod(0o755)
    return agent


def start_run(tmp_path: Path, marker: str, *extra: str) -> subprocess.Popen[str]:
    agent = two_phase_agent(tmp_path, marker)
    process = subprocess.Popen(
        [
            *NODEPROV,
            "run",
            "--json",
            "-s",
            f"root={tmp_path / 'nodes'}",
            "-o",
            f"cli_path={agent}",
            *extra,
            "task",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=environment(tmp_path),
    )
    deadline = time.monotonic() + 60
    while not host_processes_matching(marker):
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.05)
    return process


def test_ctrl_c_pauses_and_resume_continues(tmp_path: Path) -> None:
    marker = unique_marker()
    process = start_run(tmp_path, marker)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 3, stderr
    events = lines(stdout)
    paused = next(e for e in events if e["type"] == "run.paused")
    assert (paused["pause_kind"], paused["reason"]) == ("human", "interrupted from the terminal")
    assert events[-1]["outcome"] == "paused"
    assert host_processes_matching(marker) == []
    assert list((tmp_path / "nodes").iterdir()) == []  # released: the resume gets a new node
    run_id = events[0]["run_id"]
    status = lines(nodeprov(tmp_path, "status", run_id, "--json").stdout)[0]
    assert status["state"] == "paused"
    assert status["snapshots"][0]["resumable"] is True
    assert "token" not in status["snapshots"][0]

    resumed = nodeprov(tmp_path, "resume", run_id, "--message", "carry on", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert lines(resumed.stdout)[-1]["outcome"] == "ok"
    status = lines(nodeprov(tmp_path, "status", run_id, "--json").stdout)[0]
    assert (status["state"], status["snapshots"][0]["resumable"]) == ("finished", False)


def test_pause_from_another_process_keeping_the_node(tmp_path: Path) -> None:
    marker = unique_marker()
    process = start_run(tmp_path, marker)
    runs = lines(nodeprov(tmp_path, "runs", "--json").stdout)
    run_id = runs[0]["id"]
    bad_kind = nodeprov(tmp_path, "pause", run_id, "--kind", "lunch")
    assert bad_kind.returncode == 2
    assert "pause kind must be one of human, external, system" in bad_kind.stderr
    paused = nodeprov(
        tmp_path, "pause", run_id, "--kind", "external", "--reason", "quota", "--keep-node", "--json"
    )
    assert paused.returncode == 0, paused.stderr
    assert lines(paused.stdout)[0]["node_kept"] is True
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 3
    assert next(e for e in lines(stdout) if e["type"] == "run.paused")["pause_kind"] == "external"
    assert len(list((tmp_path / "nodes").iterdir())) == 1  # kept for the resume
    # Its control plane is gone, but the store holds the node for the paused run.
    collected = nodeprov(tmp_path, "gc", "--provider", "local", "-s", f"root={tmp_path / 'nodes'}")
    assert collected.returncode == 0, collected.stderr
    assert collected.stdout.strip() == "nothing to remove"
    assert len(list((tmp_path / "nodes").iterdir())) == 1
    resumed = nodeprov(tmp_path, "resume", run_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    ready = next(e for e in lines(resumed.stdout) if e["type"] == "node.ready")
    assert ready["reused"] is True
    assert list((tmp_path / "nodes").iterdir()) == []
    assert nodeprov(tmp_path, "pause", run_id).returncode == 1  # finished: nothing to pause


def test_second_ctrl_c_aborts_at_once(tmp_path: Path) -> None:
    marker = unique_marker()
    # Its hanging agent makes the pause take seconds; not kept, it stops with the control plane.
    process = start_run(tmp_path, marker, "--agent-grace", "0")
    assert process.stderr is not None
    process.send_signal(signal.SIGINT)
    while "pausing" not in process.stderr.readline():
        pass
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGINT, stderr  # not 3: the pause was not awaited
    assert "aborted: run " in stderr
    deadline = time.monotonic() + 30  # the agent's supervisor sees its control plane gone
    while host_processes_matching(marker):
        assert time.monotonic() < deadline, "the agent outlived the aborted control plane"
        time.sleep(0.1)
