"""The SDK bridge against the SDK's own subprocess transport, and against hostile processes.

The "CLI" here is a small script standing in for Claude Code on a local node, so that each
misbehaviour can be produced on purpose; the real CLI is exercised in integration/.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions, PermissionResultAllow, query
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
from claude_agent_sdk.types import _configure_can_use_tool

from nodeprov import (
    AgentError,
    AgentExitError,
    AgentOutputError,
    ConfigError,
    NodeConfig,
    NodeGoneError,
    NodeHandle,
    SpawnedProcess,
    SpawnOptions,
    StopPolicy,
    get_provider,
)
from nodeprov.agents._guard import GUARD_NAME
from nodeprov.agents.claude import NodeTransport
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until

pytestmark = pytest.mark.anyio

FAST_STOP = StopPolicy(eof_grace=0.3, term_grace=0.5, kill_grace=5)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as node:
        yield node


def script(tmp_path: Path, name: str, body: str, interpreter: str = "/bin/sh") -> str:
    path = tmp_path / name
    path.write_text(f"#!{interpreter}\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


async def drain(transport: NodeTransport) -> list[dict[str, Any]]:
    return [message async for message in transport.read_messages()]


def unguard(options: SpawnOptions, policy: StopPolicy) -> list[str]:
    """The command inside the stdin guard that ``options`` run; checks the guard's settings."""
    assert options.argv[:2] == ["/bin/sh", "-c"]
    assert options.argv[3] == GUARD_NAME
    marker, grace, term_grace, _pwd, _shlvl, _mark, _watcher, *inner = options.argv[4:]
    assert marker.startswith("nodeprov-end-input-")
    assert len(marker) > len("nodeprov-end-input-") + 16
    # The guard acts only after the stop policy's own EOF and SIGTERM steps.
    assert float(grace) == policy.eof_grace + policy.term_grace
    assert float(term_grace) == policy.term_grace
    return inner


async def assert_gone(marker: str) -> None:
    async def gone() -> bool:
        return not host_processes_matching(marker)

    await wait_until(gone, 10)
    assert host_processes_matching(marker) == []


# -- the same command line and environment as the SDK's own transport -----------------


async def _allow(*_: Any) -> PermissionResultAllow:
    return PermissionResultAllow()


OPTION_MATRIX: list[dict[str, Any]] = [
    {},
    {"system_prompt": "be brief; don't $(rm -rf /)"},
    {"system_prompt": {"type": "preset", "preset": "claude_code", "append": "extra\nline"}},
    {"system_prompt": {"type": "file", "path": "/etc/prompt.md"}},
    {"tools": ["Bash", "Read"]},
    {"tools": []},
    {"tools": {"type": "preset", "preset": "claude_code"}},
    {"allowed_tools": ["Bash(git:*)", "Read"], "disallowed_tools": ["WebFetch"]},
    {"max_turns": 3, "max_budget_usd": 1.25, "task_budget": {"total": 5000}},
    {"model": "claude-sonnet-4-5", "fallback_model": "claude-haiku-4-5", "betas": ["context-1m-2025-08-07"]},
    {"permission_mode": "bypassPermissions"},
    {"permission_mode": "acceptEdits", "continue_conversation": True},
    {"resume": "--dangerous-looking-id", "fork_session": True},
    {"resume": "8a1b0c3e-0000-4000-8000-000000000000", "resume_session_at": "msg-uuid"},
    {"session_id": "11111111-2222-4333-8444-555555555555"},
    {"settings": '{"env": {"A": "1"}}', "sandbox": {"enabled": True}},
    {"settings": "/etc/claude/settings.json"},
    {"add_dirs": ["/srv/a", "/srv/b c"]},
    {"mcp_servers": {"fs": {"type": "stdio", "command": "mcp-fs", "args": ["--root", "/"]}}},
    {"mcp_servers": "/etc/mcp.json", "strict_mcp_config": True},
    {"include_partial_messages": True, "include_hook_events": True},
    {"setting_sources": ["user", "project", "local"]},
    {"plugins": [{"type": "local", "path": "/opt/plugin"}]},
    {"extra_args": {"debug-to-stderr": None, "some-flag": "-dash-value", "other": "plain"}},
    {"thinking": {"type": "adaptive"}},
    {"thinking": {"type": "enabled", "budget_tokens": 2048}},
    {"thinking": {"type": "disabled"}},
    {"max_thinking_tokens": 4096, "effort": "high"},
    {
        "output_format": {
            "type": "json_schema",
            "schema": {"type": "object", "properties": {"x": {"type": "string"}}},
        }
    },
    {"skills": ["pdf", "plugin:review"]},
    {"skills": "all"},
    {"can_use_tool": _allow},
    {"client_app": "my-control-plane/1.0", "enable_file_checkpointing": True},
    {"env": {"MY_VAR": "1", "CLAUDE_CODE_ENTRYPOINT": "custom"}},
    {"max_buffer_size": 4096, "cwd": "."},
]

RECORDER = """
import json, os, sys
with open(os.environ["RECORD_TO"], "w") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ)}, f)
"""


async def _record_sdk(options: ClaudeAgentOptions, cli: str, record: Path) -> dict[str, Any]:
    transport = SubprocessCLITransport(
        prompt="", options=replace(_configure_can_use_tool(options), cli_path=cli)
    )
    await transport.connect()
    try:
        async for _ in transport.read_messages():
            pass
    finally:
        await transport.close()
    return dict(json.loads(await anyio.Path(record).read_text()))


async def _record_ours(
    options: ClaudeAgentOptions, cli: str, node: NodeHandle, record: Path, **kwargs: Any
) -> tuple[dict[str, Any], SpawnOptions]:
    """What the process recorded, and the options the transport spawned it with."""
    spawned: list[SpawnOptions] = []

    async def spawn(spawn_options: SpawnOptions) -> SpawnedProcess:
        spawned.append(spawn_options)
        return await node.spawn(spawn_options)

    transport = NodeTransport(spawn, options, cli_path=cli, **kwargs)
    await transport.connect()
    try:
        await drain(transport)
    finally:
        await transport.close()
    [spawn_options] = spawned
    return dict(json.loads(await anyio.Path(record).read_text())), spawn_options


@pytest.mark.parametrize("fields", OPTION_MATRIX, ids=lambda f: ",".join(f) or "defaults")
async def test_command_and_env_match_the_sdk_transport(
    fields: dict[str, Any], node: NodeHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = "canary-" + os.urandom(8).hex()
    monkeypatch.setenv("NODEPROV_CANARY_SECRET", canary)
    cli = script(tmp_path, "recorder", RECORDER, interpreter=sys.executable)
    fields = dict(fields)
    if fields.get("cwd") == ".":
        fields["cwd"] = node.workdir
    sdk_record, our_record = tmp_path / "sdk.json", tmp_path / "ours.json"
    env = {**fields.pop("env", {}), "RECORD_TO": str(sdk_record)}
    sdk = await _record_sdk(ClaudeAgentOptions(**fields, env=env), cli, sdk_record)
    env["RECORD_TO"] = str(our_record)
    ours, spawned = await _record_ours(ClaudeAgentOptions(**fields, env=env), cli, node, our_record)

    # The spawn wraps the command in the stdin guard; inside it is the SDK's own command,
    # and that, exec'd by the guard, is what the process runs.
    assert unguard(spawned, StopPolicy()) == sdk["argv"]
    assert ours["argv"] == sdk["argv"]
    sdk_env, our_env = sdk["env"], ours["env"]
    sdk_env.pop("RECORD_TO"), our_env.pop("RECORD_TO")
    # What the SDK sets itself (not inherited from this process) reaches ours unchanged...
    set_by_sdk = {k: v for k, v in sdk_env.items() if os.environ.get(k) != v}
    set_by_sdk.pop("LC_CTYPE", None)  # Python's own locale coercion in the recorder
    assert {k: our_env.get(k) for k in set_by_sdk} == set_by_sdk
    # ...and nothing else does, least of all this process's environment: only the guard's mark.
    assert set(our_env) - set(set_by_sdk) - set(node.base_env) - {"LC_CTYPE"} == {"NODEPROV_GUARD"}
    assert canary not in json.dumps(our_env)


async def test_unguarded_the_spawn_is_the_sdks_command(node: NodeHandle, tmp_path: Path) -> None:
    cli = script(tmp_path, "recorder", RECORDER, interpreter=sys.executable)
    sdk_record, our_record = tmp_path / "sdk.json", tmp_path / "ours.json"
    fields: dict[str, Any] = {"model": "claude-sonnet-4-5", "cwd": node.workdir}
    sdk = await _record_sdk(ClaudeAgentOptions(**fields, env={"RECORD_TO": str(sdk_record)}), cli, sdk_record)
    options = ClaudeAgentOptions(**fields, env={"RECORD_TO": str(our_record)})
    ours, spawned = await _record_ours(options, cli, node, our_record, guard=False)
    assert spawned.argv == sdk["argv"] == ours["argv"]
    assert spawned.env["PWD"] == node.workdir


async def test_the_guard_follows_the_stop_policy(node: NodeHandle, tmp_path: Path) -> None:
    cli = script(tmp_path, "recorder", RECORDER, interpreter=sys.executable)
    record = tmp_path / "ours.json"
    options = ClaudeAgentOptions(env={"RECORD_TO": str(record)})
    policy = StopPolicy(eof_grace=1.5, term_grace=2.25, kill_grace=1)
    _, spawned = await _record_ours(options, cli, node, record, stop_policy=policy)
    assert unguard(spawned, policy)[0] == cli


async def test_inconsistent_options_are_a_config_error(node: NodeHandle) -> None:
    options = ClaudeAgentOptions(can_use_tool=_allow, permission_prompt_tool_name="mcp__x")
    with pytest.raises(ConfigError, match="can_use_tool"):
        await NodeTransport(node.spawn, options).connect()
    with pytest.raises(ConfigError, match="user"):
        await NodeTransport(node.spawn, ClaudeAgentOptions(user="nobody")).connect()


async def test_cli_path_defaults(node: NodeHandle, tmp_path: Path) -> None:
    assert NodeTransport(node.spawn).cli_path == "claude"
    assert NodeTransport(node.spawn, ClaudeAgentOptions(cli_path="/x/claude")).cli_path == "/x/claude"
    assert NodeTransport.for_node(node).cli_path == "claude"  # on the node's PATH
    assert NodeTransport.for_node(node, cli_path="/y").cli_path == "/y"
    provider = get_provider("local", root=tmp_path / "tooled")
    async with await provider.provision(NodeConfig(tools={"claude": "/opt/here/claude"})) as tooled:
        assert NodeTransport.for_node(tooled).cli_path == "/opt/here/claude"  # a tool of the node


# -- framing --------------------------------------------------------------------------


async def test_lines_split_across_chunks_and_non_json_lines(node: NodeHandle, tmp_path: Path) -> None:
    big = "x" * 200_000
    body = f"""
printf '{{"type": "a", "v": "{big}"}}\\n'
printf 'not json, skipped like the SDK does\\n\\n'
printf '{{"type": "b", "s": "caf\\303\\251"}}\\r\\n{{"type": "c"}}'
"""
    transport = NodeTransport(node.spawn, cli_path=script(tmp_path, "cli", body), stop_policy=FAST_STOP)
    await transport.connect()
    try:
        messages = await drain(transport)
    finally:
        await transport.close()
    assert [m["type"] for m in messages] == ["a", "b", "c"]
    assert messages[0]["v"] == big
    assert messages[1]["s"] == "café"


async def test_stderr_is_drained_and_forwarded(node: NodeHandle, tmp_path: Path) -> None:
    lines: list[str] = []
    # 1 MB of stderr would block a process whose stderr nobody reads.
    body = "{ head -c 1000000 /dev/zero | tr '\\0' 'e' | fold -w 1000; echo; echo last words; } >&2"
    options = ClaudeAgentOptions(stderr=lines.append)
    transport = NodeTransport(node.spawn, options, cli_path=script(tmp_path, "cli", body))
    await transport.connect()
    with anyio.fail_after(30):
        assert await drain(transport) == []
    await transport.close()
    assert lines[-1] == "last words"
    assert len(lines) > 1000
    assert transport.stderr_tail.endswith("last words")


# -- bad input from the spawned side: a clear error, bounded time, nothing left -----------

BAD_OUTPUT = {
    "extra_data_after_object": ('printf \'{"type": "a"} trailing\\n\'', AgentOutputError, "extra data"),
    "malformed_json": ("printf '{\"type\": broken\\n'", AgentOutputError, "not valid JSON"),
    "invalid_utf8": ('printf \'{"type": "\\377\\376"}\\n\'', AgentOutputError, "UTF-8"),
    "line_over_cap": ("head -c 100000 /dev/zero | tr '\\0' 'a'", AgentOutputError, "exceeds the limit"),
    "closes_stdout_keeps_running": ("exec 1>&-", AgentExitError, "still running"),
}


@pytest.mark.parametrize("case", BAD_OUTPUT)
async def test_bad_output_is_a_clear_error(case: str, node: NodeHandle, tmp_path: Path) -> None:
    produce, error, message = BAD_OUTPUT[case]
    marker = unique_marker()
    cli = script(tmp_path, "cli", f"{produce}\nsleep {marker}")
    transport = NodeTransport(
        node.spawn,
        ClaudeAgentOptions(max_buffer_size=65536),
        cli_path=cli,
        stop_policy=FAST_STOP,
        exit_timeout=1.0,
    )
    await transport.connect()
    with anyio.fail_after(20):
        with pytest.raises(error, match=message):
            await drain(transport)
        await transport.close()
    await assert_gone(marker)


async def test_exit_nonzero_at_start_through_query(node: NodeHandle, tmp_path: Path) -> None:
    cli = script(tmp_path, "cli", "echo 'fatal: no credentials' >&2; exit 7")
    transport = NodeTransport(node.spawn, cli_path=cli, stop_policy=FAST_STOP)
    with anyio.fail_after(30), pytest.raises(AgentExitError) as caught:
        async for _ in query(prompt="hi", transport=transport):
            pass
    assert caught.value.exit_code == 7
    assert "no credentials" in str(caught.value)


async def test_never_exits_and_ignores_sigterm(node: NodeHandle, tmp_path: Path) -> None:
    marker = unique_marker()
    cli = script(tmp_path, "cli", f"trap '' TERM; exec 0<&-; sleep {marker} & sleep {marker}; wait")
    transport = NodeTransport(node.spawn, cli_path=cli, stop_policy=FAST_STOP)
    await transport.connect()
    process = transport.process
    assert process is not None

    async def both_running() -> bool:
        return len(host_processes_matching(marker)) >= 2

    assert await wait_until(both_running, 30)
    with anyio.fail_after(FAST_STOP.total + 10):
        await transport.close()
    assert process.returncode == -9
    await assert_gone(marker)
    await transport.close()  # idempotent


async def test_close_is_bounded_even_when_cancelled(node: NodeHandle, tmp_path: Path) -> None:
    marker = unique_marker()
    cli = script(tmp_path, "cli", f"trap '' TERM; sleep {marker}")
    transport = NodeTransport(node.spawn, cli_path=cli, stop_policy=FAST_STOP)
    await transport.connect()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await transport.close()  # shielded: runs to the end despite the cancelled scope
    await assert_gone(marker)


async def test_write_after_exit_is_a_clear_error(node: NodeHandle, tmp_path: Path) -> None:
    transport = NodeTransport(node.spawn, cli_path=script(tmp_path, "cli", "exit 0"))
    await transport.connect()
    assert await drain(transport) == []
    with pytest.raises(AgentExitError, match="exited"):
        await transport.write('{"type": "user"}\n')
    await transport.close()


@pytest.mark.parametrize("guard", [True, False])
async def test_end_input_is_eof_for_the_agent(guard: bool, node: NodeHandle, tmp_path: Path) -> None:
    # The "CLI" echoes its input, says when its stdin ends, then keeps running for longer
    # than the guard's grace: it is not stopped, since the channel stays open.
    cli = script(tmp_path, "cli", 'cat; echo \'{"type": "eof"}\'; sleep 1.5; echo \'{"type": "after"}\'')
    transport = NodeTransport(node.spawn, cli_path=cli, stop_policy=FAST_STOP, guard=guard)
    await transport.connect()
    try:
        await transport.write('{"type": "one"}\n')
        await transport.write('{"type": "two"}\n')
        await transport.end_input()
        await transport.end_input()  # idempotent
        with pytest.raises(AgentError, match="input"):
            await transport.write('{"type": "late"}\n')
        with anyio.fail_after(20):
            messages = await drain(transport)
    finally:
        await transport.close()
    assert [m["type"] for m in messages] == ["one", "two", "eof", "after"]
    assert transport.stderr_tail == ""


async def test_option_secrets_reach_the_cli_as_private_files_not_arguments(
    node: NodeHandle, tmp_path: Path
) -> None:
    """MCP server env and settings may hold credentials: they reach the CLI as 0600 files on
    the node (removed when the transport closes), never in its arguments."""
    canary = f"canary-{secrets.token_hex(8)}"
    report = tmp_path / "report"
    cli = script(
        tmp_path,
        "cli",
        f"""printf '%s\\n' "$@" > {report}.argv
        while [ $# -gt 1 ]; do
          case $1 in
            --mcp-config|--settings) echo "$1 $(stat -c %a "$2") $2 $(cat "$2")" >> {report}.files ;;
          esac
          shift
        done
        mv {report}.files {report}
        exec cat > /dev/null""",
    )
    options = ClaudeAgentOptions(
        cli_path=cli,
        mcp_servers={"db": {"type": "stdio", "command": "db-server", "env": {"DB_TOKEN": canary}}},
        settings=json.dumps({"env": {"SETTING_TOKEN": canary}}),
    )
    transport = NodeTransport.for_node(node, options, stop_policy=FAST_STOP)
    await transport.connect()
    try:
        assert await wait_until(lambda: anyio.Path(report).exists(), 10)
        assert canary not in (tmp_path / "report.argv").read_text()
        assert host_processes_matching(canary) == []
        files = [line.split(" ", 3) for line in report.read_text().splitlines()]
        assert sorted((flag, mode) for flag, mode, _, _ in files) == [
            ("--mcp-config", "600"),
            ("--settings", "600"),
        ]
        assert all(canary in content for *_, content in files)
        assert all(path.startswith(f"{node.base_env['HOME']}/.nodeprov/") for _, _, path, _ in files)
    finally:
        await transport.close()
    assert not [path for _, _, path, _ in files if await anyio.Path(path).exists()]


async def test_a_stop_that_fails_still_removes_the_option_files(node: NodeHandle, tmp_path: Path) -> None:
    """Stopping the CLI on a node that stopped answering raises in the provider: the close
    neither raises nor skips removing the 0600 files that hold the option secrets."""
    spawn = node.spawn

    async def spawn_failing_to_stop(options: SpawnOptions) -> SpawnedProcess:
        process = await spawn(options)
        if cli not in options.argv:  # not the agent: the file writes, the removal
            return process
        stop = process.aclose

        async def aclose() -> None:
            await stop()
            raise NodeGoneError(f"node {node.node_id}: the exec connection was lost")

        process.aclose = aclose  # type: ignore[method-assign]
        return process

    report = tmp_path / "report"
    cli = script(
        tmp_path,
        "cli",
        f"""while [ "$1" != --settings ]; do shift; done
        echo "$2" > {report}.tmp; mv {report}.tmp {report}; exec cat >/dev/null""",
    )
    node.spawn = spawn_failing_to_stop  # type: ignore[method-assign]
    options = ClaudeAgentOptions(cli_path=cli, settings=json.dumps({"env": {"TOKEN": "secret"}}))
    transport = NodeTransport.for_node(node, options, stop_policy=FAST_STOP)
    await transport.connect()
    assert await wait_until(lambda: anyio.Path(report).exists(), 10)
    settings_file = anyio.Path(report.read_text().strip())
    assert await settings_file.exists()
    await transport.close()
    assert not await settings_file.exists()
