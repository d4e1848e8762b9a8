"""Checkpoints on Docker (``nodeprov.checkpoints``): a workspace's capture and restore next to
plain ``tar`` piped through ``docker exec`` (the Docker CLI), in adjacent pairs.

The workspace: ``--workspace-mb`` MiB, nine tenths of it in 1 MiB files of random bytes, the
rest in 5 kB ones (a source tree beside its build outputs). A capture is nodeprov's into a
fresh directory object store (every pack synced) against ``docker exec C tar -c`` into a file
on this machine (synced); a restore is nodeprov's into a second container's workspace against
``docker exec -i C2 tar -x -p -o`` of that file into an emptied directory. Also printed: what a
second capture adds to the object store when one 1 MiB file changed (issue 48: under 1% of
the workspace), and how late an agent's messages reach the control plane while captures run
on the same event loop (the fake agent streaming timestamped messages on a local node: alone,
beside nodeprov's captures, and beside plain ``tar`` through ``docker exec``, which reads the
same bytes off the event loop).

    python -m bench.run --suite checkpoints [--workspace-mb 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.to_thread

from nodeprov import NodeHandle, get_agent, get_provider
from nodeprov._heap import freeze_start_up
from nodeprov.agents import Agent, AgentText
from nodeprov.checkpoints import DirectoryObjects, Manifest, capture, restore
from nodeprov.testing.conformance import run as run_on
from nodeprov.testing.fake_agent import fake_agent_command

from .common import Row, compare
from .docker_bench import BUILD_BASE

_FILL = """set -e
big=$(( $1 * 9 / 10 )); small=$(( ($1 - big) * 1048576 / 5000 ))
i=0; while [ $i -lt $big ]; do head -c 1048576 /dev/urandom > big-$i; i=$((i+1)); done
mkdir src; i=0; while [ $i -lt $small ]; do head -c 5000 /dev/urandom > src/s-$i; i=$((i+1)); done
"""


async def _docker(*argv: str, stdin: Path | None = None, stdout: Path | None = None) -> None:
    """``docker ARGV`` from and into files (the latter synced), killed if cancelled: this
    engine's CLI sometimes never returns from an exec whose process has ended (its attached
    stream is not closed), and a thread running it could not be cancelled."""
    writes = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    with ExitStack() as opened:
        source = await anyio.to_thread.run_sync(os.open, str(stdin or os.devnull), os.O_RDONLY)
        opened.callback(os.close, source)
        sink = await anyio.to_thread.run_sync(os.open, str(stdout or os.devnull), writes, 0o644)
        opened.callback(os.close, sink)
        with anyio.fail_after(_CLI_HUNG):
            await anyio.run_process(["docker", *argv], stdin=source, stdout=sink, stderr=None)
        if stdout:
            await anyio.to_thread.run_sync(os.fsync, sink)


_CLI_HUNG = 120  # seconds: far beyond what a raw capture or restore of the workspace takes


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def run(args: argparse.Namespace) -> list[Row]:
    image = (await anyio.run_process([str(BUILD_BASE)], stderr=PIPE)).stdout.decode().split()[-1]
    provider = get_provider("docker", image=image, network_mode="host", pull="never")
    scratch = Path(tempfile.mkdtemp(prefix="nodeprov-bench-checkpoints-"))
    archive = scratch / "raw.tar"
    manifest: list[Manifest] = []
    try:
        async with await provider.provision() as source, await provider.provision() as target:
            code, _, err = await run_on(source, "sh", "-c", _FILL, "fill", str(args.workspace_mb))
            assert code == 0, err
            container, workdir = source.container_id, source.workdir  # type: ignore[attr-defined]
            other, other_dir = target.container_id, target.workdir  # type: ignore[attr-defined]

            async def capture_ours() -> None:
                shutil.rmtree(scratch / "objects", ignore_errors=True)
                captured = await capture(source, DirectoryObjects(scratch / "objects"))
                manifest[:] = [captured.manifest]

            raw_capture = functools.partial(
                _docker, "exec", container, "tar", "-c", "-f", "-", "-C", workdir, ".", stdout=archive
            )
            restore_ours = functools.partial(_restore, target, manifest, scratch / "objects")
            # As a restore extracts: owners not kept (-o), which also spares root's tar a
            # chown of every file (on this machine's overlay a third of its time).
            empty_then_extract = 'rm -rf "$1" && mkdir "$1" && exec tar -x -p -o -f - -C "$1"'
            raw_restore = functools.partial(
                _docker,
                "exec",
                "-i",
                other,
                "sh",
                "-c",
                empty_then_extract,
                "x",
                f"{other_dir}.raw",
                stdin=archive,
            )
            mb = args.workspace_mb * 1.048576
            rows = []
            for name, ours, raw in (
                ("capture", capture_ours, raw_capture),
                ("restore", restore_ours, raw_restore),
            ):
                timing = await compare(
                    args.repeat, functools.partial(_timed, ours), functools.partial(_timed, raw)
                )
                rows.append(
                    Row(
                        f"checkpoints: {name}, {args.workspace_mb} MiB on Docker, vs tar in docker exec",
                        f"{mb / timing.ours:,.0f} MB/s",
                        f"{mb / timing.raw:,.0f} MB/s",
                        timing,
                        0.8,
                    )
                )
            await _cpu(capture_ours, raw_capture)
            await _relay_beside(args, scratch, capture_ours, raw_capture)
            await capture_ours()
            await source.write_file("big-7", os.urandom(1 << 20))
            again = await capture(source, DirectoryObjects(scratch / "objects"), previous=manifest[0])
            print(
                f"checkpoints: a second capture with one 1 MiB file changed stored {again.stored:,} bytes, "
                f"{again.stored / (args.workspace_mb << 20):.2%} of the workspace (goal under 1%)"
            )
            return rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _cpu(ours: Callable[[], Awaitable[object]], raw: Callable[[], Awaitable[object]]) -> None:
    """Print the CPU time of one capture in this process (every thread) against the Docker
    CLI's (the raw side's child): what the two cores' budget pays beyond the engine's and
    ``tar``'s, which both sides cost alike."""
    began = time.process_time()
    await ours()
    ours_cpu = time.process_time() - began
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    await raw()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    raw_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(
        f"checkpoints: CPU of one capture beside the engine's: nodeprov {ours_cpu:.2f} s "
        f"(reading, parsing, hashing, storing), the Docker CLI {raw_cpu:.2f} s"
    )


async def _restore(node: NodeHandle, manifest: list[Manifest], objects: Path) -> None:
    await restore(node, manifest[0], DirectoryObjects(objects))


_RELAYED = 1000  # messages of the fake agent's stream, 5 ms apart: several captures long


async def _relay_beside(
    args: argparse.Namespace,
    scratch: Path,
    capture_ours: Callable[[], Awaitable[object]],
    raw_capture: Callable[[], Awaitable[object]],
) -> None:
    """Print the relay's lateness (p50, p99, worst) alone, beside captures, beside raw tar."""
    steps = [{"stream": [_RELAYED, 200, 0.005]}]
    options = {"cli_path": fake_agent_command(scratch), "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
    agent = get_agent("claude", {**options, "permission": "edit"})
    freeze_start_up()  # as the CLI and the service do once started
    async with await get_provider("local", root=scratch / "nodes").provision() as node:
        figures = []
        for name, beside in (
            ("alone", None),
            ("beside captures", capture_ours),
            ("beside raw tar", raw_capture),
        ):
            late = await _relay(agent, node, beside)
            cut = statistics.quantiles(late, n=100)
            figures.append(
                f"{name} p50 {statistics.median(late):.1f} p99 {cut[98]:.1f} worst {max(late):.1f}"
            )
    print(
        f"checkpoints: the relay of {_RELAYED} messages (ms late) while {args.workspace_mb} MiB is captured "
        f"again and again: {'; '.join(figures)}"
    )


async def _relay(
    agent: Agent[Any], node: NodeHandle, beside: Callable[[], Awaitable[object]] | None
) -> list[float]:
    """How late (ms) each message of the fake agent's stream reached this process, with
    ``beside`` run again and again meanwhile."""
    late: list[float] = []
    async with anyio.create_task_group() as group:
        if beside is not None:

            async def again_and_again() -> None:
                while True:
                    await beside()

            group.start_soon(again_and_again)
        async with agent.session(node) as session:
            async for message in session.turn("stream"):
                if isinstance(message, AgentText) and message.text.startswith("t="):
                    late.append((time.time() - float(message.text[2:].split(" ", 1)[0])) * 1000)
        group.cancel_scope.cancel()
    assert len(late) == _RELAYED, len(late)
    return late
