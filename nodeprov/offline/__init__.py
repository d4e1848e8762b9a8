"""Offline models: scripted model API servers on 127.0.0.1 that the real agent CLIs talk to,
with no model and no key. ``nodeprov run`` uses them by default (``--model scripted``), and
tests use them (:mod:`nodeprov.testing` re-exports them).

- :class:`ScriptedModel`: the Anthropic Messages API (the Claude Code CLI); turns are
  :class:`Text`, :class:`ToolUse`, :class:`Stall`.
- :class:`ScriptedResponses`: the OpenAI Responses API (the Codex CLI); turns are
  :class:`ResponsesText`, :class:`ExecCommand`, :class:`ResponsesStall`,
  :class:`ResponsesHttpError`.
- :class:`ScriptedChat`: the OpenAI Chat Completions API (OpenCode, through an
  OpenAI-compatible provider); turns are :class:`ChatText`, :class:`BashCommand`,
  :class:`ChatToolCall`, :class:`ChatStall`, :class:`ChatHttpError`.
- :class:`ScriptedGemini`: the Gemini API (the Gemini CLI); turns are :class:`GeminiText`,
  :class:`ShellCommand`, :class:`GeminiFunctionCall`, :class:`GeminiStall`,
  :class:`GeminiHttpError`.
- :mod:`~nodeprov.offline.demo`: the built-in demo script on each.
"""

from .chat import (
    BashCommand,
    ChatHttpError,
    ChatRequest,
    ChatStall,
    ChatText,
    ChatToolCall,
    ChatTurn,
    ScriptedChat,
)
from .demo import demo_chat, demo_gemini, demo_messages, demo_responses
from .gemini import (
    GeminiFunctionCall,
    GeminiHttpError,
    GeminiRequest,
    GeminiStall,
    GeminiText,
    GeminiTurn,
    ScriptedGemini,
    ShellCommand,
)
from .messages import RecordedRequest, ScriptedModel, Stall, Text, ToolUse, Turn
from .responses import (
    ExecCommand,
    ResponsesHttpError,
    ResponsesRequest,
    ResponsesStall,
    ResponsesText,
    ResponsesTurn,
    ScriptedResponses,
)

__all__ = [
    "BashCommand",
    "ChatHttpError",
    "ChatRequest",
    "ChatStall",
    "ChatText",
    "ChatToolCall",
    "ChatTurn",
    "ExecCommand",
    "GeminiFunctionCall",
    "GeminiHttpError",
    "GeminiRequest",
    "GeminiStall",
    "GeminiText",
    "GeminiTurn",
    "RecordedRequest",
    "ResponsesHttpError",
    "ResponsesRequest",
    "ResponsesStall",
    "ResponsesText",
    "ResponsesTurn",
    "ScriptedChat",
    "ScriptedGemini",
    "ScriptedModel",
    "ScriptedResponses",
    "ShellCommand",
    "Stall",
    "Text",
    "ToolUse",
    "Turn",
    "demo_chat",
    "demo_gemini",
    "demo_messages",
    "demo_responses",
]
