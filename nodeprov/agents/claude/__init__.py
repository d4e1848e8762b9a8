"""The ``claude`` agent: the Claude Code CLI on any node, through the Claude Agent SDK.

:class:`ClaudeAgent` is the agent (registered as ``claude``); :class:`NodeTransport` is the
bridge under it, a ``claude_agent_sdk.Transport`` usable on its own with the SDK's
``query`` and ``ClaudeSDKClient``; :class:`ClaudeSessionStore` is the SDK's ``SessionStore``
on nodeprov's store. Only the agent's own module is imported with the package: the names
that need the SDK (most of a second to import) import it on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .agent import ClaudeAgent, ClaudeOptions
from .cli import bundled_cli_path
from .messages import convert

if TYPE_CHECKING:
    from .bridge import NodeTransport, TranscriptSink, agent_command, agent_environment
    from .session import ClaudeSession
    from .session_store import ClaudeSessionStore

__all__ = [
    "ClaudeAgent",
    "ClaudeOptions",
    "ClaudeSession",
    "ClaudeSessionStore",
    "NodeTransport",
    "TranscriptSink",
    "agent_command",
    "agent_environment",
    "bundled_cli_path",
    "convert",
]

_LAZY = {
    "ClaudeSession": "session",
    "ClaudeSessionStore": "session_store",
    "NodeTransport": "bridge",
    "TranscriptSink": "bridge",
    "agent_command": "bridge",
    "agent_environment": "bridge",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
