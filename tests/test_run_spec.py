"""A run is specified once (:class:`~nodeprov.runs.RunSpec`): the same bad run is refused
with the same words through the library, the CLI and the service, before anything is stored
or provisioned; and what a caller leaves out is decided in one place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.errors import ConfigError
from nodeprov.runs import Orchestrator, RunSpec
from nodeprov.scripted import SCRIPTED
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import wait_until

from .serving import serving

pytestmark = pytest.mark.anyio

# Each mistake as the library's keyword arguments, the CLI's arguments and the service's body.
MISTAKES: dict[str, tuple[dict[str, Any], list[str], dict[str, Any]]] = {
    "a provider and a pool": (
        {"provider": "local", "pool": "warm"},
        ["--provider", "local", "--pool", "warm"],
        {"provider": "local", "pool": "warm"},
    ),
    "a real model on this machine without a permission": (
        {"provider": "local", "model": "claude-sonnet-4-5"},
        ["--provider", "local", "--model", "claude-sonnet-4-5"],
        {"provider": "local", "model": "claude-sonnet-4-5"},
    ),
    "a grace no keeper keeps": (
        {"provider": "local", "agent_grace": 1},
        ["--provider", "local", "--agent-grace", "1"],
        {"provider": "local", "agent_grace": 1},
    ),
    "no such pool": ({"pool": "nope"}, ["--pool", "nope"], {"pool": "nope"}),
    "the scripted model where a node cannot reach it": (
        {"provider": "docker", "provider_settings": {"image": "any"}},
        ["--provider", "docker", "-s", "image=any"],
        {"provider": "docker", "settings": {"image": "any"}},
    ),
}
WORDS = {
    "a provider and a pool": "a run names a provider or a pool, not both",
    "a real model on this machine without a permission": "the local provider runs unsandboxed",
    "a grace no keeper keeps": "a keeper's grace must be 2 s or more",
    "no such pool": "no pool 'nope'",
    "the scripted model where a node cannot reach it": "give the setting network_mode=host",
}


async def test_the_same_bad_run_gets_the_same_error_through_every_face(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path}/service.db"
    said: dict[str, dict[str, str]] = {mistake: {} for mistake in MISTAKES}
    async with await Store.open(store_url) as store, Orchestrator(store) as plane:
        for mistake, (fields, _, _) in MISTAKES.items():
            with pytest.raises(ConfigError) as refused:
                await plane.start("task", **{"model": SCRIPTED, **fields})
            said[mistake]["library"] = str(refused.value)
        assert await store.runs() == []
    environ = {**os.environ, "NO_COLOR": "1", "COLUMNS": "500", "NODEPROV_STORE": store_url}
    assert "NODEPROV_DOCKER_NETWORK_MODE" not in environ  # the faces' Docker nodes: the default network
    for mistake, (_, argv, _) in MISTAKES.items():
        done = subprocess.run(  # noqa: ASYNC221 - a test's own sequence: nothing else runs meanwhile
            [sys.executable, "-m", "nodeprov", "run", *argv, "task"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=environ,
        )
        assert done.returncode == 2, done.stderr  # a ConfigError's status
        said[mistake]["CLI"] = done.stderr.strip().removeprefix("error: ")
    async with serving(tmp_path, store=store_url) as served, served.client() as client:
        for mistake, (_, _, body) in MISTAKES.items():
            answer = await client.post("/v1/runs", json={"prompt": "task", **body})
            assert answer.status_code in (404, 422), answer.text
            said[mistake]["service"] = answer.json()["message"]
        assert (await client.get("/v1/runs")).json() == []
    for mistake, faces in said.items():
        assert WORDS[mistake] in faces["library"], faces
        assert faces["CLI"] == faces["library"] == faces["service"], (mistake, faces)


def test_a_spec_names_a_provider_or_a_pool_and_limits_that_hold() -> None:
    RunSpec(prompt="task", provider="local").check()
    RunSpec(prompt="task", pool="warm", agent_grace=0).check()
    for wrong, words in [
        ({}, "not both"),
        ({"provider": "local", "pool": "warm"}, "not both"),
        ({"pool": "warm", "node_config": __import__("nodeprov").NodeConfig()}, "give no node config"),
        ({"provider": "local", "deadline": 0}, "deadline must be a positive number"),
        ({"provider": "local", "idle_timeout": float("inf")}, "idle_timeout must be a positive number"),
        ({"provider": "local", "agent_grace": -1}, "agent_grace must be 0 or more"),
    ]:
        with pytest.raises(ConfigError, match=words):
            RunSpec(prompt="task", **wrong).check()


def test_given_options_lay_the_model_permission_and_shipping_over_the_options() -> None:
    spec = RunSpec(
        prompt="task",
        provider="local",
        model=SCRIPTED,
        options={"model": "other", "permission": "full", "max_turns": 3},
        permission="edit",
        ship_cli=False,
    )
    assert spec.given_options() == {"model": None, "permission": "edit", "max_turns": 3, "ship_cli": False}
    assert RunSpec(prompt="task", provider="local", options=None).given_options() == {}


async def test_a_resume_that_names_no_model_runs_on_the_runs_own_the_scripted_one_too(tmp_path: Path) -> None:
    """A run remembers the model it asked for (the scripted one too), and a resume that
    names none runs on it again, whichever face asks: before, the library took a scripted
    run's stored null for its agent's real default model, the CLI and the service for the
    scripted one. The fake agent writes down the model endpoint it was given."""
    said = tmp_path / "base-url"
    write = f'printf %s "$ANTHROPIC_BASE_URL" > {said}.part && mv {said}.part {said}'
    steps = json.dumps([{"spawn": ["sh", "-c", write]}, {"wait_for": str(said)}, {"stall": True}])
    options = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": steps}}
    where: dict[str, Any] = {"provider": "local", "provider_settings": {"root": str(tmp_path / "nodes")}}

    async def written() -> bool:
        return await anyio.Path(said).exists()

    async def endpoint() -> str:
        assert await wait_until(written, 60), "the agent never started"
        return await anyio.Path(said).read_text()

    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store, Orchestrator(store) as plane:
        run = await plane.start("task", model=SCRIPTED, options=options, **where)
        assert (await endpoint()).startswith("http://127.0.0.1:")
        said.unlink()
        await run.pause("human", "to resume")
        record = await store.run(run.id)
        assert record is not None
        assert (record.model, json.loads(record.agent_options).get("model")) == (SCRIPTED, None)
        resumed = await plane.resume_run(run.id, options=options)
        assert (await endpoint()).startswith("http://127.0.0.1:"), "resumed off the offline model"
        await resumed.pause("human", "done")
        record = await store.run(run.id)
        assert record is not None
        assert record.model == SCRIPTED
