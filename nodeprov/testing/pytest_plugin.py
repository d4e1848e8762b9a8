"""pytest plugin of nodeprov (registered under ``pytest11``, so it loads by itself).

Fixtures:

- ``scripted_model``: a running :class:`~nodeprov.testing.ScriptedModel` with an empty
  script; call ``scripted_model.extend([...])`` and pass ``scripted_model.agent_env()`` as
  the agent's environment.
- ``scripted_responses``: a running :class:`~nodeprov.testing.ScriptedResponses` (the
  Responses API the Codex CLI talks to) with an empty script; ``extend`` it likewise.
- ``local_node``: a node of the local provider under the test's ``tmp_path``, destroyed
  after the test (async: mark the test ``@pytest.mark.anyio``).

:func:`require_engine` skips a test whose engine (Docker, sshd, the Claude CLI...) is
missing, except in CI (``CI`` set to 1, yes, on or true, in any case), where a missing engine
is a failure: CI installs them all, so a skip there would hide a broken set-up.

It registers the fake provider (:mod:`nodeprov.testing.fake_provider`) as ``fake`` for the
test process: a test double is never an installed provider that users see.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nodeprov.node import NodeHandle
from nodeprov.offline import ScriptedModel, ScriptedResponses
from nodeprov.registry import get_provider

__all__ = ["local_node", "require_engine", "scripted_model", "scripted_responses"]


def pytest_configure(config: pytest.Config) -> None:
    from nodeprov.registry import register_provider
    from nodeprov.testing.fake_provider import FakeProvider

    register_provider("fake", FakeProvider)


def require_engine(what: str, available: bool, how: str = "") -> None:
    """Skip the calling test when ``what`` is not ``available``; fail instead in CI."""
    if available:
        return
    message = f"{what} is not available" + (f": {how}" if how else "")
    if os.environ.get("CI", "").strip().lower() in {"1", "yes", "on", "true"}:
        pytest.fail(f"{message} (CI: every engine must be set up)")
    pytest.skip(message)


@pytest.fixture
def scripted_model() -> Iterator[ScriptedModel]:
    """A scripted Messages API on 127.0.0.1, stopped after the test."""
    with ScriptedModel() as model:
        yield model


@pytest.fixture
def scripted_responses() -> Iterator[ScriptedResponses]:
    """A scripted Responses API on 127.0.0.1, stopped after the test."""
    with ScriptedResponses() as model:
        yield model


@pytest.fixture
async def local_node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    """A local-provider node under ``tmp_path``, destroyed after the test."""
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision() as node:
        yield node
