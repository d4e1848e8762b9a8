"""Where the Claude Code CLI bundled in the claude-agent-sdk wheel is, found without
importing the SDK (which costs more than a quick command's whole run): providers and the
CLI's ``providers`` check ask for it without driving an agent."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

__all__ = ["bundled_cli_path"]


def bundled_cli_path() -> str | None:
    """Path of the Claude Code CLI bundled in the installed claude-agent-sdk wheel, if any."""
    spec = find_spec("claude_agent_sdk")
    for package in (spec and spec.submodule_search_locations) or ():
        path = Path(package) / "_bundled" / "claude"
        if path.is_file():
            return str(path)
    return None
