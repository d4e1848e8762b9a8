"""The service against the library: N concurrent runs of a fake agent, started and followed
over HTTP and server-sent events from a real ``nodeprov serve`` process, next to the same
runs through the library's :class:`~nodeprov.runs.Orchestrator` in this process, in one run.

Each run's agent (the compiled fake Claude Code CLI, ``bench/fake_agent.c``: the Python fake
would cost more CPU than the relay it feeds) sends
``--messages`` assistant messages of ``--message-bytes`` bytes, ``--interval`` seconds apart;
each text begins with the time it was sent, so a reader measures the relay latency from the
agent writing a message to the caller reading it. Both paths run on local nodes with the
store on SQLite, and both keep their agents alike (``--agent-grace``: the service's default,
which the library's would otherwise not share; a kept agent's keeper on the node costs CPU
that neither side's figure counts). The control plane's CPU is the orchestrator's process's own: this process
for the library, the ``serve`` process for HTTP (the client reading the streams is not the
control plane). "first event" is the time from asking for a run (``start()``, or the POST)
to reading its first event, its median and p99 over the runs started at once (issue 47's
goal for a burst of 50: p99 at most 2 s).

Goals (issue 28): the HTTP path's CPU per 1000 messages at most 1.3x the library's, its p99
relay latency at most 10 ms above the library's at 10 runs.

Run it with ``.venv/bin/python -m bench.serve [--help]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.compiled_agent import compiled_fake_agent
from nodeprov.agents import AgentText
from nodeprov.runs import KEPT_AGENT_GRACE, AgentMessage, Orchestrator, RunFinished
from nodeprov.store import Store


@dataclass
class Sample:
    latencies: list[float] = field(default_factory=list)
    first_events: list[float] = field(default_factory=list)
    messages: int = 0
    wall: float = 0.0
    cpu: float = 0.0


def _latency(text: str) -> float | None:
    if not text.startswith("t="):
        return None
    return time.time() - float(text[2:].split(" ", 1)[0])


def _options(args: argparse.Namespace, command: str) -> dict[str, Any]:
    script = [{"stream": [args.messages, args.message_bytes, args.interval]}]
    env = {"NODEPROV_FAKE_AGENT": json.dumps(script)}
    return {"cli_path": command, "ship_cli": False, "model": "fake-model", "env": env}


async def library_pass(runs: int, args: argparse.Namespace, command: str, tmp: Path) -> Sample:
    sample = Sample()
    async with (
        await Store.open(f"sqlite:///{tmp}/library-{time.monotonic_ns()}.db") as store,
        Orchestrator(store, agent_grace=args.agent_grace or None) as orchestrator,
    ):

        async def one() -> None:
            asked, first = time.perf_counter(), True
            run = await orchestrator.start(
                "go",
                provider="local",
                provider_settings={"root": str(tmp / "nodes")},
                agent="claude",
                options=_options(args, command),
                permission="full",
            )
            async for event in run.events():
                if first:
                    sample.first_events.append(time.perf_counter() - asked)
                    first = False
                if isinstance(event, AgentMessage) and isinstance(event.message, AgentText):
                    sample.messages += 1
                    if (delay := _latency(event.message.text)) is not None:
                        sample.latencies.append(delay)
                elif isinstance(event, RunFinished):
                    assert event.outcome == "ok", event.error

        cpu, wall = time.process_time(), time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(runs):
                tg.start_soon(one)
        sample.wall, sample.cpu = time.perf_counter() - wall, time.process_time() - cpu
    return sample


def _process_cpu(pid: int) -> float:
    """A process's own CPU seconds (user and system, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def http_pass(runs: int, args: argparse.Namespace, command: str, url: str, pid: int) -> Sample:
    sample = Sample()
    limits = httpx.Limits(max_connections=runs * 2 + 10, max_keepalive_connections=runs * 2 + 10)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(120), limits=limits) as client:

        async def one() -> None:
            asked = time.perf_counter()
            options = _options(args, command)
            # A model by name, as the library's runs have: "scripted" would start a scripted
            # model server per run, which the fake agent does not use.
            body = {
                "prompt": "go",
                "provider": "local",
                "agent": "claude",
                "model": "fake-model",
                "permission": "full",
                "env": options.pop("env"),
                "options": options,
            }
            answer = await client.post("/v1/runs", json=body)
            answer.raise_for_status()
            first = True
            async with client.stream("GET", f"/v1/runs/{answer.json()['id']}/events") as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    if first:
                        sample.first_events.append(time.perf_counter() - asked)
                        first = False
                    event = json.loads(line[6:])
                    if event["type"] == "agent.message" and event["message"].get("kind") == "text":
                        sample.messages += 1
                        if (delay := _latency(event["message"]["text"])) is not None:
                            sample.latencies.append(delay)
                    elif event["type"] == "run.finished":
                        assert event["outcome"] == "ok", event["error"]

        cpu, wall = _process_cpu(pid), time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(runs):
                tg.start_soon(one)
        sample.wall, sample.cpu = time.perf_counter() - wall, _process_cpu(pid) - cpu
    return sample


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _line(name: str, runs: int, sample: Sample) -> str:
    cpu = sample.cpu / sample.messages * 1000
    p50, p99 = (_quantile(sample.latencies, q) * 1000 for q in (0.5, 0.99))
    first, first_p99 = (_quantile(sample.first_events, q) * 1000 for q in (0.5, 0.99))
    figures = f"{sample.wall:7.1f} {cpu:8.3f} {p50:7.1f} {p99:7.1f} {first:9.1f} {first_p99:9.1f}"
    return f"{name:16} {runs:4d} {figures}"


async def serve(tmp: Path, grace: float) -> tuple[anyio.abc.Process, str]:
    (tmp / "nodes").mkdir(exist_ok=True)
    # The bench's agent is a scripted CLI, which the operator must allow a request to name.
    config = json.dumps({"allow_options": ["claude.cli_path"], "agent_grace": grace or None})
    env = {**os.environ, "NODEPROV_LOCAL_ROOT": str(tmp / "nodes"), "NODEPROV_SERVE_CONFIG": config}
    process = await anyio.open_process(
        [sys.executable, "-m", "nodeprov", "serve", "--port", "0", "--store", f"sqlite:///{tmp}/serve.db"],
        env=env,
        stderr=None,
    )
    assert process.stdout is not None
    said = b""
    while b"\n" not in said:
        said += await process.stdout.receive()
    url = said.decode().split("listening on ", 1)[1].split()[0]
    async with httpx.AsyncClient(base_url=url) as probe:
        while True:
            try:
                if (await probe.get("/readyz")).status_code == 200:
                    return process, url
            except httpx.TransportError:
                pass
            await anyio.sleep(0.05)


async def run(args: argparse.Namespace) -> None:
    os.environ["CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK"] = "1"
    kept = f"kept {args.agent_grace:g} s" if args.agent_grace else "not kept"
    print(
        f"{args.messages} messages of {args.message_bytes} B, {args.interval * 1000:g} ms apart, per run;"
        f" agents {kept} on both sides"
    )
    header = f"{'path':16} {'N':>4} {'wall s':>7} {'CPUs/1k':>8} {'p50 ms':>7} {'p99 ms':>7}"
    print(f"{header} {'first ms':>9} {'first p99':>9}")
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        (tmp / "nodes").mkdir()
        command = compiled_fake_agent()
        process, url = await serve(tmp, args.agent_grace)
        try:
            await library_pass(2, args, command, tmp)  # warm both: imports, first processes
            await http_pass(2, args, command, url, process.pid)
            for runs in args.runs:
                library = await library_pass(runs, args, command, tmp)
                http = await http_pass(runs, args, command, url, process.pid)
                print(_line("library", runs, library), flush=True)
                print(_line("HTTP + SSE", runs, http), flush=True)
                cpu_ratio = (http.cpu / http.messages) / (library.cpu / library.messages)
                added = (_quantile(http.latencies, 0.99) - _quantile(library.latencies, 0.99)) * 1000
                print(
                    f"{'':16} {runs:4d}  CPU {cpu_ratio:.2f}x the library's (goal <= 1.3x);"
                    f" p99 added {added:+.1f} ms (goal <= 10 ms at 10 runs)",
                    flush=True,
                )
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()
    print(
        "CPUs/1k: the control plane's CPU seconds per 1000 messages (the serve process for HTTP);"
        " p50/p99: relay latency, agent to reader; first ms / first p99: the median and p99 time from"
        f" asking for a run to its first event ({os.cpu_count()} CPUs here)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=lambda t: [int(n) for n in t.split(",")], default=[10, 100])
    parser.add_argument("--messages", type=int, default=200, help="messages per run")
    parser.add_argument("--message-bytes", type=int, default=1024, help="bytes of text per message")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between an agent's messages")
    parser.add_argument(
        "--agent-grace",
        type=float,
        default=KEPT_AGENT_GRACE,
        help="keep every run's agent this long, on both sides (the service's default; 0: not kept)",
    )
    anyio.run(run, parser.parse_args())
