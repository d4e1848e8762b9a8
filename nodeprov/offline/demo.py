"""The built-in demo script, the same for every agent: a command run on the node (it saves the
prompt to ``prompt.txt`` and says where it ran), then an answer. Each agent plays it on the
scripted server of the API it speaks (see :meth:`~nodeprov.agents.Agent.offline`)."""

from __future__ import annotations

import shlex

from .chat import BashCommand, ChatText, ScriptedChat
from .gemini import GeminiText, ScriptedGemini, ShellCommand
from .messages import ScriptedModel, Text, ToolUse
from .responses import ExecCommand, ResponsesText, ScriptedResponses

__all__ = ["demo_chat", "demo_gemini", "demo_messages", "demo_responses"]

_LOOK = "Let me look at the node first."


def _command(prompt: str) -> str:
    return f"printf '%s\\n' {shlex.quote(prompt)} > prompt.txt && uname -sm && pwd"


def _answer(prompt: str) -> str:
    return f"(scripted model) I ran a command on the node and saved your prompt to prompt.txt: {prompt}"


def demo_messages(prompt: str) -> ScriptedModel:
    """The demo for ``prompt`` on the scripted Messages API: a Bash call on the node, an answer."""
    return ScriptedModel([ToolUse("Bash", {"command": _command(prompt)}, text=_LOOK), Text(_answer(prompt))])


def demo_responses(prompt: str) -> ScriptedResponses:
    """The demo for ``prompt`` on the scripted Responses API: the same command, the same answer."""
    return ScriptedResponses(
        [ExecCommand(["sh", "-c", _command(prompt)], text=_LOOK), ResponsesText(_answer(prompt))]
    )


def demo_chat(prompt: str) -> ScriptedChat:
    """The demo for ``prompt`` on the scripted Chat Completions API: the same command (with
    OpenCode's ``bash`` tool), the same answer."""
    return ScriptedChat([BashCommand(_command(prompt), text=_LOOK), ChatText(_answer(prompt))])


def demo_gemini(prompt: str) -> ScriptedGemini:
    """The demo for ``prompt`` on the scripted Gemini API: the same command (with the Gemini
    CLI's ``run_shell_command`` tool), the same answer."""
    return ScriptedGemini([ShellCommand(_command(prompt), text=_LOOK), GeminiText(_answer(prompt))])
