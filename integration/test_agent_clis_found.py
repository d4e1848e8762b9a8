"""An agent CLI the project's own scripts installed (``scripts/codex.sh``,
``scripts/opencode.sh``, ``scripts/gemini.sh``) is found with nothing exported (issue 46): the
scripts link it under ``$XDG_DATA_HOME/nodeprov/bin``, where an agent looks after
``NODEPROV_<AGENT>_CLI`` and PATH.
Before, ``nodeprov agents`` said "not found" until the variable was exported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("agent", ["codex", "opencode", "gemini"])
def test_the_cli_a_script_installed_is_found_with_nothing_exported(agent: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in ("NODEPROV_CODEX_CLI", "NODEPROV_OPENCODE_CLI", "NODEPROV_GEMINI_CLI")
    } | {"XDG_DATA_HOME": str(data), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    installed = subprocess.run(
        [_REPO / "scripts" / f"{agent}.sh"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=900,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    binary = installed.stdout.strip().splitlines()[-1]
    assert (data / "nodeprov" / "bin" / agent).resolve() == Path(binary).resolve()
    look = f"from nodeprov.agents.registry import agent_class; print(agent_class({agent!r}).local_cli())"
    found = subprocess.run(
        [sys.executable, "-c", look], capture_output=True, text=True, env=environ, timeout=60, check=True
    )
    assert Path(found.stdout.strip()).resolve() == Path(binary).resolve()
    agents = subprocess.run(
        [sys.executable, "-m", "nodeprov", "agents", "--json"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=True,
    )
    (row,) = [row for row in map(json.loads, agents.stdout.splitlines()) if row["name"] == agent]
    assert Path(row["local_cli"]).resolve() == Path(binary).resolve()  # `nodeprov agents`: found
