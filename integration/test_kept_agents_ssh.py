"""Kept agents across an SSH connection cut: the sshd processes of the control plane's
connections are killed (the listener stays); the provider connects again and the run
re-attaches, the turn going on. In a file of its own: the SSH tests run in one pytest
process (scripts/test.sh)."""

from __future__ import annotations

import os
import signal

import pytest

from nodeprov import NodeHandle
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import unique_marker

from .agents import on_ssh, require_claude_cli, run_options
from .sshd import Sshd
from .test_kept_agents import _goes_on_across_a_drop, _kinds, _waiting_tool

pytestmark = pytest.mark.anyio


async def test_a_claude_turn_goes_on_when_its_ssh_connection_is_cut(
    store: Store, scripted_model: ScriptedModel, sshd: Sshd
) -> None:
    """The sshd processes of the control plane's connections are killed (the listener stays):
    every channel of the connection drops; the provider connects again and the run
    re-attaches."""
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("all done")])

    async def cut(node: NodeHandle) -> None:
        for pid in sshd.daemons():
            if sshd.process is not None and pid != sshd.process.pid:
                os.kill(pid, signal.SIGKILL)

    start = {"options": run_options(scripted_model)}
    events = await _goes_on_across_a_drop(store, on_ssh(sshd), marker, start, cut)
    assert _kinds(events).count("Result") == 1
    assert len(scripted_model.agent_requests) == 2
