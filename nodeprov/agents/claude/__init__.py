"""The ``claude`` agent: the Claude Code CLI on any node, through the Claude Agent SDK.

:class:`ClaudeAgent` is the agent (registered as ``claude``); :class:`NodeTransport` is the
bridge under it, a ``claude_agent_sdk.Transport`` usable on its own with the SDK's
``query`` and ``ClaudeSDKClient``; :class:`ClaudeSessionStore` is the SDK's ``SessionStore``
on nodeprov's store.
"""

from .agent import ClaudeAgent, ClaudeOptions, ClaudeSession, convert
from .bridge import NodeTransport, TranscriptSink, agent_command, agent_environment
from .cli import bundled_cli_path
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
