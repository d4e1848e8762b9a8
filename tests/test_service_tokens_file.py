"""``nodeprov serve --tokens-file``: the tokens of a tokens file (hashes only, as a mounted
Kubernetes Secret holds them) are added to the store at start, once, and let the service
listen beyond loopback; a revoked one stays revoked; a bad file is one error line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nodeprov.cli import app
from nodeprov.errors import ConfigError
from nodeprov.service import ServiceConfig
from nodeprov.service.server import add_file_tokens, check_exposure
from nodeprov.store import Store
from tests.serving import serving

pytestmark = pytest.mark.anyio


def _token_in_file(tokens: Path, name: str, scope: str) -> str:
    made = CliRunner().invoke(app, ["tokens", "create", name, "--scope", scope, "--file", str(tokens)])
    assert made.exit_code == 0, made.stderr
    return made.stdout.strip()


async def test_the_files_tokens_are_added_once_and_a_revoked_one_stays_revoked(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    admin, reader = _token_in_file(tokens, "ops", "admin"), _token_in_file(tokens, "dash", "read")
    store = f"sqlite:///{tmp_path}/service.db"
    wide = {"COLUMNS": "500"}  # the log on one line per record
    async with serving(tmp_path, "--tokens-file", str(tokens), store=store, env=wide) as served:
        async with served.client() as anonymous:  # loopback, but tokens exist: none is open
            assert (await anonymous.get("/v1/runs")).status_code == 401
        async with served.client(admin) as client:
            assert (await client.get("/v1/runs")).status_code == 200
        async with served.client(reader) as client:
            assert (await client.post("/v1/nodes", json={"provider": "local"})).status_code == 403
    log = served.log.read_text()
    assert f"tokens file {tokens}: 2 tokens, 2 of them new to the store" in log
    for secret in (admin, reader):
        assert secret.removeprefix("npt_") not in log
        assert hashlib.sha256(secret.encode()).hexdigest() not in log
    async with await Store.open(store) as opened:
        listed = await opened.tokens.tokens()
        assert [(t.name, t.scopes) for t in listed] == [("ops", ("admin",)), ("dash", ("read",))]
        await opened.tokens.revoke(listed[1].id)
    async with serving(tmp_path, "--tokens-file", str(tokens), store=store, env=wide, name="again") as served:
        async with served.client(reader) as client:
            assert (await client.get("/v1/runs")).status_code == 401  # revoked: the file does not undo it
        async with served.client(admin) as client:
            assert (await client.get("/v1/runs")).status_code == 200
    assert "2 tokens, 0 of them new" in served.log.read_text()
    async with await Store.open(store) as opened:
        assert len(await opened.tokens.tokens()) == 2


async def test_a_tokens_file_lets_the_service_listen_beyond_loopback(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text("[]")
    config = ServiceConfig(
        host="0.0.0.0", behind_proxy=True, store=f"sqlite:///{tmp_path}/s.db", tokens_file=str(tokens)
    )
    await add_file_tokens(config)
    with pytest.raises(ConfigError, match=r"refusing to listen on 0\.0\.0\.0 without tokens"):
        await check_exposure(config)
    _token_in_file(tokens, "ops", "admin")
    await add_file_tokens(config)
    await check_exposure(config)


def test_a_bad_tokens_file_is_one_error_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    digest = "ab" * 32
    for content, said in (
        ("{}", 'not a JSON list of {"name", "scopes", "sha256"}'),
        (json.dumps([{"name": "ops", "scopes": ["root"], "sha256": digest}]), "entry 0: unknown scopes root"),
        (
            json.dumps([{"name": "ops", "scopes": ["admin"], "sha256": digest.upper()}]),
            "entry 0: sha256 is 64",
        ),
        (None, "No such file or directory"),
    ):
        if content is None:
            tokens.unlink()
        else:
            tokens.write_text(content)
        done = subprocess.run(
            [sys.executable, "-m", "nodeprov", "serve", "--port", "0", "--tokens-file", str(tokens)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "NODEPROV_SERVE_CONFIG": "{}", "NODEPROV_STORE": f"sqlite:///{tmp_path}/s.db"},
        )
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"error: tokens file {tokens}")
        assert said in line
        assert digest not in done.stderr.lower()
        assert "listening" not in done.stdout
