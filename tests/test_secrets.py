"""Secret provider settings never reach the store; a resume asks for them again."""

from __future__ import annotations

import json
import logging
import secrets
from pathlib import Path
from typing import Any

import anyio
import apsw
import pytest

from nodeprov import ConfigError, get_provider
from nodeprov.runs import Orchestrator
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.fake_provider import FakeSettings

pytestmark = pytest.mark.anyio


def test_secret_fields_are_declared_on_the_model_and_masked() -> None:
    canary = f"canary-{secrets.token_hex(8)}"
    settings = FakeSettings(env={"API_TOKEN": canary}, provision_delay=0.5)
    assert FakeSettings.secret_fields() == {"env"}
    assert settings.secrets_set() == ["env"]
    assert settings.storable() == {"provision_delay": 0.5}
    assert canary not in repr(settings)
    assert FakeSettings().secrets_set() == []  # a default is not a given secret


def _database_text(path: Path) -> str:
    """Every row of every table of an SQLite database, as text."""
    db = apsw.Connection(str(path))  # the store's own SQLite: never two copies on one file
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(repr(row) for table in tables for row in db.execute(f"SELECT * FROM {table}"))
    finally:
        db.close()


async def test_a_run_stores_no_secret_setting_and_resume_asks_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="nodeprov")
    canary = f"canary-{secrets.token_hex(8)}"
    seen = tmp_path / "seen"
    settings = {"root": str(tmp_path / "nodes"), "env": {"API_TOKEN": canary}}
    command = fake_agent_command(tmp_path)

    def agent(*steps: object) -> dict[str, Any]:
        return {"cli_path": command, "env": {"NODEPROV_FAKE_AGENT": json.dumps(list(steps))}}

    database = tmp_path / "runs.db"
    async with await Store.open(f"sqlite:///{database}") as store, Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "go", provider="fake", provider_settings=settings, options=agent({"text": "hi"}, {"stall": True})
        )
        async for _ in run.events():
            if run.agent_session_id is not None:
                break
        snapshot = await run.pause("human", "later")
        record = await store.run(run.id)
        assert record is not None
        assert json.loads(record.node_secret_fields) == ["env"]
        assert json.loads(record.node_settings) == {"root": str(tmp_path / "nodes")}

        with pytest.raises(ConfigError, match="env"):
            await orchestrator.resume(snapshot.token, options=agent({"text": "back"}))
        unused = await store.peek_snapshot(snapshot.token)
        assert unused is not None
        assert unused.used_at is None  # refused before the token was used up

        script = f'printf %s "$API_TOKEN" > {seen}.part && mv {seen}.part {seen}'
        resumed = await orchestrator.resume(
            snapshot.token,
            options=agent({"spawn": ["sh", "-c", script]}, {"wait_for": str(seen)}, {"text": "back"}),
            provider_settings={"env": {"API_TOKEN": canary}},
        )
        assert await resumed.wait() == "ok"
    assert (await anyio.Path(seen).read_text()) == canary  # the resumed node got it again
    assert canary not in _database_text(database)
    assert canary not in caplog.text


async def test_stored_settings_without_secrets_still_destroy_nodes(tmp_path: Path) -> None:
    """Reconcile and gc rebuild providers from stored settings: without the secrets, they
    can still find and destroy the run's nodes."""
    stored = FakeSettings(root=tmp_path, env={"API_TOKEN": "x"}).storable()
    provider = get_provider("fake", root=str(tmp_path), env={"API_TOKEN": "x"})
    node = await provider.provision()
    again = get_provider("fake", **stored)
    await (await again.attach(node.node_id)).destroy()
    assert await again.list_nodes() == []
