"""What nodeprov does around the Claude Code CLI without the SDK (``sdk_parity``) is what the
SDK's own does, over generated inputs: the argument vector and environment, the project
directory's name, a transcript file's session key, and the session summary."""

from __future__ import annotations

import string
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, fold_session_summary
from claude_agent_sdk._internal.session_store import file_path_to_session_key
from claude_agent_sdk._internal.sessions import _sanitize_path
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nodeprov.agents.claude.command import agent_command, agent_environment
from nodeprov.agents.claude.sdk_parity import (
    PERMISSION_MODES,
    cli_argv,
    cli_environment,
    fold_summary,
    sanitize_path,
    session_key,
)

# Values as a caller gives them: some start with '-', some hold spaces, commas or quotes.
_text = st.text(alphabet=string.ascii_letters + string.digits + " -_,'\"=/.é", max_size=12)
_maybe_text = st.none() | _text
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    model=_maybe_text,
    permission=st.sampled_from(sorted(PERMISSION_MODES)),
    max_turns=st.none() | st.integers(min_value=1, max_value=50),
    allowed_tools=st.lists(_text, max_size=3),
    disallowed_tools=st.lists(_text, max_size=3),
    system_prompt=_maybe_text,
    mcp_servers=st.dictionaries(_text, st.dictionaries(_text, _json, max_size=3), max_size=2),
    output_schema=st.none() | st.dictionaries(_text, _json, max_size=3),
    resume=_maybe_text,
    mirror=st.booleans(),
)
def test_the_argument_vector_is_the_sdks(
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
) -> None:
    ours = cli_argv(
        "/opt/claude",
        model=model,
        permission=permission,
        max_turns=max_turns,
        allowed_tools=allowed_tools,
        disallowed_tools=disallowed_tools,
        system_prompt=system_prompt,
        mcp_servers=mcp_servers,
        output_schema=output_schema,
        resume=resume,
        mirror=mirror,
    )
    options = ClaudeAgentOptions(
        model=model,
        permission_mode=PERMISSION_MODES[permission],  # type: ignore[arg-type]
        max_turns=max_turns,
        allowed_tools=allowed_tools,
        disallowed_tools=disallowed_tools,
        system_prompt=system_prompt,
        mcp_servers=mcp_servers,  # type: ignore[arg-type]
        output_format={"type": "json_schema", "schema": output_schema} if output_schema is not None else None,
        resume=resume,
        session_store=_AnyStore() if mirror else None,  # type: ignore[arg-type]
    )
    assert ours == agent_command(options, "/opt/claude")


class _AnyStore:
    """A session store as far as the SDK's command builder looks: there is one."""


@settings(max_examples=200, deadline=None)
@given(
    env=st.dictionaries(
        st.sampled_from(
            [
                "A",
                "PATH",
                "CLAUDE_AGENT_SDK_CLIENT_APP",
                "CLAUDE_AGENT_SDK_DERIVED_CLIENT_APP",
                "claude_code_sdk_reads_session_state",
                "PWD",
            ]
        ),
        _text,
    ),
    cwd=st.none() | st.just("/work/space"),
)
def test_the_environment_is_the_sdks(env: dict[str, str], cwd: str | None) -> None:
    assert cli_environment(env, cwd) == agent_environment(ClaudeAgentOptions(env=env, cwd=cwd))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300) | st.text(alphabet="/ab.-é", min_size=190, max_size=260))
def test_the_project_directory_name_is_the_sdks(path: str) -> None:
    assert sanitize_path(path) == _sanitize_path(path)


_part = st.sampled_from(
    ["p", "-root-w", "s1", "s1.jsonl", "subagents", "agent-1.jsonl", "..", ".", "", "x.json"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_part, max_size=6), st.sampled_from(["/h/.claude/projects", "/h/.claude/projects/", "/h"]))
def test_the_session_key_of_a_transcript_file_is_the_sdks(parts: list[str], projects: str) -> None:
    path = "/h/.claude/projects/" + "/".join(parts)
    assert session_key(path, projects) == file_path_to_session_key(path, projects)


_entry = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["user", "assistant", "tag", "summary"]),
        "timestamp": st.sampled_from(
            ["2026-11-28T07:00:00.000Z", "2026-11-28T07:00:00+02:00", "yesterday", 5]
        ),
        "isSidechain": st.booleans(),
        "cwd": st.sampled_from(["", "/w", 3]),
        "isMeta": st.booleans(),
        "isCompactSummary": st.booleans(),
        "customTitle": _maybe_text,
        "aiTitle": _text,
        "lastPrompt": _text,
        "summary": _text,
        "gitBranch": _maybe_text,
        "tag": st.sampled_from(["", "t", None]),
        "message": st.fixed_dictionaries(
            {},
            optional={
                "content": st.sampled_from(
                    ["", "  hello\nthere ", "x" * 250, "<command-name>/review</command-name>", "<tick>", 7]
                )
                | st.lists(
                    st.sampled_from(
                        [
                            {"type": "text", "text": "fix the bug"},
                            {"type": "text", "text": "<local-command-stdout>ok"},
                            {"type": "tool_result", "content": "done"},
                            {"type": "image"},
                            "text",
                        ]
                    ),
                    max_size=3,
                )
            },
        ),
    },
)


def _prompt(content: Any, **more: Any) -> dict[str, Any]:
    return {"type": "user", "message": {"content": content}, **more}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_entry, max_size=4), min_size=1, max_size=3))
@example(
    [
        [_prompt("<command-name>/review</command-name>"), _prompt("<tick>"), _prompt("hi", isMeta=True)],
        [_prompt([{"type": "tool_result"}]), _prompt(" " + "y" * 199 + " z" * 3)],
        [{"type": "tag", "tag": "t"}, _prompt("later")],
    ]
)
def test_the_session_summary_is_the_sdks(batches: list[list[dict[str, Any]]]) -> None:
    key: Any = {"project_key": "p", "session_id": "s"}
    ours: Any = None
    theirs: Any = None
    for batch in batches:  # folded batch by batch, as appends come
        ours = fold_summary(ours, key, batch)
        theirs = fold_session_summary(theirs, key, batch)  # type: ignore[arg-type]
        assert ours == theirs
