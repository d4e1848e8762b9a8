"""Where the project's install scripts (``scripts/codex.sh``, ``scripts/opencode.sh``,
``scripts/gemini.sh``) link the agent CLIs they install, so that an agent finds its CLI with
nothing exported: ``$XDG_DATA_HOME/nodeprov/bin`` (``~/.local/share/nodeprov/bin`` without
the variable)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["installed_cli", "tools_dir"]


def tools_dir() -> Path:
    """The directory the install scripts link the CLIs into."""
    data = os.environ.get("XDG_DATA_HOME", "")
    return (Path(data) if os.path.isabs(data) else Path.home() / ".local" / "share") / "nodeprov" / "bin"


def installed_cli(name: str) -> str | None:
    """The CLI ``name`` an install script linked, if it is an executable file still."""
    path = tools_dir() / name
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None
