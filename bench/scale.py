"""The control plane at scale: N concurrent runs through nodeprov against the SDK alone, with
the CPU of every process counted.

Each run's agent is the compiled fake Claude Code CLI (``bench/fake_agent.c``, built on
demand; see :mod:`bench.compiled_agent`): ``--messages`` assistant messages of
``--message-bytes`` bytes, ``--interval`` seconds apart, each with a transcript entry. The
Python fake would cost more CPU than the relay it feeds and saturate the machine on both
sides alike, which would hide nodeprov's overhead. The baseline is the Claude Agent SDK alone
doing the same work: ``ClaudeSDKClient`` on the same agent in a local subprocess, nothing
stored. nodeprov's side is the product as a user runs it: the orchestrator on the ``local``
provider (each agent under the node's supervisor and behind the stdin guard), the store on
SQLite or PostgreSQL, transcripts mirrored and every event written, as by default.

Runs start all at once, and staggered (``--stagger`` seconds apart); both are reported.

CPU, in seconds per 1,000 messages, for both sides:

- plane: this process (the orchestrator with its store threads, or the SDK's client);
- node: the processes started on the nodes' side other than the agents (the local node's
  supervisor, the stdin guard's shell, its watcher and awk; for the SDK alone, only the
  agents' own start and exit): every child reaped (``RUSAGE_CHILDREN``, which holds the
  descendants each child reaped) less the agents';
- agents: what the agents report of themselves as they exit (their CPU from ``main()`` on);
- total: all of them. ``busy%`` is the total over the wall time of all the machine's CPUs.

Not counted: a PostgreSQL server's processes (not ours, and shared with whatever else uses
it).

Also reported: the wall time until every run finished; each run's duration (start to finish,
median and highest) and its ratio to the SDK alone's; the relay latency from the agent writing
a message to the caller reading it (p50, p99, and p99 over each run's second half); the
control plane's memory (Python allocations, measured with tracemalloc in a separate pass of
runs started at once, in the first sitting) per live run and per finished run; and how long
``Orchestrator.start()`` took.

``--sittings K`` repeats the whole comparison K times, alternating which side goes first, and
ends with each ratio's median and spread over the sittings.

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
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psycopg
from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ClaudeSDKClient, ResultMessage, TextBlock

from bench.common import Row, Timing, print_rows
from bench.compiled_agent import CPU_FILE_ENV, compiled_fake_agent
from nodeprov.agents import AgentText
from nodeprov.runs import AgentMessage, Orchestrator, RunFinished
from nodeprov.store import Store

POSTGRES = os.environ.get(
    "NODEPROV_TEST_POSTGRES_URL", "postgresql://nodeprov:nodeprov@127.0.0.1:5432/nodeprov_test"
)
CPUS = os.cpu_count() or 1
SDK = "the SDK alone"
AT_ONCE, STAGGERED = "at once", "staggered"


@dataclass
class Sample:
    """What one pass of N runs measured."""

    durations: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    steady: list[float] = field(default_factory=list)  # those of each run's second half
    starts: list[float] = field(default_factory=list)  # how long start() took, orchestrator only
    messages: int = 0
    wall: float = 0.0
    plane_cpu: float = 0.0  # this process's
    loop_cpu: float = 0.0  # its event loop's thread's alone (the rest: the store's thread, workers)
    children_cpu: float = 0.0  # every process it started, with what those reaped
    agents_cpu: float = 0.0  # as the agents reported it
    agents_reported: int = 0
    unreaped: int = 0  # children still there when the pass was over: their CPU is missing
    live_bytes: float = 0.0  # per run, while every run is live
    finished_bytes: float = 0.0  # per run, once every run finished

    @property
    def node_cpu(self) -> float:
        return self.children_cpu - self.agents_cpu

    @property
    def total_cpu(self) -> float:
        return self.plane_cpu + self.children_cpu

    def per_thousand(self, seconds: float) -> float:
        return seconds / self.messages * 1000

    @property
    def busy(self) -> float:
        """The share of all the machine's CPUs the pass took, in percent."""
        return self.total_cpu / (self.wall * CPUS) * 100

    @property
    def run_time(self) -> float:
        return statistics.median(self.durations)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _children() -> list[int]:
    """The pids whose parent is this process (zombies included)."""
    me, found = os.getpid(), []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.append(int(entry.name))
    return found


async def _reaped(limit: float = 10.0) -> int:
    """Waits until this process has reaped every child (their CPU counts only then); returns
    how many are left at the limit."""
    for _ in range(int(limit / 0.05)):
        if not _children():
            return 0
        await anyio.sleep(0.05)
    return len(_children())


def _agents_cpu(path: Path) -> tuple[float, int]:
    """The CPU seconds the agents reported, and how many reported."""
    try:
        lines = path.read_text().split()
    except FileNotFoundError:
        return 0.0, 0
    microseconds = [int(value) for value in lines]
    return sum(microseconds) / 1e6, len(microseconds) // 2


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


@dataclass(frozen=True)
class Round:
    """One pass's parameters and what it fills in."""

    runs: int
    stagger: float  # seconds between two runs' starts
    midpoint: _Midpoint
    sample: Sample
    cpu_file: Path  # where the agents report their CPU


Pass = Callable[[Round], Awaitable[None]]


async def _start_all(round_: Round, one: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    """Starts the round's runs, one by one ``stagger`` seconds apart (or all at once), and
    waits for them all."""
    async with anyio.create_task_group() as tg:
        for index in range(round_.runs):
            if index and round_.stagger:
                await anyio.sleep(round_.stagger)
            tg.start_soon(one, index)


async def _measure(
    runs: int, stagger: float, args: argparse.Namespace, one_pass: Pass, tmp: Path, *, memory: bool
) -> Sample:
    sample = Sample()
    if memory:
        gc.collect()
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0] if memory else 0
    midpoint = _Midpoint(runs, args.messages // 2, memory)
    cpu_file = tmp / f"agents-cpu-{time.monotonic_ns()}"
    plane, wall, children = time.process_time(), time.perf_counter(), _children_cpu()
    loop = time.thread_time()
    await one_pass(Round(runs, stagger, midpoint, sample, cpu_file))
    sample.wall, sample.plane_cpu = time.perf_counter() - wall, time.process_time() - plane
    sample.loop_cpu = time.thread_time() - loop
    sample.unreaped = await _reaped()
    sample.children_cpu = _children_cpu() - children
    sample.agents_cpu, sample.agents_reported = _agents_cpu(cpu_file)
    if memory:
        gc.collect()
        sample.live_bytes = (midpoint.bytes - before) / runs
        sample.finished_bytes = (tracemalloc.get_traced_memory()[0] - before) / runs
        tracemalloc.stop()
    return sample


def _agent_env(args: argparse.Namespace, cpu_file: Path) -> dict[str, str]:
    script = [{"stream": [args.messages, args.message_bytes, args.interval]}]
    return {"NODEPROV_FAKE_AGENT": json.dumps(script), CPU_FILE_ENV: str(cpu_file)}


def sdk_pass(args: argparse.Namespace, command: str, tmp: Path) -> Pass:
    async def one_pass(round_: Round) -> None:
        sample = round_.sample
        env = {**_agent_env(args, round_.cpu_file), "CLAUDE_CONFIG_DIR": str(tmp / "sdk-config")}

        async def one(index: int) -> None:
            started, seen = time.perf_counter(), 0
            workdir = tmp / f"sdk-{index}"
            workdir.mkdir(exist_ok=True)
            options = ClaudeAgentOptions(cli_path=command, env=env, cwd=workdir)
            async with ClaudeSDKClient(options=options) as client:
                await client.query("go")
                async for message in client.receive_response():
                    if isinstance(message, AssistantMessage):
                        seen += 1
                        round_.midpoint.saw(seen)
                        for block in message.content:
                            if isinstance(block, TextBlock):
                                _note_latency(sample, block.text, seen, args.messages)
                    assert not isinstance(message, ResultMessage) or not message.is_error
            sample.messages += seen
            sample.durations.append(time.perf_counter() - started)

        await _start_all(round_, one)

    return one_pass


def orchestrator_pass(args: argparse.Namespace, command: str, tmp: Path, url: str) -> Pass:
    async def one_pass(round_: Round) -> None:
        sample = round_.sample
        options = {"cli_path": command, "env": _agent_env(args, round_.cpu_file)}
        async with await Store.open(url) as store, Orchestrator(store) as orchestrator:

            async def one(_: int) -> None:
                started, seen = time.perf_counter(), 0
                run = await orchestrator.start(
                    "go",
                    provider="local",
                    provider_settings={"root": str(tmp / "nodes")},
                    options=options,
                    permission="full",  # the fake agent does nothing a permission would guard
                )
                sample.starts.append(time.perf_counter() - started)
                async for event in run.events():
                    if isinstance(event, AgentMessage) and isinstance(event.message, AgentText):
                        seen += 1
                        round_.midpoint.saw(seen)
                        _note_latency(sample, event.message.text, seen, args.messages)
                    elif isinstance(event, RunFinished):
                        assert event.outcome == "ok", event.error
                sample.messages += seen
                sample.durations.append(time.perf_counter() - started)

            await _start_all(round_, one)

    return one_pass


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


HEADER = (
    # the groups' bars stand where the spaces between columns are
    f"{'':67}|{' CPU s per 1k messages':47}|{' relay latency':24}|\n"
    f"{'configuration':24} {'start':9} {'N':>4} {'wall s':>6} {'run s':>6} {'max s':>6} {'vsSDK':>6}"
    f" {'plane':>6} {'loop':>6} {'node':>6} {'agents':>6} {'total':>6} {'vsSDK':>6} {'busy%':>5}"
    f" {'p50 ms':>7} {'p99 ms':>7} {'p99* ms':>8} {'MB/live':>7} {'MB/done':>7} {'start ms':>8}"
)


def _line(name: str, mode: str, runs: int, sample: Sample, baseline: Sample | None) -> str:
    def ratio(ours: float, theirs: float) -> str:
        return f"{ours / theirs:5.2f}x" if baseline else " " * 6

    median = sample.run_time
    total = sample.per_thousand(sample.total_cpu)
    parts = (sample.plane_cpu, sample.loop_cpu, sample.node_cpu, sample.agents_cpu)
    cpus = " ".join(f"{sample.per_thousand(seconds):6.3f}" for seconds in parts)
    baseline_total = baseline.per_thousand(baseline.total_cpu) if baseline else 1.0
    p50, p99 = (_quantile(sample.latencies, q) * 1000 for q in (0.5, 0.99))
    steady = _quantile(sample.steady, 0.99) * 1000
    live, done = sample.live_bytes / 1e6, sample.finished_bytes / 1e6
    memory = f"{live:7.3f} {done:7.3f}" if sample.live_bytes else " " * 15
    start = f"{statistics.median(sample.starts) * 1000:8.1f}" if sample.starts else ""
    line = (
        f"{name:24} {mode:9} {runs:4d} {sample.wall:6.1f} {median:6.2f} {max(sample.durations):6.2f}"
        f" {ratio(median, baseline.run_time if baseline else 1.0)} {cpus} {total:6.3f}"
        f" {ratio(total, baseline_total)} {sample.busy:5.0f}"
        f" {p50:7.1f} {p99:7.1f} {steady:8.1f} {memory} {start}"
    )
    if sample.agents_reported != runs or sample.unreaped:
        line += f"\n    ({sample.agents_reported} of {runs} agents reported their CPU;"
        line += f" {sample.unreaped} processes left unreaped: their CPU is missing)"
    return line


async def _postgres_url(admin_url: str) -> tuple[str, Callable[[], Awaitable[None]]]:
    """A fresh schema on the PostgreSQL server, and how to drop it (made over a plain
    connection: a store opened on the default schema would migrate it)."""
    admin = await psycopg.AsyncConnection.connect(admin_url, autocommit=True)
    schema = f"bench_{os.getpid()}_{time.monotonic_ns() % 10**6}"
    await admin.execute(f"CREATE SCHEMA {schema}")

    async def drop() -> None:
        await admin.execute(f"DROP SCHEMA {schema} CASCADE")
        await admin.close()

    return f"{admin_url}?options=-csearch_path%3D{schema}", drop


@dataclass
class Sittings:
    """Each configuration's samples over the sittings, by (configuration, mode, N), with the
    SDK alone's beside them."""

    samples: dict[tuple[str, str, int], list[Sample]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, mode: str, runs: int, sample: Sample) -> None:
        self.samples[name, mode, runs].append(sample)

    def rows(self) -> list[Row]:
        rows = []
        for (name, mode, runs), ours in self.samples.items():
            if name == SDK:
                continue
            theirs = self.samples[SDK, mode, runs]
            figures: list[tuple[str, Callable[[Sample], float], str, float | None]] = [
                ("run time", lambda s: s.run_time, "s", 1 / 1.2),
                ("CPU, all processes", lambda s: s.per_thousand(s.total_cpu), "s/1k", None),
                ("CPU, this process", lambda s: s.per_thousand(s.plane_cpu), "s/1k", None),
                ("CPU, its event loop's thread", lambda s: s.per_thousand(s.loop_cpu), "s/1k", None),
            ]
            for what, measure, unit, goal in figures:
                mine, raw = [measure(s) for s in ours], [measure(s) for s in theirs]
                timing = Timing(min(mine), min(raw), [r / m for m, r in zip(mine, raw, strict=True)])
                label = f"{name}, {runs} runs {mode}: {what}"
                rows.append(Row(label, f"{min(mine):.3f} {unit}", f"{min(raw):.3f} {unit}", timing, goal))
        return rows

    def saturation(self) -> list[str]:
        lines = []
        for (name, mode, runs), samples in self.samples.items():
            busy = sorted(sample.busy for sample in samples)
            lines.append(
                f"{name}, {runs} runs {mode}: {statistics.median(busy):.0f}% of {CPUS} CPUs"
                f" ({busy[0]:.0f}-{busy[-1]:.0f}%)"
            )
        return lines


Configuration = tuple[str, list[int], Callable[[], Awaitable[tuple[str, Callable[[], Awaitable[None]]]]]]


async def run(args: argparse.Namespace) -> None:
    os.environ["CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK"] = "1"
    command = compiled_fake_agent()  # before any measure: the compiler is a child too
    print(
        f"{args.messages} messages of {args.message_bytes} B, {args.interval * 1000:g} ms apart, per run;"
        f" staggered runs start {args.stagger * 1000:g} ms apart; {args.sittings} sitting(s);"
        f" memory from a separate pass of {args.memory_runs} runs started at once, in the first sitting;"
        f" {CPUS} CPUs"
    )
    modes = {AT_ONCE: 0.0, STAGGERED: args.stagger}
    sittings = Sittings()
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        sdk = sdk_pass(args, command, tmp)
        configurations: list[Configuration] = []

        async def sqlite() -> tuple[str, Callable[[], Awaitable[None]]]:
            async def nothing() -> None:
                return None

            return f"sqlite:///{tmp / f'store-{time.monotonic_ns()}.db'}", nothing

        if args.sqlite_runs:
            configurations.append(("orchestrator, SQLite", args.sqlite_runs, sqlite))
        if args.postgres_runs:
            configurations.append(
                ("orchestrator, PostgreSQL", args.postgres_runs, lambda: _postgres_url(args.postgres))
            )
        stores = [(name, counts, *(await make_store())) for name, counts, make_store in configurations]
        try:
            passes = {name: orchestrator_pass(args, command, tmp, url) for name, _, url, _ in stores}
            await _measure(2, 0.0, args, sdk, tmp, memory=False)  # warm: imports, first processes
            for one_pass in passes.values():
                await _measure(2, 0.0, args, one_pass, tmp, memory=False)
            for sitting in range(args.sittings):
                print(f"\nsitting {sitting + 1} of {args.sittings}\n{HEADER}", flush=True)
                for runs in sorted({n for _, counts, _, _ in stores for n in counts}):
                    for mode, stagger in modes.items():
                        ours = [(name, passes[name]) for name, counts, _, _ in stores if runs in counts]
                        # Alternate which side goes first, so that drift in the machine's load
                        # hits both alike (as bench.common.compare does).
                        order = [(SDK, sdk), *ours] if sitting % 2 == 0 else [*ours, (SDK, sdk)]
                        done: dict[str, Sample] = {}
                        for name, one_pass in order:
                            done[name] = await _measure(runs, stagger, args, one_pass, tmp, memory=False)
                            if sitting == 0 and mode == AT_ONCE and runs == args.memory_runs:
                                memory = await _measure(runs, 0.0, args, one_pass, tmp, memory=True)
                                done[name].live_bytes = memory.live_bytes
                                done[name].finished_bytes = memory.finished_bytes
                        for name, sample in sorted(done.items(), key=lambda item: item[0] != SDK):
                            sittings.add(name, mode, runs, sample)
                            baseline = None if name == SDK else done[SDK]
                            print(_line(name, mode, runs, sample, baseline), flush=True)
        finally:
            for *_, drop in stores:
                await drop()
    print(
        "\nrun s: median run duration; vsSDK: its ratio to the SDK alone's at the same N and start"
        " (goal <= 1.2x); CPU s per 1k messages: plane is this process (the control plane, or the"
        " SDK's client), loop its event loop's thread alone (the rest of plane: the store's thread,"
        " worker threads), node the processes around the agents (a local node's supervisor, the stdin"
        " guard; for the SDK alone the agents' exec and exit), agents the agents' own from main() on,"
        " total all of them (a PostgreSQL server not counted), vsSDK"
        f" the total's ratio to the SDK alone's; busy%: the total over the wall time of {CPUS} CPUs;"
        " p50/p99: relay latency (goal p99 <= 20 ms); p99*: the same over each run's second half of"
        " messages; MB/live, MB/done: Python memory per live run, per finished run (goals <= 0.5, 0);"
        " start ms: median time Orchestrator.start() took"
    )
    print(f"\nOver {args.sittings} sitting(s):")
    print_rows(sittings.rows(), args.sittings)
    print("(here speed is the SDK alone's figure / nodeprov's: below 1, nodeprov takes more)")
    print("CPU taken, of all the machine's (median, spread):")
    for line in sittings.saturation():
        print(f"  {line}")


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
    parser.add_argument(
        "--stagger", type=float, default=0.02, help="seconds between two runs' starts, when staggered"
    )
    parser.add_argument("--sittings", type=int, default=1, help="times to repeat the whole comparison")
    parser.add_argument("--memory-runs", type=int, default=100, help="N of the tracemalloc pass (0: none)")
    anyio.run(run, parser.parse_args())
