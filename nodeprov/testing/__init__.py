"""Test helpers for control planes built on nodeprov, usable without a model or a key.

- :class:`ScriptedModel`: a scripted Anthropic Messages API server on 127.0.0.1 that the
  real Claude Code CLI talks to; turns are :class:`Text`, :class:`ToolUse`, :class:`Stall`.
- :class:`ScriptedResponses`: a scripted OpenAI Responses API server on 127.0.0.1 that the
  real Codex CLI talks to; turns are :class:`ResponsesText`, :class:`ExecCommand`,
  :class:`ResponsesStall`, :class:`ResponsesHttpError`.
- :class:`ScriptedChat`: a scripted OpenAI Chat Completions API server on 127.0.0.1 that
  the real OpenCode CLI talks to; turns are :class:`ChatText`, :class:`BashCommand`,
  :class:`ChatToolCall`, :class:`ChatStall`, :class:`ChatHttpError`.
- :class:`ScriptedGemini`: a scripted Gemini API server on 127.0.0.1 that the real Gemini
  CLI talks to; turns are :class:`GeminiText`, :class:`ShellCommand`,
  :class:`GeminiFunctionCall`, :class:`GeminiStall`, :class:`GeminiHttpError`. All four are
  product code in :mod:`nodeprov.offline`, re-exported here.
- The pytest plugin (:mod:`nodeprov.testing.pytest_plugin`, loaded automatically) provides
  the ``scripted_model``, ``scripted_responses``, ``scripted_chat`` and ``local_node``
  fixtures.
- :mod:`nodeprov.testing.conformance`: the suite every provider must pass.
- :func:`fake_agent_command`: a fake Claude Code CLI that plays a script of steps
  (:mod:`nodeprov.testing.fake_agent`), for fast tests of what drives agents.
- :mod:`nodeprov.testing.containers` (the ``testing`` extra): an SSH host and a PostgreSQL
  server as testcontainers containers, built offline; the plugin's ``nodeprov_ssh_host``,
  ``nodeprov_postgres`` and ``nodeprov_postgres_url`` fixtures. Not imported here: it needs
  testcontainers.
"""

from ..offline import (
    BashCommand,
    ChatHttpError,
    ChatRequest,
    ChatStall,
    ChatText,
    ChatToolCall,
    ChatTurn,
    ExecCommand,
    GeminiFunctionCall,
    GeminiHttpError,
    GeminiRequest,
    GeminiStall,
    GeminiText,
    GeminiTurn,
    RecordedRequest,
    ResponsesHttpError,
    ResponsesRequest,
    ResponsesStall,
    ResponsesText,
    ResponsesTurn,
    ScriptedChat,
    ScriptedGemini,
    ScriptedModel,
    ScriptedResponses,
    ShellCommand,
    Stall,
    Text,
    ToolUse,
    Turn,
)
from .fake_agent import fake_agent_command

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
    "fake_agent_command",
]
