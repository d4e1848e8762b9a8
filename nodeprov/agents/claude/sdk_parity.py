"""What the Claude Agent SDK does around the Claude Code CLI, done here without importing
the SDK: importing it takes most of a second (its ``mcp`` dependency builds hundreds of
pydantic models), which a run paid before its agent could start.

Each function gives what the SDK's own gives for the same input, and
``tests/test_claude_parity.py`` checks them against the SDK over generated inputs (the SDK
is pinned by a version range in ``pyproject.toml``): the CLI's argument vector and
environment for the options a :class:`~nodeprov.agents.claude.ClaudeAgent` has, the
directory name the CLI gives a working directory, the session key of a transcript file, and
the session summary folded over transcript entries.
"""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import datetime
from functools import cache
from importlib.metadata import version
from pathlib import PurePath
from typing import Any

from ...store.entries import EntryKey, Summary

__all__ = [
    "PERMISSION_MODES",
    "cli_argv",
    "cli_environment",
    "fold_summary",
    "sanitize_path",
    "session_key",
    "trace_context",
]

PERMISSION_MODES = {"read-only": "plan", "edit": "acceptEdits", "full": "bypassPermissions"}
"""nodeprov's permissions as the CLI's ``--permission-mode``."""

_SESSION_STATE_ENV = "CLAUDE_CODE_SDK_READS_SESSION_STATE"
_DERIVED_CLIENT_APP_ENV = "CLAUDE_AGENT_SDK_DERIVED_CLIENT_APP"


def cli_argv(
    cli_path: str,
    *,
    model: str | None,
    permission: str,
    max_turns: int | None,
    allowed_tools: list[str],
    disallowed_tools: list[str],
    system_prompt: str | None,
    mcp_servers: dict[str, dict[str, Any]],
    output_schema: dict[str, Any] | None,
    resume: str | None,
    mirror: bool,
) -> list[str]:
    """The argument vector the SDK's subprocess transport runs for these options (``mirror``:
    a session store is set, so the CLI mirrors its transcript on stdout)."""
    argv = [cli_path, "--output-format", "stream-json", "--verbose", "--system-prompt", system_prompt or ""]
    if allowed_tools:
        argv += ["--allowedTools", ",".join(allowed_tools)]
    if max_turns:
        argv += ["--max-turns", str(max_turns)]
    if disallowed_tools:
        argv += ["--disallowedTools", ",".join(disallowed_tools)]
    if model:
        argv += ["--model", model]
    argv += ["--permission-mode", PERMISSION_MODES[permission]]
    if resume:
        argv.append(f"--resume={resume}")  # one token: a value starting with '-' stays a value
    if mcp_servers:
        argv += ["--mcp-config", json.dumps({"mcpServers": mcp_servers})]
    if mirror:
        argv.append("--session-mirror")
    if output_schema is not None:
        argv += ["--json-schema", json.dumps(output_schema)]
    return [*argv, "--input-format", "stream-json"]


@cache
def _sdk_version() -> str:
    return version("claude-agent-sdk")


def cli_environment(env: dict[str, str], cwd: str | None) -> dict[str, str]:
    """The environment the SDK gives the CLI for ``env`` and ``cwd``, less the control
    plane's own; with the active trace context (:func:`trace_context`) where ``env`` does
    not set it."""
    merged = {"CLAUDE_CODE_ENTRYPOINT": "sdk-py", **env, "CLAUDE_AGENT_SDK_VERSION": _sdk_version()}
    merged.pop(_DERIVED_CLIENT_APP_ENV, None)
    if not any(key.upper() == _SESSION_STATE_ENV for key in merged):
        merged[_SESSION_STATE_ENV] = "1"
    if cwd:
        merged["PWD"] = cwd
    merged.update({name: value for name, value in trace_context().items() if name not in env})
    return merged


def trace_context() -> dict[str, str]:
    """The active OpenTelemetry trace context, as the SDK propagates it to the CLI (if
    OpenTelemetry is installed). A context can be active only where OpenTelemetry was
    imported: elsewhere its import (tens of milliseconds) is spared."""
    if "opentelemetry" not in sys.modules:
        return {}
    try:
        from opentelemetry import propagate  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k.upper(): v for k, v in carrier.items()} if "traceparent" in carrier else {}


_SANITIZE = re.compile(r"[^a-zA-Z0-9]")
_MAX_SANITIZED = 200


def sanitize_path(name: str) -> str:
    """The directory name the CLI gives the working directory ``name`` under ``projects``."""
    sanitized = _SANITIZE.sub("-", name)
    if len(sanitized) <= _MAX_SANITIZED:
        return sanitized
    digest = 0
    for char in name:  # JavaScript's 32-bit string hash, as the CLI computes it
        digest = ((digest << 5) - digest + ord(char)) & 0xFFFFFFFF
    if digest >= 0x80000000:
        digest -= 0x100000000
    return f"{sanitized[:_MAX_SANITIZED]}-{_base36(abs(digest))}"


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, digit = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
        if not number:
            return digits


def session_key(file_path: str, projects_dir: str) -> EntryKey | None:
    """The session key of the transcript file ``file_path`` (``PROJECT/SESSION.jsonl``, or
    ``PROJECT/SESSION/subagents/.../agent-ID.jsonl``) under ``projects_dir``; None for a
    file elsewhere or of another shape."""
    relative = PurePath(os.path.relpath(file_path, projects_dir))
    parts = list(relative.parts)
    if len(parts) < 2 or parts[0] == ".." or relative.is_absolute():
        return None
    project, second = parts[0], parts[1]
    if len(parts) == 2:
        if not second.endswith(".jsonl"):
            return None
        return {"project_key": project, "session_id": second.removesuffix(".jsonl")}
    if len(parts) < 4:
        return None
    subpath = [*parts[2:-1], parts[-1].removesuffix(".jsonl")]
    return {"project_key": project, "session_id": second, "subpath": "/".join(subpath)}


# Entry fields whose last value the summary keeps, by the summary's name for them.
_LAST_WINS = {
    "customTitle": "custom_title",
    "aiTitle": "ai_title",
    "lastPrompt": "last_prompt",
    "summary": "summary_hint",
    "gitBranch": "git_branch",
}
_SKIP_FIRST_PROMPT = re.compile(
    r"^(?:<local-command-stdout>|<session-start-hook>|<tick>|<goal>|"
    r"\[Request interrupted by user[^\]]*\]|"
    r"\s*<ide_opened_file>[\s\S]*</ide_opened_file>\s*$|"
    r"\s*<ide_selection>[\s\S]*</ide_selection>\s*$)"
)
_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>")


def fold_summary(previous: Summary | None, key: EntryKey, entries: list[Any]) -> Summary:
    """The SDK's session summary (``fold_session_summary``) of ``key``, ``previous`` folded
    over ``entries`` (a :data:`~nodeprov.store.entries.Fold`)."""
    if previous is not None:
        data = dict(previous["data"])
        summary: Summary = {"session_id": previous["session_id"], "mtime": previous["mtime"], "data": data}
    else:
        summary = {"session_id": key["session_id"], "mtime": 0, "data": {}}
    data = summary["data"]
    for entry in entries:
        millis = _epoch_millis(entry.get("timestamp"))
        data.setdefault("is_sidechain", entry.get("isSidechain") is True)
        if "created_at" not in data and millis is not None:
            data["created_at"] = millis
        cwd = entry.get("cwd")
        if "cwd" not in data and isinstance(cwd, str) and cwd:
            data["cwd"] = cwd
        _fold_first_prompt(data, entry)
        for field, name in _LAST_WINS.items():
            if isinstance(value := entry.get(field), str):
                data[name] = value
        if entry.get("type") == "tag":
            tag = entry.get("tag")
            if isinstance(tag, str) and tag:
                data["tag"] = tag
            else:
                data.pop("tag", None)  # an empty or absent tag clears it
    return summary


def _epoch_millis(stamp: Any) -> int | None:
    if not isinstance(stamp, str):
        return None
    try:
        parsed = datetime.fromisoformat(stamp[:-1] + "+00:00" if stamp.endswith("Z") else stamp)
    except ValueError:
        return None
    return int(parsed.timestamp() * 1000)


def _fold_first_prompt(data: dict[str, Any], entry: dict[str, Any]) -> None:
    """The session's first real prompt: not a tool result, a meta or compaction entry, or
    one of the CLI's own; a slash command's name stands in until one comes."""
    if data.get("first_prompt_locked") or entry.get("type") != "user":
        return
    if entry.get("isMeta") is True or entry.get("isCompactSummary") is True:
        return
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    ):
        return
    for text in _texts(content):
        said = text.replace("\n", " ").strip()
        if not said:
            continue
        if command := _COMMAND_NAME.search(said):
            if not data.get("command_fallback"):
                data["command_fallback"] = command.group(1)
            continue
        if _SKIP_FIRST_PROMPT.match(said):
            continue
        data["first_prompt"] = said[:200].rstrip() + "\u2026" if len(said) > 200 else said
        data["first_prompt_locked"] = True
        return


def _texts(content: Any) -> list[str]:
    """The text of a user message's content: a string, or its text blocks."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        block["text"]
        for block in content
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    ]
