"""Every command's ``--help`` at 80 columns (issue 46): no line over 80 characters, a
description column of 30 or more, values named as users know them (TEXT, SECONDS,
KEY=VALUE), never as Python types (``<str>``, ``<list[str]>``, ``<float range>``), and the
top-level list naming every agent, each command's summary whole."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from nodeprov.agents.registry import agent_names
from nodeprov.cli import app
from nodeprov.cli.app import load_commands

runner = CliRunner()
_COLUMNS = 80


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command's path under ``command`` (the top level's once :func:`load_commands` ran)."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


load_commands()
COMMANDS = list(_commands(typer.main.get_command(app)))


def _help(path: tuple[str, ...]) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(_COLUMNS), "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "nodeprov")
def test_help_reads_at_80_columns(path: tuple[str, ...]) -> None:
    text = _help(path)
    lines = text.splitlines()
    assert [line for line in lines if len(line) > _COLUMNS] == []
    python_types = re.findall(r"<(?:[a-z][^>]*|Path|FileText)>", text)  # not NODEPROV_<PROVIDER>_...
    assert python_types == [], "a Python type where a word users know belongs"
    assert "{" not in lines[0], lines[0]  # the usage line: PROMPT, not {prompt}
    # A description's continuation lines start at its column: at most 50 characters in.
    indents = [len(line) - len(line.lstrip()) for line in lines if line.startswith(" " * 8) and line.strip()]
    assert all(_COLUMNS - indent >= 30 for indent in indents), (indents, text)


def test_values_are_named_by_what_they_are() -> None:
    text = _help(("run",))
    for value in (
        "PROMPT",
        "-s, --setting KEY=VALUE",
        "-e, --env NAME[=VALUE]",
        "--timeout SECONDS",
        "--store URL",
    ):
        assert value in text, value
    assert "--ttl HOURS" in _help(("provision",))
    assert "--size N" in _help(("pool", "create"))


def test_the_top_level_help_names_every_agent_and_whole_summaries() -> None:
    text = _help(())
    agents = {
        "claude": "Claude Code",
        "codex": "Codex",
        "opencode": "OpenCode",
        "gemini": "Gemini CLI",
        "acp": "ACP agent",
    }
    assert all(agents[name] in text for name in agent_names()), text
    assert "..." not in text.split("Commands:", 1)[1]  # no summary cut short
