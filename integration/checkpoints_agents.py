"""What the checkpoint tests of the real agents do (issue 48), on a node of any kind: a resume
on a fresh node restores the workspace with the conversation (the agent's tool writes a file
in the first turn, the run is paused without keeping its node, and after the resume on a
fresh node the agent's next tool call reads the file back, which the model sees in the tool's
result); a fork from the first of three turns goes on apart. The tests are per process
(scripts/test.sh): test_checkpoints_agents_local.py, _docker.py, and test_checkpoints_agents.py
for SSH and Kubernetes nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.runs import CheckpointSaved, NodeReady, NodeReleased, Orchestrator
from nodeprov.store import Store
from nodeprov.testing.agent_conformance import AgentHarness
from nodeprov.testing.conformance import unique_marker

from .agents import until_tool_runs
from .pods import pod_settings
from .sshd import UNPRIVILEGED

__all__ = ["fork_goes_on_apart", "resume_reads_back"]

_WRITTEN = "alpha-omega"  # what the file holds; its command does not say it whole (printf joins it)


def _where(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """``Orchestrator.start`` arguments for a node of ``kind``."""
    graces = {"eof_grace": 1.0, "term_grace": 2.0}
    if kind == "local":
        settings: dict[str, Any] = {"root": str(tmp_path / "nodes"), **graces}
    elif kind == "ssh":
        settings = request.getfixturevalue("sshd").settings(
            UNPRIVILEGED, root=".nodeprov/checkpoints", **graces
        )
    elif kind == "kubernetes":
        cluster, image = request.getfixturevalue("kubernetes_cluster"), request.getfixturevalue("base_image")
        settings = pod_settings(cluster, image, tools_host_path=True, **graces)
    else:
        image = request.getfixturevalue("base_image")
        settings = {"image": image, "network_mode": "host", "pull": "never", **graces}
    return {"provider": kind, "provider_settings": settings}


async def resume_reads_back(
    harness: AgentHarness, kind: str, store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    marker = unique_marker()
    harness.script(
        [
            harness.shell("mkdir -p notes && printf '%s-%s' alpha omega > notes/first.txt"),
            harness.shell(f"sh -c 'sleep {marker}'"),  # Claude Code refuses a bare long sleep
        ]  # the pause cuts this turn short: nothing more of it is scripted
    )
    where = _where(kind, request, tmp_path)
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:
        run = await plane.start("write your notes", agent=harness.agent, options=harness.options, **where)
        with anyio.fail_after(180):
            await until_tool_runs(marker)  # the file is written: its tool call came first
            snapshot = await run.pause("human", "lunch", keep_node=False)
        first = [event async for event in run.events()]
        saved = [event for event in first if isinstance(event, CheckpointSaved)]
        assert [event.reason for event in saved] == ["pause"]
        assert [event.kept for event in first if isinstance(event, NodeReleased)] == [False]

        harness.script([harness.shell("cat notes/first.txt"), harness.text("read them")])
        asked = len(harness.requests())
        resumed = await plane.resume(snapshot.token, message="read your notes", options=harness.options)
        with anyio.fail_after(180):
            assert await resumed.wait() == "ok", resumed.error
        ready = [event async for event in resumed.events() if isinstance(event, NodeReady)][-1]
    assert ready.node_id != snapshot.node_id
    assert ready.workspace_restored == saved[0].checkpoint_id
    after = harness.requests()[asked:]
    assert not any(_WRITTEN in text for text in harness.requests()[:asked])
    assert any(_WRITTEN in text for text in after), after  # the cat's result, sent to the model
    assert "write your notes" in after[-1]  # with the conversation before


async def fork_goes_on_apart(
    harness: AgentHarness, kind: str, store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = _where(kind, request, tmp_path)
    async with Orchestrator(store, checkpoints=(tmp_path / "checkpoints").as_uri()) as plane:

        async def paused(message: str, file: str, token: str | None) -> tuple[str, str]:
            """A turn that writes ``file`` and is paused in its next tool call: its run's id
            and its snapshot's token."""
            marker = unique_marker()
            harness.script(
                [harness.shell(f"printf {file} > {file}.txt"), harness.shell(f"sh -c 'sleep {marker}'")]
            )
            if token is None:
                run = await plane.start(message, agent=harness.agent, options=harness.options, **where)
            else:
                run = await plane.resume(token, message=message, options=harness.options)
            with anyio.fail_after(180):
                await until_tool_runs(marker)
                return run.id, (await run.pause("human", "next turn", keep_node=False)).token

        async def finished(start: Any, said: str) -> tuple[str, list[str]]:
            """A last turn that lists the workspace, then says ``said``: its run's id, and
            its requests to the model."""
            harness.script([harness.shell("ls"), harness.text(said)])
            asked = len(harness.requests())
            run = await start()
            with anyio.fail_after(180):
                assert await run.wait() == "ok", run.error
            return run.id, harness.requests()[asked:]

        run_id, token = await paused("turn one", "one", None)
        _, token = await paused("turn two", "two", token)
        first = (await plane.checkpoints.of_run(run_id))[0]
        _, third = await finished(
            lambda: plane.resume(token, message="turn three", options=harness.options), "three done"
        )
        fork_id, fork = await finished(
            lambda: plane.fork(run_id, first.id, message="fork turn", options=harness.options), "fork done"
        )
        original, forked = await store.run(run_id), await store.run(fork_id)
    assert original is not None
    assert forked is not None
    assert (forked.forked_from, forked.forked_at) == (run_id, first.id)
    assert forked.agent_session_id not in (None, original.agent_session_id)
    # The original's last turn sees both files and its whole conversation; the fork, the
    # first turn's file and conversation alone, with its own turn.
    assert "two.txt" in third[-1]
    assert "turn one" in third[-1]
    assert "turn two" in third[-1]
    assert "one.txt" in fork[-1]
    assert "turn one" in fork[-1]
    assert "fork turn" in fork[-1]
    assert not any("two.txt" in text or "turn two" in text for text in fork)
