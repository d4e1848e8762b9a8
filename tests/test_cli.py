"""The CLI's argument handling and error lines (no agent run: see integration/test_cli.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from nodeprov.cli import app
from nodeprov.cli.app import COMMANDS, load_commands, summary
from nodeprov.errors import ProviderError
from nodeprov.testing.fake_provider import FakeProvider
from nodeprov.testing.pytest_plugin import require_engine

runner = CliRunner()


def test_providers_lists_local() -> None:
    result = runner.invoke(app, ["providers", "--json"])
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    local = next(row for row in rows if row["name"] == "local")
    assert local["requirements"] == []  # agents' CLIs are `nodeprov agents`' business
    assert local["ready"] is True


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


def test_reserved_label_is_one_error_line(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["provision", "-p", "local", "-s", f"root={tmp_path}", "--label", "nodeprov.owner=x"]
    )
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: labels: Value error, the 'nodeprov.' label prefix is reserved: ['nodeprov.owner']"
    ]


def test_bad_exec_env_and_bare_setting_are_one_error_line(tmp_path: Path) -> None:
    bad_env = runner.invoke(app, ["exec", "np-x", "-p", "local", "-e", "=x", "--", "true"])
    assert (bad_env.exit_code, bad_env.stderr.splitlines()) == (
        2,
        ["error: invalid environment variable names: ['']"],
    )
    bare = runner.invoke(app, ["list", "-p", "local", "-s", "root"])
    assert (bare.exit_code, bare.stderr.splitlines()) == (2, ["error: --setting takes KEY=VALUE, got 'root'"])


def test_a_failing_probe_makes_a_provider_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    async def unreachable(self: FakeProvider) -> None:
        raise ProviderError("engine unreachable\nmore detail")

    monkeypatch.setattr(FakeProvider, "probe", unreachable)
    result = runner.invoke(app, ["providers", "--json"])
    assert result.exit_code == 0
    fake = next(row for row in map(json.loads, result.stdout.splitlines()) if row["name"] == "fake")
    assert (fake["ready"], fake["error"]) == (False, "not ready: engine unreachable")
    table = runner.invoke(app, ["providers"], env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert "not ready: engine unreachable" in table.stdout


@pytest.mark.parametrize("value", ["1", "yes", "on", "true", "TRUE", "Yes"])
def test_require_engine_fails_in_ci(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="every engine must be set up"):
        require_engine("the moon", False)


@pytest.mark.parametrize("value", ["", "0", "no", "false", "off"])
def test_require_engine_skips_outside_ci(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="the moon is not available"):
        require_engine("the moon", False)


_IMPORTS_AFTER = """
import sys
from nodeprov.cli import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
print("claude_agent_sdk" in sys.modules, "mcp" in sys.modules, file=sys.stderr)
print("store", "nodeprov.store" in sys.modules, file=sys.stderr)
heavy = [name for name in sys.modules if name.split(".")[0] in ("rich", "anyio")]
heavy += [name for name in sys.modules if name.startswith("nodeprov.cli.")]
print("loaded", *sorted(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("args", "loads_sdk"),
    [
        (["--help"], False),
        (["run", "--help"], False),
        (["providers", "--json"], False),
        (["runs"], False),
        (["sessions"], False),
        (["status", "run-none"], False),
        (["run", "--provider", "no-such", "hi"], False),
        (["run", "-s", "colour=blue", "hi"], False),
        (["logs", "run-none"], False),  # agent messages are nodeprov's own
        (["run", "--agent", "codex", "--provider", "no-such", "hi"], False),
    ],
)
def test_only_commands_that_drive_claude_import_the_sdk(
    args: list[str], loads_sdk: bool, tmp_path: Path
) -> None:
    """Importing the Claude Agent SDK (and its mcp) takes longer than all the rest of a quick
    command: only a claude run (and `agents`, which describes it) loads it."""
    env = {**os.environ, "NODEPROV_STORE": f"sqlite:///{tmp_path}/store.db"}
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AFTER, *args], env=env, capture_output=True, text=True, check=True
    )
    assert done.stderr.splitlines()[-3] == f"{loads_sdk} {loads_sdk}", done.stderr


@pytest.mark.parametrize(
    "args", [["--help"], ["run", "--help"], ["tokens", "create", "--help"], ["audit", "--help"]]
)
def test_help_imports_no_store(args: list[str]) -> None:
    """The store (a fifth of `nodeprov --help`'s import time, issue 47) loads only for a
    command that uses it."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AFTER, *args], capture_output=True, text=True, check=True
    )
    assert done.stderr.splitlines()[-2] == "store False", done.stderr


def test_the_top_level_help_imports_no_command_nor_rich_nor_anyio() -> None:
    """`nodeprov --help` lists the commands from their table (issue 47): it imports none of
    their modules, nor what they print and run with."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AFTER, "--help"], capture_output=True, text=True, check=True
    )
    assert done.stderr.splitlines()[-1] == "loaded nodeprov.cli.app", done.stderr
    assert "Commands:" in done.stdout


def _module(command: Any) -> str:
    """The module whose function ``command`` (or its group's first command) runs."""
    while getattr(command, "commands", None):
        command = next(iter(command.commands.values()))
    return str(command.callback.__module__)


def test_the_table_of_commands_is_the_commands_registered() -> None:
    """Each command is in the top level's table, under the module that registers it, with the
    summary its help says: a command added without a line there fails here."""
    load_commands()
    group = typer.main.get_group(app)
    assert sorted(group.commands) == sorted(COMMANDS)  # registered as imported; listed as COMMANDS
    for name, command in group.commands.items():
        assert _module(command) == f"nodeprov.cli.{COMMANDS[name][0]}", name
        assert command.get_short_help_str(200) == summary(name)


def test_agents_lists_each_agent_its_routes_and_what_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEPROV_CODEX_CLI", "/nonexistent/codex")
    monkeypatch.setenv("PATH", "/nonexistent")
    listed = runner.invoke(app, ["agents", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in map(json.loads, listed.stdout.splitlines())}
    assert rows["claude"]["default"] is True
    codex = {"streaming": True, "structured_output": True, "acp": False, "images": True}
    assert rows["codex"]["capabilities"] == codex
    assert rows["gemini"]["capabilities"] == {**codex, "structured_output": False, "acp": True}
    assert rows["acp"]["capabilities"]["acp"] is True
    assert {"id": "o3-mini", "vision": False}.items() <= next(
        model for model in rows["codex"]["models"] if model["id"] == "o3-mini"
    ).items()
    shown = runner.invoke(app, ["agents"])
    assert "not found" in shown.stdout
    assert "[red]" not in shown.stdout  # a style, not markup printed as it is
