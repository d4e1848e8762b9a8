"""The Codex agent's relay against the raw tool's: a turn of Codex JSONL events read through
the agent (a local node's spawn, its guard, every event converted to the one message model)
against the same stream read from a plain child process and parsed with ``json.loads``.

The producer is a fake ``codex`` that writes a recorded-shape turn (``thread.started``, then
commands started and completed and agent messages, then ``turn.completed``) from a file, so
the measure is the relay, not a model. Run through ``bench/run.py``.
"""

from __future__ import annotations

import argparse
import functools
import json
import stat
import tempfile
import time
from pathlib import Path
from subprocess import PIPE

import anyio

from nodeprov import NodeConfig, NodeHandle, get_agent, get_provider

from .common import Row, compare


def make_turn(directory: Path, count: int, size: int) -> tuple[str, int]:
    """A fake ``codex`` writing one turn of ``count`` items of about ``size`` bytes each (a
    third commands, started and completed; the rest agent messages); returns it and the
    number of events."""
    data = directory / f"turn-{count}-{size}.jsonl"
    text = ("lorem ipsum é ✓ " * (size // 16 + 1))[:size]
    thread = "0199a213-81c0-7800-8aa1-bbab2a035a53"
    events: list[dict[str, object]] = [
        {"type": "thread.started", "thread_id": thread},
        {"type": "turn.started"},
    ]
    for i in range(count):
        if i % 3 == 0:
            item = {"id": f"item_{i}", "type": "command_execution", "command": "bash -lc ls"}
            events.append({"type": "item.started", "item": {**item, "status": "in_progress"}})
            done = {**item, "aggregated_output": text, "exit_code": 0, "status": "completed"}
            events.append({"type": "item.completed", "item": done})
        else:
            events.append(
                {"type": "item.completed", "item": {"id": f"item_{i}", "type": "agent_message", "text": text}}
            )
    usage = {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 5}
    events.append({"type": "turn.completed", "usage": usage})
    data.write_text("".join(json.dumps(event) + "\n" for event in events))
    cli = directory / f"codex-{count}-{size}"
    cli.write_text(f"#!/bin/sh\nexec cat {data}\n")
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    return str(cli), len(events)


async def relay_ours(node: NodeHandle, cli: str, count: int) -> float:
    start = time.perf_counter()
    agent = get_agent("codex", {"cli_path": cli, "ship_cli": False})
    async with agent.session(node) as session:
        seen = sum([1 async for _ in session.turn("go")])
    assert seen >= count, seen  # a command is two messages: its use and its result
    return time.perf_counter() - start


async def relay_raw(cli: str, events: int) -> float:
    start = time.perf_counter()
    seen, pending = 0, b""
    async with await anyio.open_process([cli], stdin=PIPE, stdout=PIPE, stderr=PIPE) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        await process.stdin.aclose()
        async for chunk in process.stdout:
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if line.strip():
                    json.loads(line)
                    seen += 1
        await process.wait()
    assert seen == events, seen
    return time.perf_counter() - start


async def run(args: argparse.Namespace) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with await get_provider("local", root=Path(tmp) / "nodes").provision(NodeConfig()) as node:
            for count, size in ((args.messages, 200), (args.messages // 50, 50_000)):
                cli, events = make_turn(Path(tmp), count, size)
                timing = await compare(
                    args.repeat,
                    functools.partial(relay_ours, node, cli, count),
                    functools.partial(relay_raw, cli, events),
                )
                rows.append(
                    Row(
                        f"codex relay: {count} items of {size} B vs a child process and json.loads",
                        f"{events / timing.ours:,.0f} events/s",
                        f"{events / timing.raw:,.0f} events/s",
                        timing,
                        1.0,
                    )
                )
    return rows
