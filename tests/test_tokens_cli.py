"""``nodeprov tokens``: the secret is printed once and works; listing never shows it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import anyio
from typer.testing import CliRunner

from nodeprov.cli import app
from nodeprov.store import Store, TokenRecord

runner = CliRunner()


def _authenticate(url: str, secret: str) -> TokenRecord | None:
    async def check() -> TokenRecord | None:
        async with await Store.open(url) as store:
            return await store.tokens.authenticate(secret)

    return anyio.run(check)


def test_a_token_is_made_listed_and_revoked(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path}/store.db"]
    made = runner.invoke(app, ["tokens", "create", "ci", "--scope", "runs", "--scope", "read", *store])
    assert made.exit_code == 0, made.stderr
    secret = made.stdout.strip()
    assert made.stdout == secret + "\n"  # the secret alone on its line
    assert secret.startswith("npt_")
    assert "shown this once" in made.stderr
    assert secret not in made.stderr
    record = _authenticate(store[1], secret)
    assert record is not None
    assert (record.name, record.scopes) == ("ci", ("read", "runs"))
    assert record.id in made.stderr

    digest = hashlib.sha256(secret.encode()).hexdigest()
    table = runner.invoke(app, ["tokens", "ls", *store], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.stderr
    assert record.id in table.stdout
    assert "read runs" in table.stdout
    listed = runner.invoke(app, ["tokens", "ls", "--json", *store])
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [
        {
            "id": record.id,
            "name": "ci",
            "scopes": ["read", "runs"],
            "created_at": record.created_at,
            "revoked_at": None,
            "tenant": "default",
        }
    ]
    for shown in (table, listed):
        assert secret.removeprefix("npt_") not in shown.stdout + shown.stderr
        assert digest not in shown.stdout + shown.stderr

    revoked = runner.invoke(app, ["tokens", "revoke", record.id, *store])
    assert revoked.exit_code == 0, revoked.stderr
    assert revoked.stdout == f"revoked {record.id}\n"
    assert _authenticate(store[1], secret) is None
    again = runner.invoke(app, ["tokens", "revoke", record.id, *store])
    assert again.exit_code == 0
    assert again.stdout == f"{record.id} was revoked already\n"
    listed = runner.invoke(app, ["tokens", "ls", "--json", *store])
    assert json.loads(listed.stdout)["revoked_at"] is not None


def test_create_json_gives_the_secret_once(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path}/store.db"]
    made = runner.invoke(app, ["tokens", "create", "ops", "--scope", "admin", "--json", *store])
    assert made.exit_code == 0, made.stderr
    body = json.loads(made.stdout)
    assert set(body) == {"id", "name", "scopes", "tenant", "token"}
    assert (body["name"], body["scopes"], body["tenant"]) == ("ops", ["admin"], "default")
    record = _authenticate(store[1], body["token"])
    assert record is not None
    assert record.id == body["id"]


def test_a_bad_call_is_one_error_line(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path}/store.db"]
    calls = {
        ("create", "ci", "--scope", "read", "--scope", "write"): "error: unknown scopes write (known: ",
        ("create", "ci"): "error: a token needs at least one scope",
        ("create", "", "--scope", "read"): "error: a token needs a name",
    }
    for args, error in calls.items():
        result = runner.invoke(app, ["tokens", *args, *store])
        assert result.exit_code == 2, args
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith(error)
    unknown = runner.invoke(app, ["tokens", "revoke", "tok-000000000000", *store])
    assert unknown.exit_code == 1
    assert unknown.stderr.splitlines() == ["error: no such token tok-000000000000"]
    listed = runner.invoke(app, ["tokens", "ls", "--json", *store])
    assert listed.stdout == ""  # nothing was made


def test_create_file_adds_the_hash_to_a_tokens_file_and_prints_the_secret_once(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    made = runner.invoke(
        app,
        ["tokens", "create", "ops", "--scope", "admin", "--file", str(tokens)],
        env={"NODEPROV_STORE": ""},
    )
    assert made.exit_code == 0, made.stderr
    secret = made.stdout.strip()
    assert made.stdout == secret + "\n"
    assert f"token 'ops' (admin) added to {tokens}" in made.stderr
    assert tokens.stat().st_mode & 0o777 == 0o600
    second = runner.invoke(
        app, ["tokens", "create", "ci", "--scope", "runs", "--file", str(tokens), "--json"]
    )
    assert second.exit_code == 0, second.stderr
    body = json.loads(second.stdout)
    assert (body["name"], body["scopes"], body["file"]) == ("ci", ["runs"], str(tokens))
    assert json.loads(tokens.read_text()) == [
        {"name": "ops", "scopes": ["admin"], "sha256": hashlib.sha256(secret.encode()).hexdigest()},
        {"name": "ci", "scopes": ["runs"], "sha256": hashlib.sha256(body["token"].encode()).hexdigest()},
    ]
    assert secret.removeprefix("npt_") not in tokens.read_text()
    assert not list(tmp_path.glob("*.db"))  # no store was touched

    tokens.write_text('[{"name": "x", "scopes": ["admin"]}]')
    refused = runner.invoke(app, ["tokens", "create", "ci", "--scope", "runs", "--file", str(tokens)])
    assert refused.exit_code == 2
    assert refused.stdout == ""
    fields = '"name", "scopes", "sha256" (and "tenant")'
    assert refused.stderr.splitlines() == [
        f"error: tokens file {tokens}, entry 0: an entry has the fields {fields}"
    ]
