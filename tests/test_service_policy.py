"""Settings a caller may not bend (``nodeprov serve``, a real process): a request's provider
settings, agent options and agent environment are the caller's only where they shape its
node and its agent's work; where the service connects, as whom, and what of its host a node
reaches stay the operator's unless it allows them. The reproductions of issue 44: before,
a ``runs`` token's settings sent the operator's GitHub token to its own listener
(codespaces ``api_url``), logged in to its own sshd with the operator's key (``host``,
``port``, ``insecure_skip_host_key_check``), read a line of ``/etc/passwd`` into the log
(``known_hosts``), and made a node under ``/etc`` with the operator's environment (local
``root``, ``inherit_env``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeprov.agents.registry import agent_class, agent_names
from nodeprov.registry import provider_class, provider_names
from nodeprov.store import DEFAULT_TENANT, Store
from tests.serving import fake_run, serving

pytestmark = pytest.mark.anyio

REFUSED_SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("codespaces", {"api_url": "http://127.0.0.1:9/api/v3", "gh": "/bin/sh"}),
    ("ssh", {"host": "127.0.0.1", "port": 2222, "insecure_skip_host_key_check": True}),
    ("ssh", {"known_hosts": "/etc/passwd"}),
    ("local", {"root": "/etc"}),
    ("local", {"inherit_env": ["AWS_SECRET_ACCESS_KEY"]}),
    ("docker", {"network_mode": "host"}),
    ("docker", {"mounts": [{"source": "/", "target": "/host"}]}),
    ("kubernetes", {"host_network": True}),
    ("ec2", {"instance_type": "p4d.24xlarge"}),
]


def test_every_provider_and_agent_declares_what_a_caller_may_give() -> None:
    for name in provider_names():
        model = provider_class(name).settings_model
        assert model.caller_settings <= set(model.model_fields), name
        assert not model.caller_settings & model.secret_fields(), name  # a secret is never a caller's
    for name in agent_names():
        options = agent_class(name).options_model
        assert options.caller_options <= set(options.model_fields), name
        assert "cli_path" not in options.caller_options, name


async def test_a_callers_settings_never_point_the_operators_secrets_elsewhere(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        for provider, settings in REFUSED_SETTINGS:
            for path, body in (
                ("/v1/runs", fake_run(tmp_path, [{"text": "x"}], provider=provider, settings=settings)),
                ("/v1/nodes", {"provider": provider, "settings": settings}),
                ("/v1/pools", {"name": "p", "provider": provider, "settings": settings, "size": 0}),
            ):
                refused = await client.post(path, json=body)
                assert refused.status_code == 422, (path, provider, refused.text)
                message = refused.json()["message"]
                assert "is the operator's" in message, message
                assert f"--allow-setting {provider}." in message
                assert not any(str(value) in message for value in settings.values())  # names, not values
        async with await Store.open(served.store) as store:  # nothing was made (other tests' may exist)
            assert await store.owners.of("node", DEFAULT_TENANT) == {}
            assert await store.runs() == []
            assert await store.pools.all() == []
        allowed = await client.post("/v1/nodes", json={"provider": "local", "settings": {"eof_grace": 1}})
        assert allowed.status_code == 201, allowed.text


async def test_what_runs_as_the_agent_and_where_it_talks_are_the_operators(tmp_path: Path) -> None:
    async with serving(tmp_path, config={"allow_options": []}) as served, served.client() as client:
        for body in (
            fake_run(tmp_path, [{"text": "x"}]),  # cli_path
            fake_run(tmp_path, [{"text": "x"}], options={"mcp_servers": {"x": {"command": "id"}}}),
            fake_run(tmp_path, [{"text": "x"}], options={}, env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}),
            fake_run(tmp_path, [{"text": "x"}], options={}, env={"HTTPS_PROXY": "http://127.0.0.1:9"}),
            fake_run(tmp_path, [{"text": "x"}], options={}, env={"LD_PRELOAD": "/tmp/x.so"}),
        ):
            refused = await client.post("/v1/runs", json=body)
            assert refused.status_code == 422, refused.text
            assert "the operator's" in refused.json()["message"]


async def test_an_operator_may_allow_more(tmp_path: Path) -> None:
    config = {"allow_settings": ["local.root"], "allow_env": ["ANTHROPIC_BASE_URL"]}
    async with serving(tmp_path, config=config) as served, served.client() as client:
        root = tmp_path / "elsewhere"
        made = await client.post("/v1/nodes", json={"provider": "local", "settings": {"root": str(root)}})
        assert made.status_code == 201, made.text
        assert made.json()["workdir"].startswith(str(root))
        run = fake_run(tmp_path, [{"text": "x"}], env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
        assert (await client.post("/v1/runs", json=run)).status_code == 201
