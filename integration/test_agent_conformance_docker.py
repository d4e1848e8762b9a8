"""The agent conformance suite (nodeprov.testing.agent_conformance) on Docker nodes, for every
agent's real CLI against its scripted model: beside the other Docker tests (every Docker test
is in one process of ``scripts/test.sh``). On local nodes: ``test_agent_conformance_local.py``;
on SSH, Kubernetes and a codespace: ``test_agent_conformance.py``."""

from __future__ import annotations

import pytest

from .agent_harnesses import (  # the suite's tests, collected here too
    fresh_node,
    harness,
    node,
    provider_fixture,
    test_agent_conformance,
    test_agent_resumes_on_a_fresh_node,
)

__all__ = ["fresh_node", "harness", "node", "test_agent_conformance", "test_agent_resumes_on_a_fresh_node"]

pytestmark = pytest.mark.anyio


provider = provider_fixture(["docker"])
