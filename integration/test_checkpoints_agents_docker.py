"""The real agents" checkpoints on Docker nodes: a resume on a fresh node restores the workspace
with the conversation; a fork goes on apart (see integration/checkpoints_agents.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeprov.store import Store
from nodeprov.testing.agent_conformance import AgentHarness

from .agent_harnesses import harness
from .checkpoints_agents import fork_goes_on_apart, resume_reads_back

pytestmark = pytest.mark.anyio

__all__ = ["harness"]  # the agent conformance suite's: each agent against its scripted model


@pytest.mark.parametrize(
    ("harness", "kind"), [("claude", "docker"), ("codex", "docker")], indirect=["harness"]
)
async def test_a_resume_on_a_fresh_node_reads_back_the_files_of_the_turn_before(
    harness: AgentHarness, kind: str, store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await resume_reads_back(harness, kind, store, tmp_path, request)


@pytest.mark.parametrize(
    ("harness", "kind"), [("claude", "docker"), ("codex", "docker")], indirect=["harness"]
)
async def test_a_fork_from_the_first_of_three_turns_goes_on_apart(
    harness: AgentHarness, kind: str, store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await fork_goes_on_apart(harness, kind, store, tmp_path, request)
