"""Codex gets its prompt on stdin, never in an argument vector: a canary in the prompt shows
in no process's arguments while the turn runs (``ps``, a cluster's audit log), and a prompt
far past the kernel's 128 KiB argument limit reaches the model whole (the real Codex CLI,
the scripted Responses API, a local node)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from nodeprov import NodeConfig, agent_class, get_agent, get_provider
from nodeprov.agents import Result
from nodeprov.testing import ExecCommand, ResponsesText, ScriptedResponses
from nodeprov.testing.agent_conformance import run_turn
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until

from .agents import TURN_TIMEOUT, codex_run_options, require_codex_cli

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _codex_cli() -> None:
    require_codex_cli()


def _arguments() -> list[bytes]:
    """Every process's argument vector on this machine (what ``ps`` shows)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.append(Path(f"/proc/{entry}/cmdline").read_bytes())
            except OSError:
                continue
    return found


async def test_a_prompt_is_in_no_process_arguments(
    scripted_responses: ScriptedResponses, tmp_path: Path
) -> None:
    canary = "prompt-canary-" + unique_marker().replace(".", "")
    marker = unique_marker()
    scripted_responses.extend([ExecCommand(["sleep", marker]), ResponsesText("done")])
    cli = agent_class("codex").local_cli()
    assert cli is not None
    agent = get_agent("codex", codex_run_options(scripted_responses))
    async with (
        await get_provider("local", root=tmp_path / "nodes").provision(
            NodeConfig(tools={"codex": cli})
        ) as node,
        agent.session(node) as session,
        anyio.create_task_group() as tg,
    ):
        seen: list[list[bytes]] = []

        async def turn() -> None:
            messages = await run_turn(session, f"the word is {canary}; now wait")
            assert isinstance(messages[-1], Result)

        async def running() -> bool:
            return bool(host_processes_matching(marker))

        tg.start_soon(turn)
        assert await wait_until(running, TURN_TIMEOUT)  # the turn's command runs: Codex is up
        seen.append(await anyio.to_thread.run_sync(_arguments))
        tg.cancel_scope.cancel()
    assert any(b"codex" in argv and b"exec" in argv for argv in seen[0])
    assert not [argv for argv in seen[0] if canary.encode() in argv]
    assert canary in scripted_responses.agent_requests[0].text()  # it reached the model


async def test_a_prompt_past_the_kernels_argument_limit_reaches_the_model(
    scripted_responses: ScriptedResponses, tmp_path: Path
) -> None:
    prompt = "review this:\n" + "\n".join(f"line {n:06d} " + "x" * 40 for n in range(6000))  # ~300 KiB
    assert len(prompt.encode()) > 256 * 1024
    scripted_responses.extend([ResponsesText("reviewed")])
    cli = agent_class("codex").local_cli()
    assert cli is not None
    agent = get_agent("codex", codex_run_options(scripted_responses))
    async with (
        await get_provider("local", root=tmp_path / "nodes").provision(
            NodeConfig(tools={"codex": cli})
        ) as node,
        agent.session(node) as session,
    ):
        messages = await run_turn(session, prompt)
    assert isinstance(messages[-1], Result)
    assert not messages[-1].is_error, messages[-1].text
    assert prompt.strip() in scripted_responses.agent_requests[0].text()
