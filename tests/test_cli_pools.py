"""The pool commands as a process: create (filled before it returns), ls, run --pool (the node
claimed, the pool refilled while the run lasts), rm (nothing left), keep; and their errors.
The local provider and the scripted model: real nodes and a real agent CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeprov.registry import get_provider

pytestmark = pytest.mark.anyio


def nodeprov(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=_env(tmp_path),
    )


def _env(tmp_path: Path) -> dict[str, str]:
    root = tmp_path / "nodes"
    root.mkdir(mode=0o700, exist_ok=True)
    return {
        **os.environ,
        "NODEPROV_STORE": f"sqlite:///{tmp_path}/store.db",
        "NODEPROV_LOCAL_ROOT": str(root),
        "COLUMNS": "200",
    }


def pools(tmp_path: Path) -> list[dict[str, Any]]:
    listed = nodeprov(tmp_path, "pool", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


async def local_nodes(tmp_path: Path) -> set[str]:
    provider = get_provider("local", root=str(tmp_path / "nodes"))
    return {info.node_id for info in await provider.list_nodes()}


async def test_a_pool_made_filled_claimed_by_a_run_refilled_and_removed(tmp_path: Path) -> None:
    made = nodeprov(tmp_path, "pool", "create", "web", "--size", "2", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["ready"] == 2
    [status] = pools(tmp_path)
    assert (status["name"], status["provider"], status["ready"], status["held"]) == ("web", "local", 2, False)
    before = await local_nodes(tmp_path)
    assert len(before) == 2
    ran = nodeprov(tmp_path, "run", "--pool", "web", "--agent-grace", "0", "hello")
    assert ran.returncode == 0, ran.stderr
    assert "claimed from pool web" in ran.stdout
    claimed = next(line.split()[1] for line in ran.stdout.splitlines() if "claimed from pool" in line)
    assert claimed in before
    after = await local_nodes(tmp_path)
    assert claimed not in after  # used once, destroyed with its run
    [status] = pools(tmp_path)
    assert status["ready"] == 2  # refilled by the run's control plane while its run lasted
    assert after == before - {claimed} | (after - before)
    removed = nodeprov(tmp_path, "pool", "rm", "web")
    assert removed.returncode == 0, removed.stderr
    assert pools(tmp_path) == []
    assert await local_nodes(tmp_path) == set()


async def test_pool_keep_fills_until_signalled(tmp_path: Path) -> None:
    made = nodeprov(tmp_path, "pool", "create", "web", "--size", "1", "--no-wait")
    assert made.returncode == 0, made.stderr
    keeper = subprocess.Popen(  # noqa: ASYNC220 - a long-lived process, signalled below
        [sys.executable, "-m", "nodeprov", "pool", "keep", "web"],
        env=_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert keeper.stderr is not None
        assert "keeping web pool" in keeper.stderr.readline()
        while not (listed := pools(tmp_path)) or listed[0]["ready"] < 1:
            assert keeper.poll() is None
        assert listed[0]["held"] is True
        keeper.send_signal(signal.SIGTERM)
        assert keeper.wait(timeout=60) == 0
    finally:
        keeper.kill()
        keeper.wait()
    [status] = pools(tmp_path)
    assert status["held"] is False  # its lease released: the next keeper takes the pool over
    assert len(await local_nodes(tmp_path)) == 1
    assert nodeprov(tmp_path, "pool", "rm", "web").returncode == 0


def test_pool_errors_are_one_line(tmp_path: Path) -> None:
    missing = nodeprov(tmp_path, "run", "--pool", "nope", "hi")
    assert missing.returncode == 2
    assert "no pool 'nope'" in missing.stderr
    assert nodeprov(tmp_path, "pool", "create", "web", "--size", "0").returncode == 0
    both = nodeprov(tmp_path, "run", "--pool", "web", "--provider", "local", "hi")
    assert both.returncode == 2
    assert "a run names a provider or a pool, not both" in both.stderr
    again = nodeprov(tmp_path, "pool", "create", "web")
    assert again.returncode == 2
    assert "exists already" in again.stderr
    bad = nodeprov(tmp_path, "pool", "create", "Bad_Name")
    assert bad.returncode == 2
    assert "lowercase" in bad.stderr
    gone = nodeprov(tmp_path, "pool", "rm", "nope")
    assert gone.returncode == 2
    assert "no pool 'nope'" in gone.stderr
