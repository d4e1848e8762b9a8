"""The control plane at scale: N concurrent runs of a fake agent, against the SDK alone.

Each run's agent (the fake Claude Code CLI, :mod:`nodeprov.testing.fake_agent`) sends
``--messages`` assistant messages of ``--message-bytes`` bytes, ``--interval`` seconds apart,
each with a transcript frame. The baseline is the Claude Agent SDK alone doing the same
work: ``ClaudeSDKClient`` on the same fake CLI in a local subprocess, nothing stored. The
orchestrator runs on the fake provider (processes on this machine) with the store on SQLite
or PostgreSQL, mirroring transcripts eagerly and writing every event, as by default.

Reported per configuration and N: the wall time until every run finished; each run's
duration (start to finish, median and highest) and its ratio to the SDK alone's; the
control plane's CPU per 1000 messages; the relay latency from the agent writing a message
to the caller reading it (p50, p99); and the control plane's memory (Python allocations,
measured in a separate pass with tracemalloc) per live run and per finished run.

Run it with ``make bench-scale`` or ``.venv/bin/python -m bench.scale [--help]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ClaudeSDKClient, ResultMessage, TextBlock

from nodeprov.agents import AgentText
from nodeprov.registry import register_provider
from nodeprov.runs import AgentMessage, Orchestrator, RunFinished
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.fake_provider import FakeProvider

register_provider("fake", FakeProvider)  # a test double: never an installed provider

POSTGRES = os.environ.get(
    "NODEPROV_TEST_POSTGRES_URL", "postgresql://nodeprov:nodeprov@127.0.0.1:5432/nodeprov_test"
)


@dataclass
class Sample:
    """What one pass of N runs measured."""

    durations: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    steady: list[float] = field(default_factory=list)  # those of each run's second half
    starts: list[float] = field(default_factory=list)  # how long start() took, orchestrator only
    messages: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    agents_cpu: float = 0.0  # the agent processes', all together
    live_bytes: float = 0.0  # per run, while every run is live
    finished_bytes: float = 0.0  # per run, once every run finished


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _note_latency(sample: Sample, text: str, seen: int, messages: int) -> None:
    """The relay latency a message's text carries: in all, and in the steady state (the
    second half of the run's ``messages``, far from every run's start-up)."""
    if (delay := _latency(text)) is not None:
        sample.latencies.append(delay)
        if seen > messages // 2:
            sample.steady.append(delay)


def _latency(text: str) -> float | None:
    if not text.startswith("t="):
        return None
    return time.time() - float(text[2:].split(" ", 1)[0])


class _Midpoint:
    """Takes the memory reading once every run has seen half its messages."""

    def __init__(self, runs: int, half: int, measure: bool) -> None:
        self._waiting, self._half, self._measure = runs, half, measure
        self.bytes = 0

    def saw(self, count: int) -> None:
        if count == self._half:
            self._waiting -= 1
            if self._waiting == 0 and self._measure:
                gc.collect()
                self.bytes = tracemalloc.get_traced_memory()[0]


Pass = Callable[[int, "_Midpoint", Sample], Awaitable[None]]


async def _measure(runs: int, args: argparse.Namespace, one_pass: Pass, *, memory: bool) -> Sample:
    sample = Sample()
    if memory:
        gc.collect()
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0] if memory else 0
    midpoint = _Midpoint(runs, args.messages // 2, memory)
    cpu, wall, agents = time.process_time(), time.perf_counter(), _children_cpu()
    await one_pass(runs, midpoint, sample)
    sample.wall, sample.cpu = time.perf_counter() - wall, time.process_time() - cpu
    sample.agents_cpu = _children_cpu() - agents
    if memory:
        gc.collect()
        sample.live_bytes = (midpoint.bytes - before) / runs
        sample.finished_bytes = (tracemalloc.get_traced_memory()[0] - before) / runs
        tracemalloc.stop()
    return sample


def _agent_options(args: argparse.Namespace, command: str, config: Path) -> dict[str, Any]:
    script = [{"stream": [args.messages, args.message_bytes, args.interval]}]
    env = {"NODEPROV_FAKE_AGENT": json.dumps(script), "CLAUDE_CONFIG_DIR": str(config)}
    return {"cli_path": command, "env": env}


def sdk_pass(args: argparse.Namespace, command: str, tmp: Path) -> Pass:
    async def one_pass(runs: int, midpoint: _Midpoint, sample: Sample) -> None:
        async def one(index: int) -> None:
            started, seen = time.perf_counter(), 0
            workdir = tmp / f"sdk-{index}"
            workdir.mkdir(exist_ok=True)
            options = ClaudeAgentOptions(**_agent_options(args, command, tmp / "sdk-config"), cwd=workdir)
            async with ClaudeSDKClient(options=options) as client:
                await client.query("go")
                async for message in client.receive_response():
                    if isinstance(message, AssistantMessage):
                        seen += 1
                        midpoint.saw(seen)
                        for block in message.content:
                            if isinstance(block, TextBlock):
                                _note_latency(sample, block.text, seen, args.messages)
                    assert not isinstance(message, ResultMessage) or not message.is_error
            sample.messages += seen
            sample.durations.append(time.perf_counter() - started)

        async with anyio.create_task_group() as tg:
            for index in range(runs):
                tg.start_soon(one, index)

    return one_pass


def orchestrator_pass(args: argparse.Namespace, command: str, tmp: Path, url: str) -> Pass:
    async def one_pass(runs: int, midpoint: _Midpoint, sample: Sample) -> None:
        async with await Store.open(url) as store, Orchestrator(store) as orchestrator:

            async def one() -> None:
                started, seen = time.perf_counter(), 0
                run = await orchestrator.start(
                    "go",
                    provider="fake",
                    provider_settings={"root": str(tmp / "nodes")},
                    options=_agent_options(args, command, tmp / "unused"),
                )
                sample.starts.append(time.perf_counter() - started)
                async for event in run.events():
                    if isinstance(event, AgentMessage) and isinstance(event.message, AgentText):
                        seen += 1
                        midpoint.saw(seen)
                        _note_latency(sample, event.message.text, seen, args.messages)
                    elif isinstance(event, RunFinished):
                        assert event.outcome == "ok", event.error
                sample.messages += seen
                sample.durations.append(time.perf_counter() - started)

            async with anyio.create_task_group() as tg:
                for _ in range(runs):
                    tg.start_soon(one)

    return one_pass


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _line(name: str, runs: int, sample: Sample, baseline: Sample | None) -> str:
    median = statistics.median(sample.durations)
    ratio = f"{median / statistics.median(baseline.durations):5.2f}x" if baseline else "     "
    cpu = sample.cpu / sample.messages * 1000
    p50, p99 = (_quantile(sample.latencies, q) * 1000 for q in (0.5, 0.99))
    steady = _quantile(sample.steady, 0.99) * 1000
    memory = (
        f"{sample.live_bytes / 1e6:7.3f} {sample.finished_bytes / 1e6:7.3f}"
        if sample.live_bytes
        else " " * 15
    )
    start = f"{statistics.median(sample.starts) * 1000:8.1f}" if sample.starts else ""
    return (
        f"{name:28} {runs:4d} {sample.wall:7.1f} {median:6.2f} {max(sample.durations):6.2f} {ratio}"
        f" {cpu:7.3f} {sample.agents_cpu:7.1f} {p50:7.1f} {p99:7.1f} {steady:8.1f} {memory} {start}"
    )


async def _postgres_url(admin_url: str) -> tuple[str, Callable[[], Awaitable[None]]]:
    """A fresh schema on the PostgreSQL server, and how to drop it."""
    admin = await Store.open(admin_url)
    schema = f"bench_{os.getpid()}_{time.monotonic_ns() % 10**6}"
    await admin.db.execute(f"CREATE SCHEMA {schema}")

    async def drop() -> None:
        await admin.db.execute(f"DROP SCHEMA {schema} CASCADE")
        await admin.aclose()

    return f"{admin_url}?options=-csearch_path%3D{schema}", drop


async def run(args: argparse.Namespace) -> None:
    os.environ["CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK"] = "1"
    header = (
        f"{'configuration':28} {'N':>4} {'wall s':>7} {'run s':>6} {'max s':>6} {'vsSDK':>6}"
        f" {'CPUs/1k':>7} {'agentsC':>7} {'p50 ms':>7} {'p99 ms':>7} {'p99* ms':>8}"
        f" {'MB/live':>7} {'MB/done':>7} {'start ms':>8}"
    )
    print(
        f"{args.messages} messages of {args.message_bytes} B, {args.interval * 1000:g} ms apart, per run;"
        f" memory from a separate pass of {args.memory_runs} runs"
    )
    print(header)
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        command = fake_agent_command(tmp)
        sdk = sdk_pass(args, command, tmp)
        configurations: list[
            tuple[str, list[int], Callable[[], Awaitable[tuple[str, Callable[[], Awaitable[None]]]]]]
        ] = []

        async def sqlite() -> tuple[str, Callable[[], Awaitable[None]]]:
            path = tmp / f"store-{time.monotonic_ns()}.db"

            async def nothing() -> None:
                return None

            return f"sqlite:///{path}", nothing

        configurations.append(("orchestrator, SQLite", args.sqlite_runs, sqlite))
        if args.postgres_runs:
            configurations.append(
                ("orchestrator, PostgreSQL", args.postgres_runs, lambda: _postgres_url(args.postgres))
            )
        await _measure(2, args, sdk, memory=False)  # warm: imports, first processes
        baselines: dict[int, Sample] = {}
        for runs in sorted({n for _, counts, _ in configurations for n in counts}):
            baselines[runs] = await _measure(runs, args, sdk, memory=False)
            memory = (
                await _measure(args.memory_runs, args, sdk, memory=True) if runs == args.memory_runs else None
            )
            if memory is not None:
                baselines[runs].live_bytes, baselines[runs].finished_bytes = (
                    memory.live_bytes,
                    memory.finished_bytes,
                )
            print(_line("the SDK alone", runs, baselines[runs], None), flush=True)
        for name, counts, make_store in configurations:
            url, drop = await make_store()
            try:
                ours = orchestrator_pass(args, command, tmp, url)
                await _measure(2, args, ours, memory=False)
                for runs in counts:
                    sample = await _measure(runs, args, ours, memory=False)
                    if runs == args.memory_runs:
                        memory = await _measure(runs, args, ours, memory=True)
                        sample.live_bytes, sample.finished_bytes = memory.live_bytes, memory.finished_bytes
                    print(_line(name, runs, sample, baselines[runs]), flush=True)
            finally:
                await drop()
    print(
        "run s: median run duration; vsSDK: its ratio to the SDK alone's at the same N (goal <= 1.2x);"
        " CPUs/1k: control-plane CPU seconds per 1000 messages; agentsC: CPU seconds of all the agent"
        f" processes ({os.cpu_count()} CPUs here); p50/p99: relay latency (goal p99 <= 20 ms);"
        " p99*: the same over each run's second half of messages (the runs start together);"
        " MB/live, MB/done: Python memory per live run, per finished run (goals <= 0.5, 0);"
        " start ms: median time Orchestrator.start() took (runs are started all at once)"
    )


def _counts(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip()]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sqlite-runs", type=_counts, default=[10, 100, 200, 400], help="N on SQLite")
    parser.add_argument(
        "--postgres-runs", type=_counts, default=[100, 200], help="N on PostgreSQL ('' for none)"
    )
    parser.add_argument(
        "--postgres", default=POSTGRES, help="PostgreSQL server URL (a schema is made per run)"
    )
    parser.add_argument("--messages", type=int, default=200, help="messages per run")
    parser.add_argument("--message-bytes", type=int, default=1024, help="bytes of text per message")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between an agent's messages")
    parser.add_argument("--memory-runs", type=int, default=100, help="N of the tracemalloc pass")
    anyio.run(run, parser.parse_args())
