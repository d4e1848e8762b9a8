"""What the CLI prints of things from outside (an agent's words, a stored error) is never read
as markup, and its tables stay readable in 80 columns and through a pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from nodeprov.agents import AgentText, Result, ToolResult, ToolUse
from nodeprov.runs import AgentMessage, RunFinished, RunPaused, RunStarted, RunState
from nodeprov.store import EventRecord, RunRecord, Store, now

MARKUP = "[/] [bold]not bold[/bold] [red] \\[x] ends with a backslash \\"


def nodeprov(tmp_path: Path, *args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "NODEPROV_STORE": f"sqlite:///{tmp_path}/store.db"}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


async def _stored_runs(tmp_path: Path, count: int, *, events: bool = False) -> list[str]:
    ids = [f"run-{n:016x}" for n in range(count)]
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        session = await store.active_session("a-workspace-with-a-long-name", "claude")
        await store.set_provider_session_id(session.id, "33d3623e-648b-4e64-a11f-92fbe5d4f237")
        for run_id in ids:
            await store.create_run(
                RunRecord(
                    agent="claude",
                    id=run_id,
                    session_id=session.id,
                    workspace_id="a-workspace-with-a-long-name",
                    prompt=f"fix the flaky tests in the payments service {MARKUP}",
                    node_provider="kubernetes",
                    node_settings="{}",
                    agent_options="{}",
                    state=RunState.FAILED,
                    outcome="error",
                    error=MARKUP,
                    node_id="np-0123456789ab",
                    agent_session_id="33d3623e-648b-4e64-a11f-92fbe5d4f237",
                    project_key=None,
                    owner="lease:gone",
                    pause_request=None,
                    created_at=now(),
                    updated_at=now(),
                )
            )
            if events:
                stamp = now()
                happened = [
                    RunStarted(run_id=run_id, seq=1, at=stamp, prompt=MARKUP, provider="local"),
                    AgentMessage(run_id=run_id, seq=2, at=stamp, message=AgentText(text=MARKUP)),
                    AgentMessage(run_id=run_id, seq=3, at=stamp, message=ToolUse("t", MARKUP, {"m": MARKUP})),
                    AgentMessage(
                        run_id=run_id,
                        seq=4,
                        at=stamp,
                        message=ToolResult(tool_use_id="t", output=MARKUP, is_error=True),
                    ),
                    RunPaused(
                        run_id=run_id,
                        seq=5,
                        at=stamp,
                        pause_kind="human",
                        reason=MARKUP,
                        token="tok",
                        node_kept=False,
                    ),
                    AgentMessage(run_id=run_id, seq=6, at=stamp, message=Result(is_error=True, text=MARKUP)),
                    RunFinished(
                        run_id=run_id, seq=7, at=stamp, outcome="error", error=MARKUP, agent_session_id=None
                    ),
                ]
                await store.append_events(
                    [EventRecord(e.run_id, e.seq, e.kind, e.at, json.dumps(e.to_json())) for e in happened]
                )
    return ids


@pytest.mark.anyio
async def test_markup_in_an_agents_words_or_a_stored_error_is_printed_as_it_is(tmp_path: Path) -> None:
    (run_id,) = await _stored_runs(tmp_path, 1, events=True)
    shown = await anyio.to_thread.run_sync(lambda: nodeprov(tmp_path, "logs", run_id))
    assert shown.returncode == 0, shown.stderr
    assert MARKUP in shown.stdout  # the agent's text, verbatim
    assert f"paused (human): {MARKUP}" in shown.stdout
    assert f"result: error: {MARKUP}" in shown.stdout
    status = await anyio.to_thread.run_sync(lambda: nodeprov(tmp_path, "status", run_id))
    assert status.returncode == 0, status.stderr
    assert MARKUP in status.stdout


@pytest.mark.anyio
@pytest.mark.parametrize("columns", [80, None], ids=["80 columns", "piped"])
@pytest.mark.parametrize("command", ["runs", "sessions"])
async def test_runs_and_sessions_stay_readable_when_narrow(
    tmp_path: Path, command: str, columns: int | None
) -> None:
    ids = await _stored_runs(tmp_path, 2)
    listed = await anyio.to_thread.run_sync(lambda: nodeprov(tmp_path, command, columns=columns))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert all(len(line) <= 80 or " " not in line.strip() for line in lines)  # only an id may overflow
    if command == "runs":
        assert all(any(run_id in line for line in lines) for run_id in ids)  # every id whole
        assert "fix the flaky tests" in listed.stdout  # the task, words unbroken
        assert "a-workspace-with-a-long-name" in listed.stdout
    else:
        assert "33d3623e-648b-4e64-a11f-92fbe5d4f237" in listed.stdout
        assert "a-workspace-with-a-long-name" in listed.stdout
