"""The ``gemini`` agent: Google's Gemini CLI (npm ``@google/gemini-cli``) on a node, ``gemini
--acp``, driven over the Agent Client Protocol (:mod:`nodeprov.agents.acp`).

Each workspace has its own home on the node (``$HOME/.nodeprov/gemini/KEY``): the CLI's
settings, written there before it starts, keep it off the network but for its model API (no
usage statistics, telemetry or update checks), and sign it in with the key in ``env``
(``GEMINI_API_KEY``; ``GOOGLE_GEMINI_BASE_URL`` for another endpoint). Its sessions are kept
there too (``.gemini/tmp/PROJECT/chats``): archived after each turn, written on a fresh node
before a resume there, and loaded with ``session/load``.

The CLI asks its client before it edits a file or runs a command: the run's permission
answers (see :mod:`nodeprov.agents.acp.client`). Its launcher is a node.js script beside
the rest of the package: a node needs node.js 20 or later and the package installed
(``ship_cli`` makes the launcher available on nodes that use this machine's files in place,
a local node; elsewhere install it in the node's image, or mount it).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

from ..node import NodeHandle
from ..offline import demo_gemini
from ..prompts import ImageLimits
from . import AgentOptions, ModelInfo, SessionArchive, StateKey
from ._installed import installed_cli
from .acp import AcpAgent, AcpOptions
from .acp.state import save_tree, write_tree

__all__ = ["GEMINI_IMAGE_LIMITS", "GeminiAgent", "GeminiOptions"]

GEMINI_IMAGE_LIMITS = ImageLimits(
    media_types=frozenset({"image/png", "image/jpeg", "image/webp"}),
    max_bytes=15 * 1024 * 1024,
    max_count=3000,
    max_total_bytes=15 * 1024 * 1024,
)
"""What the Gemini API takes of a prompt's images inline: a request of 20 MB at most, so 15 MB
of images before base64; PNG, JPEG, WebP; 3,000 of them."""

_SETTINGS = {
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}
"""The CLI's ``settings.json``: nothing leaves the node but its model traffic (usage
statistics went to Google's Clearcut), and the key in its environment signs it in (with
``GOOGLE_GEMINI_BASE_URL`` set it would take the ``gateway`` way otherwise)."""
_PROJECTS = ".gemini/tmp"
"""Where, in its home, the CLI keeps its sessions: a directory per project (a directory it
works in), named by a slug, whose ``.project_root`` says which; ``chats/`` holds a file per
session, ``session-START-ID8.jsonl`` (its start, to the minute, and its id's first 8
characters)."""
_KEEP_SESSION = """\
kept=
for file in "$HOME"/.gemini/tmp/*/chats/session-kept-*-"$1".jsonl; do [ -e "$file" ] && kept=1; done
for file in "$HOME"/.gemini/tmp/*/chats/session-*-"$1".jsonl; do
  case $file in
    */session-kept-*) ;;
    *) [ -e "$file" ] || continue
       if [ -n "$kept" ]; then rm -f "$file" || exit 1
       else mv -f "$file" "${file%/*}/session-kept-${file##*/session-}" || exit 1; fi ;;
  esac
done
shift
exec "$@"
"""
"""Run as ``sh -c _KEEP_SESSION nodeprov-gemini ID8 ARGV...`` before a session is loaded: the
CLI, loading a session, starts recording it afresh in ``session-NOW-ID8.jsonl``, which wipes
the conversation when that is its file's name (a load within the minute it started; Gemini
CLI 0.61); a session file renamed ``session-kept-...`` is found by its id all the same, and
its recording goes on there. The fresh file such a load leaves beside the kept one holds no
more than the session's start: it is removed before the next load (which would otherwise
rename it over the kept one, or find it first)."""


class GeminiOptions(AcpOptions):
    """Options of the ``gemini`` agent."""


class GeminiAgent(AcpAgent[GeminiOptions]):
    """The Gemini CLI (``gemini --acp``); see :mod:`nodeprov.agents.gemini`."""

    name: ClassVar[str] = "gemini"
    options_model: ClassVar[type[AgentOptions]] = GeminiOptions
    cli_name: ClassVar[str] = "gemini"
    models: ClassVar[tuple[ModelInfo, ...]] = (
        ModelInfo("gemini-2.5-pro", "Gemini 2.5 Pro", 1_048_576, vision=True),
        ModelInfo("gemini-2.5-flash", "Gemini 2.5 Flash", 1_048_576, vision=True),
        ModelInfo("gemini-2.5-flash-lite", "Gemini 2.5 Flash-Lite", 1_048_576, vision=True),
    )
    model_patterns: ClassVar[tuple[str, ...]] = (r"gemini-.+",)
    image_limits: ClassVar[ImageLimits | None] = GEMINI_IMAGE_LIMITS

    @classmethod
    @asynccontextmanager
    async def offline(cls, prompt: str) -> AsyncIterator[dict[str, Any]]:
        async with demo_gemini(prompt) as gemini:
            yield {"env": gemini.agent_env(), "model": gemini.model}

    @classmethod
    def local_cli(cls) -> str | None:
        """``NODEPROV_GEMINI_CLI``, else ``gemini`` on PATH, else the one ``scripts/gemini.sh``
        installed (:func:`~nodeprov.agents._installed.installed_cli`): its launcher,
        ``bundle/gemini.js`` of the package, links followed."""
        found = os.environ.get("NODEPROV_GEMINI_CLI") or shutil.which("gemini") or installed_cli("gemini")
        return str(Path(found).resolve()) if found is not None else None

    def authentication(self) -> str | None:
        return "gemini-api-key"

    def history_settle(self) -> float:
        """A second: 0.61 answers ``session/load``, then replays the history (in a task it
        does not wait for)."""
        return 1.0

    def command(self, node: NodeHandle, home: str, *, resume: str | None) -> list[str]:
        argv = [self.cli_on(node), "--acp"]
        if self.options.model:
            argv += ["--model", self.options.model]
        return ["/bin/sh", "-c", _KEEP_SESSION, "nodeprov-gemini", resume[:8], *argv] if resume else argv

    def environment(self, home: str) -> dict[str, str]:
        """As for every ACP agent; the CLI's own re-launch (a second node.js with a larger
        heap) is spared: its process is the one the session stops."""
        return {**super().environment(home), "GEMINI_CLI_NO_RELAUNCH": "true"}

    async def prepare_home(self, node: NodeHandle, home: str) -> None:
        await node.write_file(f"{home}/.gemini/settings.json", json.dumps(_SETTINGS).encode())

    async def import_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> bool:
        """The session's files, each project's ``.project_root`` saying the directory the
        session works in on ``node`` (the CLI finds its project's directory by that)."""
        entries = await archive.load({"project_key": project_key, "session_id": session_id})
        if not entries:
            return False
        here = self.workdir_on(node)
        moved = [
            {**entry, "text": here + "\n"} if str(entry.get("path", "")).endswith("/.project_root") else entry
            for entry in entries
        ]
        await write_tree(node, self.home_of(node, project_key), moved)
        return True

    async def export_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> None:
        """The session's files (``session-*-ID8.jsonl``) and their projects' ``.project_root``."""
        key: StateKey = {"project_key": project_key, "session_id": session_id}
        home, short = self.home_of(node, project_key), session_id[:8]
        paths = [f"{_PROJECTS}/*/chats/session-*-{short}.jsonl", f"{_PROJECTS}/*/.project_root"]
        await save_tree(node, home, paths, key, archive, keep=_with_chats)


def _with_chats(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of ``entries``, the chats, and the ``.project_root`` of the projects that hold one."""
    chats = [entry for entry in entries if "/chats/" in str(entry["path"])]
    projects = {str(entry["path"]).split("/chats/", 1)[0] for entry in chats}
    return chats + [
        entry for entry in entries if str(entry["path"]).removesuffix("/.project_root") in projects
    ]
