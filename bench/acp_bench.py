"""The ACP driver's relay against the raw protocol's, per 1,000 messages: a prompt's turn of
``session/update`` notifications read through the ``acp`` agent (a local node's spawn, its
guard, the JSON-RPC reader, every update converted to the one message model) against the
same agent run as a plain child process, sent the same requests and its every line parsed
with ``json.loads`` until the prompt's answer.

The producer is a fake ACP agent (a few lines of Python, :data:`FAKE`) that answers
``initialize`` and ``session/new``, and a ``session/prompt`` by writing a turn rendered
beforehand to a file (runs of ``agent_message_chunk`` broken by a tool call started and
completed: three messages per :data:`RUN` + 2 updates), then the answer: the measure is the
relay, not the producer.

In the same sitting, for the figures to sit side by side: the Codex agent's relay
(:mod:`bench.codex_bench`) and the Claude SDK bridge (:mod:`bench.foundation`, a transport's
messages, not converted to the one model), each against its raw side as its own suite runs
it, reported per 1,000 messages too. Each pair of each row is run once first, uncounted
(imports, caches). Run through ``bench/run.py`` (``--suite acp``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio

from nodeprov import NodeConfig, NodeHandle, get_agent, get_provider

from . import codex_bench, foundation
from .common import Row, Timing, compare

RUN = 8
"""Text chunks in a run, before each tool call."""
SESSION = "acp-bench-session"
PROMPT = 3
"""The id of the prompt's request: the third, after ``initialize`` and ``session/new``."""

FAKE = r"""
import json, sys
turn = open(sys.argv[1], "rb").read()
out = sys.stdout.buffer
while line := sys.stdin.buffer.readline():
    message = json.loads(line)
    method = message.get("method")
    if "id" not in message:
        continue
    if method == "initialize":
        result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
    elif method == "session/new":
        result = {"sessionId": SESSION}
    elif method == "session/prompt":
        out.write(turn)
        result = {"stopReason": "end_turn"}
    else:
        result = None
    out.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode() + b"\n")
    out.flush()
""".replace("SESSION", repr(SESSION))
"""The fake ACP agent: ``python -I -S -c FAKE TURN``, TURN the file of the prompt's updates."""


def make_turn(directory: Path, groups: int, size: int) -> tuple[list[str], int]:
    """A fake ACP agent whose prompt's turn is ``groups`` runs of :data:`RUN` text chunks,
    each run followed by a tool call (``tool_call`` in progress, ``tool_call_update``
    completed), every update with a text of ``size`` bytes; returns its argument vector and
    the number of messages nodeprov makes of the turn (the session's notice, each run's
    text, each call's use and result, the result)."""
    text = ("lorem ipsum é ✓ " * (size // 16 + 1))[:size]

    def update(what: str, **fields: Any) -> str:
        params = {"sessionId": SESSION, "update": {"sessionUpdate": what, **fields}}
        return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}) + "\n"

    lines = []
    for i in range(groups):
        lines += [update("agent_message_chunk", content={"type": "text", "text": text})] * RUN
        call = f"call_{i}"
        lines.append(
            update(
                "tool_call",
                toolCallId=call,
                title="bash -lc ls",
                kind="execute",
                status="in_progress",
                rawInput={"command": "ls"},
            )
        )
        output = [{"type": "content", "content": {"type": "text", "text": text}}]
        lines.append(update("tool_call_update", toolCallId=call, status="completed", content=output))
    data = directory / f"acp-turn-{groups}-{size}.jsonl"
    data.write_text("".join(lines))
    return [sys.executable, "-I", "-S", "-c", FAKE, str(data)], 3 * groups + 2


async def relay_ours(node: NodeHandle, argv: list[str], messages: int) -> float:
    start = time.perf_counter()
    agent = get_agent("acp", {"command": argv})
    async with agent.session(node) as session:
        seen = sum([1 async for _ in session.turn("go")])
    assert seen == messages, seen
    return time.perf_counter() - start


_INFO = {"name": "nodeprov", "title": "nodeprov", "version": "0"}


def _requests(cwd: str) -> bytes:
    """The client's three requests, as nodeprov sends them (written at once here, where
    nodeprov awaits each answer: the fake answers each in turn either way)."""
    capabilities = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
    requests = [
        ("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities, "clientInfo": _INFO}),
        ("session/new", {"cwd": cwd, "mcpServers": []}),
        ("session/prompt", {"sessionId": SESSION, "prompt": [{"type": "text", "text": "go"}]}),
    ]
    return b"".join(
        json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}).encode() + b"\n"
        for number, (method, params) in enumerate(requests, 1)
    )


async def relay_raw(argv: list[str], lines: int) -> float:
    """The fake agent as a plain child process: its requests written, its every line parsed
    until the prompt's answer (``lines`` of them, answers included)."""
    start = time.perf_counter()
    seen, pending, answered = 0, b"", False
    async with await anyio.open_process(argv, stdin=PIPE, stdout=PIPE, stderr=PIPE) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        await process.stdin.send(_requests(os.getcwd()))
        async for chunk in process.stdout:
            *complete, pending = (pending + chunk).split(b"\n")
            for line in complete:
                if line.strip():
                    message = json.loads(line)
                    seen += 1
                    answered = answered or (message.get("id") == PROMPT and "method" not in message)
            if answered:
                break
        await process.stdin.aclose()
        await process.wait()
    assert answered, seen
    assert seen == lines, seen
    return time.perf_counter() - start


async def _messages_of_codex(node: NodeHandle, cli: str) -> int:
    """The messages a Codex turn makes (the session's notice and the result among them)."""
    async with get_agent("codex", {"cli_path": cli, "ship_cli": False}).session(node) as session:
        return sum([1 async for _ in session.turn("go")])


def _row(name: str, messages: int, timing: Timing, goal: float | None = None) -> Row:
    per = 1e6 / messages  # seconds per message to milliseconds per 1,000 messages
    return Row(name, f"{timing.ours * per:.2f} ms/1k msg", f"{timing.raw * per:.2f} ms/1k msg", timing, goal)


async def _compared(
    repeat: int, ours: Callable[[], Awaitable[float]], raw: Callable[[], Awaitable[float]]
) -> Timing:
    await ours()  # once first, not counted: what is imported and cached on first use
    await raw()
    return await compare(repeat, ours, raw)


async def run(args: argparse.Namespace) -> list[Row]:
    os.environ["CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK"] = "1"
    rows = []
    sizes = ((args.messages, 200), (args.messages // 50, 50_000))
    with tempfile.TemporaryDirectory() as tmp:
        async with await get_provider("local", root=Path(tmp) / "nodes").provision(NodeConfig()) as node:
            for count, size in sizes:
                groups = count // 3
                argv, messages = make_turn(Path(tmp), groups, size)
                timing = await _compared(
                    args.repeat,
                    functools.partial(relay_ours, node, argv, messages),
                    functools.partial(relay_raw, argv, groups * (RUN + 2) + 3),
                )
                rows.append(
                    _row(
                        f"acp relay: {messages:,} messages ({groups * (RUN + 2):,} updates of {size} B) "
                        "vs a child process and json.loads",
                        messages,
                        timing,
                    )
                )
            for count, size in sizes:
                items = count * 3 // 4  # a third are commands, two messages each
                cli, events = codex_bench.make_turn(Path(tmp), items, size)
                messages = await _messages_of_codex(node, cli)
                timing = await _compared(
                    args.repeat,
                    functools.partial(codex_bench.relay_ours, node, cli, items),
                    functools.partial(codex_bench.relay_raw, cli, events),
                )
                rows.append(
                    _row(
                        f"codex relay: {messages:,} messages ({events:,} events of {size} B), same sitting",
                        messages,
                        timing,
                        1.0,
                    )
                )
            for count, size in sizes:
                cli = foundation.make_stream(Path(tmp), count, size)
                timing = await _compared(
                    args.repeat,
                    functools.partial(foundation.bridge_ours, node, cli, count),
                    functools.partial(foundation.bridge_sdk, cli, count),
                )
                rows.append(
                    _row(
                        f"claude bridge: {count:,} messages of {size} B vs the SDK's transport, same sitting",
                        count,
                        timing,
                        1.0,
                    )
                )
    return rows
