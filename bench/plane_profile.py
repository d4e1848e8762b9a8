"""The control plane's side of ``bench.scale`` alone, to profile it, and a report of a profile.

Record (py-spy samples every thread; the control plane's is the one whose stacks start at this
module)::

    py-spy record -r 250 -f raw -o plane.txt -- python -m bench.plane_profile --runs 100
    python -m bench.plane_profile --report plane.txt

The report gives each function's share of the control plane's samples, with what it calls
(inclusive) and by itself (self); the worker threads' (the store's, a child watcher's) are
left out: their waits count as samples too.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import tempfile
import time
from pathlib import Path

import anyio

from bench import scale
from bench.compiled_agent import compiled_fake_agent

_LINE = re.compile(r":\d+\)$")


async def _run(runs: int) -> None:
    os.environ["CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK"] = "1"
    args = argparse.Namespace(messages=200, message_bytes=1024, interval=0.01, stagger=0.0)
    command = compiled_fake_agent()
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        one_pass = scale.orchestrator_pass(args, command, tmp, f"sqlite:///{tmp / 'store.db'}")
        await scale._measure(2, 0.0, args, one_pass, tmp, memory=False)  # warm
        started = time.perf_counter()
        sample = await scale._measure(runs, 0.0, args, one_pass, tmp, memory=False)
        print(
            f"{runs} runs: wall {time.perf_counter() - started:.2f} s, control plane CPU"
            f" {sample.plane_cpu:.2f} s, relay p50 {scale._quantile(sample.latencies, 0.5) * 1000:.1f} ms"
        )


def report(path: Path, rows: int) -> None:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "bench/plane_profile.py" not in stack:
            continue  # another thread's
        frames = [_LINE.sub(")", frame) for frame in stack.split(";")]
        samples = int(count)
        total += samples
        for frame in set(frames):
            inclusive[frame] += samples
        own[frames[-1]] += samples
    print(f"{total} samples of the control plane's thread")
    for title, counter in (("inclusive", inclusive), ("self", own)):
        print(f"--- {title}")
        for frame, samples in counter.most_common(rows):
            print(f"{100 * samples / max(total, 1):5.1f}% {frame}")


if __name__ == "__main__":
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--report", type=Path, help="a py-spy raw profile to report on")
    parser.add_argument("--rows", type=int, default=60)
    arguments = parser.parse_args()
    if arguments.report is not None:
        report(arguments.report, arguments.rows)
    else:
        anyio.run(_run, arguments.runs)
