"""Benchmarks of the ``nodeprov`` command, each against the raw tool doing the same work.

1. ``nodeprov run`` on the local provider with the built-in scripted model (one Bash tool
   call, then an answer; a fresh store), against the raw Claude Code CLI run with ``-p`` on the
   same script, served by a scripted model this process starts for it, with a home and a
   working directory of its own; and against itself with ``--agent-grace 0``: what keeping
   the agent (the CLI's default) costs.
2. ``nodeprov --help`` against the interpreter starting and exiting (``python -c pass``): the
   floor under any Python command.
3. Importing the Claude Agent SDK against the same floor: what ``nodeprov run`` pays and the
   raw CLI does not (the SDK imports its ``mcp`` dependency whatever is used of it).

Run through ``bench/run.py``.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from nodeprov.agents.claude import bundled_cli_path
from nodeprov.offline import demo_messages

from .common import Row, compare

PROMPT = "say hello"
NODEPROV = str(Path(sys.executable).with_name("nodeprov"))


async def _timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    start = time.perf_counter()
    done = await anyio.run_process(argv, env=env, cwd=cwd, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{argv[:2]} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed


async def _medians(argv: list[str], runs: int) -> tuple[float, float]:
    """The median wall time and CPU time (user and system, the process's own) of ``runs`` runs."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(await _timed(argv))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


async def run_ours(tmp: Path, index: list[int], *flags: str) -> float:
    index[0] += 1
    where = tmp / f"ours-{index[0]}"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(where), "NODEPROV_STORE": f"sqlite:///{where}/store.db"}
    if "PYTHONPATH" in os.environ:  # a checkout's code, measured from it
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    argv = [NODEPROV, "run", "-p", "local", "-s", f"root={where}/nodes", "--json", *flags, PROMPT]
    return await _timed(argv, env)


async def run_raw(tmp: Path, cli: str, index: list[int]) -> float:
    index[0] += 1
    where = tmp / f"raw-{index[0]}"
    workspace = where / "workspace"
    await anyio.Path(workspace).mkdir(parents=True)
    start = time.perf_counter()
    async with demo_messages(PROMPT) as model:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(where),
            "CLAUDE_CONFIG_DIR": str(where / ".claude"),
            **model.agent_env(),
        }
        argv = [cli, "-p", PROMPT, "--output-format", "stream-json", "--verbose"]
        await _timed(
            [*argv, "--permission-mode", "bypassPermissions"], env, workspace
        )  # as nodeprov's "full"
    return time.perf_counter() - start


async def run(args: argparse.Namespace) -> list[Row]:
    cli = bundled_cli_path()
    if cli is None:
        raise RuntimeError("the Claude Code CLI is not installed (claude-agent-sdk's bundled one)")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        index = [0]  # each run of ours in a directory of its own
        timing = await compare(
            args.repeat,
            functools.partial(run_ours, tmp, index),
            functools.partial(run_raw, tmp, cli, [0]),
        )
        rows = [
            Row(
                "cli: nodeprov run (local, scripted model) vs claude -p on the same script",
                f"{timing.ours * 1000:,.0f} ms",
                f"{timing.raw * 1000:,.0f} ms",
                timing,
                1 / 1.5,  # issue 30: at most 1.5x the raw CLI's time
            )
        ]
        # The CLI keeps its agent by default (a kept agent outlives a lost control plane):
        # what keeping costs a run, against the agent spawned directly.
        timing = await compare(
            args.repeat,
            functools.partial(run_ours, tmp, index),
            functools.partial(run_ours, tmp, index, "--agent-grace", "0"),
        )
        rows.append(
            Row(
                "cli: nodeprov run, its agent kept (the default) vs --agent-grace 0 (not kept)",
                f"{timing.ours * 1000:,.0f} ms",
                f"{timing.raw * 1000:,.0f} ms",
                timing,
                1 / 1.05,  # issue 47: keeping costs at most 5% of the run
            )
        )
        timing = await compare(
            args.repeat,
            functools.partial(_timed, [NODEPROV, "--help"]),
            functools.partial(_timed, [sys.executable, "-c", "pass"]),
        )
        help_wall, help_cpu = await _medians([NODEPROV, "--help"], 9)
        pass_wall, pass_cpu = await _medians([sys.executable, "-c", "pass"], 9)
        rows.append(
            Row(
                "cli: nodeprov --help vs python -c pass, whole processes, the median of 9 (CPU)",
                f"{help_wall * 1000:,.0f} ms ({help_cpu * 1000:,.0f})",
                f"{pass_wall * 1000:,.0f} ms ({pass_cpu * 1000:,.0f})",
                timing,
            )
        )
        timing = await compare(
            args.repeat,
            functools.partial(_timed, [sys.executable, "-c", "import claude_agent_sdk"]),
            functools.partial(_timed, [sys.executable, "-c", "pass"]),
        )
        rows.append(
            Row(
                "cli: python -c 'import claude_agent_sdk' vs python -c pass",
                f"{timing.ours * 1000:,.0f} ms",
                f"{timing.raw * 1000:,.0f} ms",
                timing,
            )
        )
    return rows
