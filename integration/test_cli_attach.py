"""``nodeprov attach``: a ``nodeprov run`` (its agent kept, the default) SIGKILLed mid-turn is taken over from
another shell; Ctrl-C detaches it and leaves it going; another ``nodeprov attach`` sees it
to its end. The real Claude Code CLI, a scripted model, a local node."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from nodeprov.runs import event_from_json
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, unique_marker

from .agents import TURN_TIMEOUT, require_claude_cli, until_tool_runs
from .test_cli_signals import environment, real_model
from .test_kept_agents import _waiting_tool, until_kept

pytestmark = pytest.mark.anyio


def _nodeprov(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "nodeprov", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=environment(tmp_path),
    )


async def _until_said(process: subprocess.Popen[str], kind: str) -> list[dict[str, object]]:
    """The ``--json`` events ``process`` prints, up to the first of ``kind``."""
    assert process.stdout is not None
    seen: list[dict[str, object]] = []
    with anyio.fail_after(TURN_TIMEOUT):
        while not seen or seen[-1]["type"] != kind:
            line = await anyio.to_thread.run_sync(process.stdout.readline)
            assert line, f"it ended before {kind}: {process.communicate()}"
            seen.append(json.loads(line))
    return seen


async def _killed_mid_tool(scripted_model: ScriptedModel, tmp_path: Path, store: Store, marker: str) -> str:
    """A ``nodeprov run`` (its agent kept for the CLI's default grace) SIGKILLed while its
    agent's tool (named by ``marker``) waits for its flag; the run's id."""
    require_claude_cli()
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("all done")])
    where = ["-s", f"root={tmp_path / 'nodes'}"]
    first = _nodeprov(tmp_path, "run", "--json", *real_model(scripted_model), *where, "task")
    started = await _until_said(first, "run.started")
    run_id = str(started[0]["run_id"])
    await until_tool_runs(marker)
    await until_kept(store, run_id)
    first.kill()  # SIGKILL: nothing of `nodeprov run` cleans up
    first.communicate(timeout=30)
    return run_id


async def test_a_sigkilled_run_is_attached_detached_and_attached_again(
    scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    marker = unique_marker()
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        run_id = await _killed_mid_tool(scripted_model, tmp_path, store, marker)
        # Following its events, the next step said is the take-over, not gc (which ends it).
        followed = _nodeprov(tmp_path, "logs", "--follow", run_id)
        _, said = followed.communicate(timeout=60)
        assert followed.returncode == 1, said
        assert f"`nodeprov attach {run_id}` takes it over" in said

        attached = _nodeprov(tmp_path, "attach", "--json", run_id)
        await _until_said(attached, "agent.reattached")
        attached.send_signal(signal.SIGINT)  # Ctrl-C: detach, leave the run going
        _, said = attached.communicate(timeout=60)
        assert attached.returncode == 0, said
        assert "detached" in said
        assert host_processes_matching(marker), "the detached agent was stopped"

        again = _nodeprov(tmp_path, "attach", "--json", run_id)
        await _until_said(again, "agent.reattached")
        (Path("/tmp") / f"nodeprov-flag-{marker}").touch()
        out, said = again.communicate(timeout=TURN_TIMEOUT)
        assert again.returncode == 0, said
        assert json.loads(out.splitlines()[-1])["type"] == "run.finished"
        events = [event_from_json(json.loads(e.body)) for e in await store.events(run_id)]
    kinds = [event.kind for event in events]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert kinds.count("agent.reattached") == 2
    assert kinds.count("run.finished") == 1
    messages = [type(e.message).__name__ for e in events if e.kind == "agent.message"]  # type: ignore[attr-defined]
    assert messages.count("ToolUse") == messages.count("ToolResult") == messages.count("Result") == 1, (
        messages
    )
    assert len(scripted_model.agent_requests) == 2
    assert host_processes_matching(marker) == []


async def test_attach_pause_of_a_sigkilled_run_stops_its_agent_before_it_says_paused(
    scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """Issue 45: ``attach --pause`` said "paused" while the agent and its tool ran on, and
    the agent sent its next model request with the tool's result, one the resume would
    never see."""
    marker = unique_marker()
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        run_id = await _killed_mid_tool(scripted_model, tmp_path, store, marker)
        requests = len(scripted_model.agent_requests)

        paused = _nodeprov(tmp_path, "attach", "--pause", "--json", run_id)
        out, said = paused.communicate(timeout=TURN_TIMEOUT)
        assert paused.returncode == 3, said
        # Said paused: the agent and its tool are gone, now, and the tool's end would tell no one.
        assert host_processes_matching(marker) == [], "paused, and the agent's tool runs on"
        (Path("/tmp") / f"nodeprov-flag-{marker}").touch()
        record = await store.run(run_id)
        assert record is not None
        assert record.state == "paused"
        kinds = [json.loads(body.body)["type"] for body in await store.events(run_id)]
        assert kinds[-3:] == ["node.released", "run.paused", "run.finished"], kinds
    assert len(scripted_model.agent_requests) == requests, "the paused agent asked its model again"
    assert "run.finished" in out
