"""``nodeprov run --agent opencode`` against the raw OpenCode CLI doing the same turn.

Ours: ``nodeprov run`` on the local provider with the built-in scripted model (one ``bash``
call, then an answer; a fresh store and node). Raw: ``opencode run --format json`` on the same
script, served by a scripted Chat Completions server this process starts for it, with
directories of its own (a fresh database, as a fresh node's) and what it needs to run
offline: the same config, catalog fetch and update off, its plugin package marked installed,
and a title given so that it asks its model for none (nodeprov gives one too). The OpenCode
CLI is ``NODEPROV_OPENCODE_CLI`` or the one ``scripts/opencode.sh`` installed.

Run through ``bench/run.py`` (``--suite opencode``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio

from nodeprov.agents.opencode import OpenCodeAgent
from nodeprov.offline import demo_chat

from .common import Row, compare

PROMPT = "say hello"
NODEPROV = str(Path(sys.executable).with_name("nodeprov"))
_REPO = Path(__file__).resolve().parent.parent


def _cli() -> str:
    if not os.environ.get("NODEPROV_OPENCODE_CLI"):
        found = sorted(_REPO.glob(".tools/opencode-*/node_modules/opencode-linux-x64/bin/opencode"))
        if found:
            os.environ["NODEPROV_OPENCODE_CLI"] = str(found[-1])
    cli = OpenCodeAgent.local_cli()
    if cli is None:
        raise RuntimeError("the OpenCode CLI is not installed: run scripts/opencode.sh")
    return cli


async def _timed(argv: list[str], env: dict[str, str], cwd: Path | None = None, stdin: bytes = b"") -> float:
    start = time.perf_counter()
    done = await anyio.run_process(argv, input=stdin, env=env, cwd=cwd, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{argv[:2]} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed


async def run_ours(tmp: Path, cli: str, index: list[int]) -> float:
    index[0] += 1
    where = tmp / f"ours-{index[0]}"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(where),
        "NODEPROV_STORE": f"sqlite:///{where}/store.db",
        "NODEPROV_OPENCODE_CLI": cli,
    }
    argv = [
        NODEPROV,
        "run",
        "--agent",
        "opencode",
        "-p",
        "local",
        "-s",
        f"root={where}/nodes",
        "--json",
        PROMPT,
    ]
    return await _timed(argv, env)


async def run_raw(tmp: Path, cli: str, index: list[int]) -> float:
    index[0] += 1
    where = tmp / f"raw-{index[0]}"
    workspace, config = where / "workspace", where / "config" / "opencode"
    await anyio.Path(workspace).mkdir(parents=True)
    start = time.perf_counter()
    await anyio.Path(config / "node_modules").mkdir(parents=True)
    lock = {"packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
    await anyio.Path(config / "package-lock.json").write_text(json.dumps(lock))
    async with demo_chat(PROMPT) as model:
        settings = {**model.opencode_config(), "permission": {"*": "allow"}, "share": "disabled"}
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(where),
            **{
                f"XDG_{kind.upper()}_HOME": str(where / kind) for kind in ("data", "config", "state", "cache")
            },
            "OPENCODE_CONFIG_CONTENT": json.dumps(settings),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            **model.agent_env(),
        }
        argv = [cli, "run", "--format", "json", "--title", "bench", PROMPT]
        await _timed(argv, env, workspace)
    return time.perf_counter() - start


async def run(args: argparse.Namespace) -> list[Row]:
    cli = _cli()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        timing = await compare(
            args.repeat,
            functools.partial(run_ours, tmp, cli, [0]),
            functools.partial(run_raw, tmp, cli, [0]),
        )
    return [
        Row(
            "opencode: nodeprov run --agent opencode (local, scripted model) vs opencode run, same script",
            f"{timing.ours * 1000:,.0f} ms",
            f"{timing.raw * 1000:,.0f} ms",
            timing,
            1 / 1.3,
        )
    ]
