"""The CLI's argument handling and error lines (no agent run: see integration/test_cli.py)."""

import json

from typer.testing import CliRunner

from nodeprov.cli import app

runner = CliRunner()


def test_providers_lists_local() -> None:
    result = runner.invoke(app, ["providers", "--json"])
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    local = next(row for row in rows if row["name"] == "local")
    assert local["requirements"][0]["name"] == "claude CLI"


def test_unknown_provider_is_one_error_line() -> None:
    result = runner.invoke(app, ["run", "--provider", "no-such", "hi"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: no provider named 'no-such' (installed: ")


def test_unknown_setting_is_rejected_clearly() -> None:
    result = runner.invoke(app, ["run", "-s", "colour=blue", "hi"])
    assert result.exit_code == 2
    assert "colour: Extra inputs are not permitted" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_malformed_setting_and_missing_env() -> None:
    assert runner.invoke(app, ["run", "-s", "novalue", "hi"]).exit_code == 2
    result = runner.invoke(app, ["run", "--env", "NODEPROV_SURELY_UNSET", "hi"])
    assert result.exit_code == 2
    assert "NODEPROV_SURELY_UNSET" in result.stderr
