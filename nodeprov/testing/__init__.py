"""Test helpers for control planes built on nodeprov, usable without a model or a key.

- :class:`ScriptedModel`: a scripted Anthropic Messages API server on 127.0.0.1 that the
  real Claude Code CLI talks to; turns are :class:`Text`, :class:`ToolUse`, :class:`Stall`.
- The pytest plugin (:mod:`nodeprov.testing.pytest_plugin`, loaded automatically) provides
  the ``scripted_model`` and ``local_node`` fixtures.
- :mod:`nodeprov.testing.conformance`: the suite every provider must pass.
"""

from .scripted_model import RecordedRequest, ScriptedModel, Stall, Text, ToolUse, Turn

__all__ = ["RecordedRequest", "ScriptedModel", "Stall", "Text", "ToolUse", "Turn"]
