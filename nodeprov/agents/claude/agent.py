"""The ``claude`` agent: the Claude Code CLI on a node, driven over its stream-json protocol
(:mod:`nodeprov.agents.claude.session`). Nothing of it imports the Claude Agent SDK, which
only :class:`~nodeprov.agents.claude.NodeTransport` and
:class:`~nodeprov.agents.claude.ClaudeSessionStore`, made for the SDK's users, need."""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from ...node import NodeHandle
from ...node.keeper import KeepOptions
from ...offline import demo_messages
from ...prompts import ANTHROPIC_IMAGE_LIMITS, ImageLimits
from ...settings import secret_field
from .. import Agent, AgentOptions, Capabilities, ModelInfo, SessionArchive, StateKey
from .._files import archive_file, write_jsonl
from .cli import bundled_cli_path
from .sdk_parity import fold_summary, sanitize_path

if TYPE_CHECKING:
    from ...store.entries import Fold
    from .session import ClaudeSession

__all__ = ["ClaudeAgent", "ClaudeOptions", "config_dir"]


class ClaudeOptions(AgentOptions):
    """Options of the ``claude`` agent (the Claude Code CLI)."""

    caller_options: ClassVar[frozenset[str]] = AgentOptions.caller_options | {
        "max_turns",
        "allowed_tools",
        "disallowed_tools",
        "system_prompt",
    }

    max_turns: int | None = Field(default=None, gt=0, description="Stop after this many agentic turns.")
    allowed_tools: list[str] = Field(default_factory=list, description="Tools allowed without asking.")
    disallowed_tools: list[str] = Field(default_factory=list, description="Tools the agent may not use.")
    system_prompt: str | None = Field(default=None, description="Replaces Claude Code's system prompt.")
    mcp_servers: dict[str, dict[str, Any]] = secret_field(
        default_factory=dict,
        description="MCP servers by name, as Claude Code's --mcp-config takes them; a secret (their env "
        "and headers hold credentials): never stored, and on the node a 0600 file, never an argument.",
    )


class ClaudeAgent(Agent[ClaudeOptions]):
    """The Claude Code CLI, driven over its stream-json protocol as the Claude Agent SDK
    drives it (:class:`~nodeprov.agents.claude.session.ClaudeSession`). Its session state is its transcript,
    mirrored into the archive as the CLI writes it (``--session-mirror``), read back off
    the node before the node goes, and written under ``$HOME/.claude/projects`` of a fresh
    node to resume there."""

    name: ClassVar[str] = "claude"
    options_model: ClassVar[type[AgentOptions]] = ClaudeOptions
    cli_name: ClassVar[str] = "claude"
    capabilities: ClassVar[Capabilities] = Capabilities(streaming=True, structured_output=True)
    models: ClassVar[tuple[ModelInfo, ...]] = (
        ModelInfo("claude-opus-4-5", "Claude Opus 4.5", 200_000, vision=True),
        ModelInfo("claude-sonnet-4-5", "Claude Sonnet 4.5", 200_000, vision=True),
        ModelInfo("claude-haiku-4-5", "Claude Haiku 4.5", 200_000, vision=True),
    )
    model_patterns: ClassVar[tuple[str, ...]] = (r"claude-.*", "opus", "sonnet", "haiku")
    fallback: ClassVar[bool] = True
    image_limits: ClassVar[ImageLimits | None] = ANTHROPIC_IMAGE_LIMITS
    state_summary: ClassVar[Fold | None] = fold_summary

    @classmethod
    def local_cli(cls) -> str | None:
        return bundled_cli_path()

    @classmethod
    @asynccontextmanager
    async def offline(cls, prompt: str) -> AsyncIterator[dict[str, Any]]:
        async with demo_messages(prompt) as messages:
            yield {"env": messages.agent_env()}

    def session(
        self,
        node: NodeHandle,
        *,
        workspace: str = "default",
        resume: str | None = None,
        archive: SessionArchive | None = None,
        keep: KeepOptions | None = None,
    ) -> ClaudeSession:
        """The CLI keeps its sessions under the node's ``$HOME/.claude`` whatever the
        workspace (where a user logged in to Claude Code keeps the login too); they are
        told apart by session id."""
        from .session import ClaudeSession

        return ClaudeSession(self, node, resume, archive, keep)

    def state_key(self, node: NodeHandle, workspace: str = "default") -> str:
        """The directory name the CLI gives the agent's working directory on ``node``."""
        cwd = self.options.cwd or node.workdir
        return sanitize_path(posixpath.normpath(posixpath.join(node.workdir, cwd)))

    async def import_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> bool:
        key: StateKey = {"project_key": project_key, "session_id": session_id}
        entries = await archive.load(key)
        if not entries:
            return False
        directory = f"{config_dir(node)}/projects/{self.state_key(node)}"
        files = {f"{directory}/{session_id}.jsonl": entries}
        for subpath in await archive.subpaths(key):
            files[f"{directory}/{session_id}/{subpath}.jsonl"] = (
                await archive.load({**key, "subpath": subpath}) or []
            )
        for path, content in files.items():
            await write_jsonl(node, path, content)
        return True

    async def export_state(
        self, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
    ) -> None:
        """The CLI mirrors in batches of its own, and a CLI stopped by a pause may not have
        sent its last frames, or any: the file on the node completes the archived copy."""
        path = f"{config_dir(node)}/projects/{project_key}/{session_id}.jsonl"
        key: StateKey = {"project_key": project_key, "session_id": session_id}
        await archive_file(node, path, key, archive, summarize=fold_summary)


def config_dir(node: NodeHandle) -> str:
    """The CLI's CLAUDE_CONFIG_DIR on ``node``: transcripts live under its ``projects``."""
    return f"{node.base_env.get('HOME', '/root')}/.claude"
