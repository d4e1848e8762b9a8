"""The run commands' calls and errors, with the fake provider or no run at all (agent runs:
integration/test_cli.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from nodeprov.cli import app
from nodeprov.errors import RunStateError
from nodeprov.runs import TURN_ENDED, Orchestrator, Run, RunState
from nodeprov.store import RunRecord, Store

runner = CliRunner()


def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/store.db"


# The CLI as a process, with the fake provider registered (it is no installed provider).
NODEPROV = [sys.executable, str(Path(__file__).with_name("cli_with_fakes.py"))]


def nodeprov(tmp_path: Path, *args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NODEPROV, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": str(columns), "NODEPROV_STORE": store_url(tmp_path)},
    )


def paused_run(tmp_path: Path, agent_options: dict[str, Any]) -> str:
    """A paused run in the store at ``tmp_path``, as `nodeprov run` would leave it."""

    async def make() -> str:
        async with await Store.open(store_url(tmp_path)) as store:
            session = await store.active_session("default", "claude")
            await store.create_run(
                RunRecord(
                    agent="claude",
                    id="run-0123456789abcdef",
                    session_id=session.id,
                    workspace_id="default",
                    prompt="task",
                    node_provider="fake",
                    node_settings=json.dumps({"root": str(tmp_path / "nodes")}),
                    agent_options=json.dumps(agent_options),
                    state=RunState.PAUSED,
                    outcome="paused",
                    error=None,
                    node_id="np-0123456789ab",
                    agent_session_id=None,
                    project_key=None,
                    owner="lease:gone",
                    pause_request=None,
                    created_at="2026-01-01T00:00:00",
                    updated_at="2026-01-01T00:00:00",
                )
            )
        return "run-0123456789abcdef"

    return anyio.run(make)


def test_resume_defaults_to_the_runs_model_and_takes_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = paused_run(tmp_path, {"model": "claude-x", "permission": "read-only", "max_turns": 7})
    calls: list[dict[str, Any]] = []

    async def resume_run(self: Orchestrator, run_id: str, **kwargs: Any) -> Run:
        calls.append({"run_id": run_id, **kwargs})
        raise RunStateError("stopped here")

    monkeypatch.setattr(Orchestrator, "resume_run", resume_run)
    store = ["--store", store_url(tmp_path)]
    result = runner.invoke(app, ["resume", run_id, "-s", 'env={"TOKEN": "t"}', *store])
    assert (result.exit_code, result.stderr) == (1, "error: stopped here\n")
    assert calls[0]["options"] == {"env": {}}  # laid over the run's own by the orchestrator
    assert calls[0]["model"] is None  # the run's own, as the orchestrator has it
    assert calls[0]["provider_settings"] == {"env": {"TOKEN": "t"}}

    runner.invoke(app, ["resume", run_id, "--model", "scripted", "--permission", "edit", *store])
    assert (calls[1]["model"], calls[1]["options"]["permission"]) == ("scripted", "edit")


def test_resume_without_the_secret_settings_is_refused_then_takes_them(tmp_path: Path) -> None:
    started = subprocess.Popen(
        [
            *(*NODEPROV, "run", "--json", "--provider", "fake"),
            *("-s", f"root={tmp_path / 'nodes'}", "-s", "provision_delay=60", "-s", 'env={"TOKEN": "t"}'),
            "task",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NODEPROV_STORE": store_url(tmp_path)},
    )
    assert started.stdout is not None
    run_id = json.loads(started.stdout.readline())["run_id"]
    started.send_signal(signal.SIGINT)
    _, stderr = started.communicate(timeout=60)
    assert started.returncode == 3, stderr

    refused = nodeprov(tmp_path, "resume", run_id)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"error: run {run_id} was started with secret provider settings that are never stored; "
        "give them again: env"
    ]
    # Given again, with a setting that makes the new node fail: the settings reach the provider.
    given = nodeprov(
        tmp_path,
        *("resume", run_id, "-s", 'env={"TOKEN": "t"}'),
        *("-s", "provision_delay=0", "-s", "provision_error=no room"),
    )
    assert given.returncode == 1
    assert "no room" in given.stderr
    assert len(given.stderr.splitlines()) == 1


def test_docker_without_image_records_no_run(tmp_path: Path) -> None:
    store = ["--store", store_url(tmp_path)]
    result = runner.invoke(app, ["run", "--provider", "docker", "hi", *store])
    assert result.exit_code == 2
    assert result.stderr == "error: the docker provider needs an image (setting 'image')\n"
    listed = runner.invoke(app, ["runs", "--json", *store])
    assert (listed.exit_code, listed.stdout) == (0, "")


def test_pause_of_an_unknown_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["pause", "run-nope", "--store", store_url(tmp_path)])
    assert (result.exit_code, result.stderr) == (1, "error: no such run run-nope\n")
    status = runner.invoke(app, ["status", "run-nope", "--store", store_url(tmp_path)])
    assert (status.exit_code, status.stderr) == (1, "error: no such run run-nope\n")


def test_a_real_model_on_the_local_provider_needs_a_permission_mode(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--model", "claude-x", "hi", "--store", store_url(tmp_path)])
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error: a real model on the local provider runs unsandboxed")
    assert "choose a permission" in result.stderr


def test_ids_are_whole_in_a_narrow_terminal(tmp_path: Path) -> None:
    run_id = paused_run(tmp_path, {})
    listed = nodeprov(tmp_path, "runs", columns=80)
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    assert "np-0123456789ab" in listed.stdout
    assert max(map(len, listed.stdout.splitlines())) <= 80


def test_pause_after_turn_holds_a_conversation_through_run_and_resume(tmp_path: Path) -> None:
    from nodeprov.testing import fake_agent_command

    def turn(*args: str, says: str) -> list[dict[str, Any]]:
        steps = json.dumps([{"text": says}])
        done = nodeprov(
            tmp_path, *args, "--option", f"cli_path={fake_agent_command(tmp_path)}", "--env",
            f"NODEPROV_FAKE_AGENT={steps}", "--json",
        )  # fmt: skip
        events = [json.loads(line) for line in done.stdout.splitlines()]
        assert done.returncode == (3 if "--pause-after-turn" in args else 0), done.stderr
        return events

    where = ["--provider", "fake", "--setting", f"root={tmp_path / 'nodes'}", "--agent", "claude"]
    first = turn("run", "first", *where, "--keep-node", "--pause-after-turn", says="one")
    run_id = first[0]["run_id"]
    assert [e["reason"] for e in first if e["type"] == "run.paused"] == [TURN_ENDED]
    second = turn("resume", run_id, "--message", "second", "--keep-node", "--pause-after-turn", says="two")
    assert [e["reused"] for e in second if e["type"] == "node.ready"] == [True]
    last = turn("resume", run_id, "--message", "done", says="three")
    assert [e["outcome"] for e in last if e["type"] == "run.finished"] == ["ok"]
