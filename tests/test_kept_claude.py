"""A kept Claude session with the fake CLI on a local node: a control request the CLI sends
while no control plane is attached is answered once one re-attaches, and the re-attached
session relays only what the first did not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from nodeprov import NodeHandle, get_agent
from nodeprov.agents import AgentSession, Message
from nodeprov.node.keeper import KeepOptions
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import wait_until

pytestmark = pytest.mark.anyio


def _texts(messages: list[Message]) -> list[str]:
    return [str(getattr(m, "text", "")) for m in messages if type(m).__name__ == "AgentText"]


async def test_a_control_request_sent_while_detached_is_answered_after_the_re_attach(
    tmp_path: Path, local_node: NodeHandle
) -> None:
    flag = tmp_path / "flag"
    steps = [{"text": "before"}, {"wait_for": str(flag)}, {"ask": "can_use_tool"}, {"text": "after"}]
    options: dict[str, Any] = {
        "cli_path": fake_agent_command(tmp_path),
        "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)},
    }
    agent = get_agent("claude", options)
    keep = KeepOptions(grace=30)
    first: AgentSession = agent.session(local_node, keep=keep)
    seen: list[Message] = []

    async def relay() -> None:
        async for message in first.turn("go"):
            seen.append(message)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay)

            async def said_before() -> bool:
                return "before" in _texts(seen)

            assert await wait_until(said_before, 30)
            tg.cancel_scope.cancel()  # the control plane goes: the turn is not over
        await first.detach()
        assert first.keeper is not None
        flag.touch()  # the CLI asks now, with nobody attached
        second = agent.session(local_node, keep=keep)
        async with second:
            rest = [message async for message in second.follow(first.keeper, len(seen))]
    assert _texts(seen) == ["before"]
    assert _texts(rest) == ["answered: error", "after"]  # the SDK has no can_use_tool: an error answer
    assert [type(m).__name__ for m in rest][-1] == "Result"
    assert not any(type(m).__name__ == "AgentText" and m in seen for m in rest)


def test_a_grace_a_keeper_cannot_keep_is_refused_where_it_is_given() -> None:
    from nodeprov.errors import ConfigError
    from nodeprov.runs import Orchestrator
    from nodeprov.store import Store

    for grace in (1.9, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="grace"):
            KeepOptions(grace=grace)
        with pytest.raises(ConfigError, match="grace"):
            Orchestrator(cast(Store, None), agent_grace=grace)


def test_the_service_keeps_agents_by_default_and_zero_keeps_none() -> None:
    from pydantic import ValidationError

    from nodeprov.service import ServiceConfig

    assert ServiceConfig().agent_grace == 180
    assert ServiceConfig(agent_grace=0).agent_grace is None
    assert ServiceConfig.model_validate({"agent_grace": None}).agent_grace is None
    with pytest.raises(ValidationError):
        ServiceConfig(agent_grace=1)
