"""``nodeprov run`` killed the ways real terminals, ``timeout``, systemd and CI kill it: the
real Claude Code CLI, a scripted model, local and Docker nodes.

SIGTERM and SIGHUP pause the run (kind ``system``) like Ctrl-C; after SIGKILL nothing can
clean up, and the agent must stop by itself: on a local node its supervisor sees its
control plane die at once; on any node the agent's stdin guard stops it once the channel
closes: SIGTERM after the stop policy's EOF and TERM graces, SIGKILL a TERM grace later
(15 s in all by default).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest

from nodeprov import LABEL_SESSION_ID
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until

from .agents import require_claude_cli

pytestmark = pytest.mark.anyio

STOP_BOUND = 5 + 5 + 5 + 5  # the guard: eof grace + term grace, then term grace to SIGKILL; a margin


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    require_claude_cli()


@pytest.fixture(params=["local", "docker"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    if request.param == "local":
        return ["-s", f"root={tmp_path / 'nodes'}"]
    image = request.getfixturevalue("base_image")
    settings = {"image": image, "network_mode": "host", "pull": "never"}
    return [
        "--provider",
        "docker",
        "--ship-cli",
        *[arg for k, v in settings.items() for arg in ("-s", f"{k}={v}")],
    ]


def agent_processes(model: ScriptedModel) -> list[int]:
    """Agent CLI processes whose environment points at ``model``, wherever they run on this
    machine (containers' processes are visible from here)."""
    needle = model.url.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if (
                    needle in (entry / "environ").read_bytes()
                    and b"stream-json" in (entry / "cmdline").read_bytes()
                ):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def run_with(tmp_path: Path, model: ScriptedModel, *args: str) -> subprocess.Popen[str]:
    """``nodeprov run --json`` against ``model`` (as a real model's name and endpoint)."""
    return subprocess.Popen(
        [sys.executable, "-m", "nodeprov", "run", "--json", *real_model(model), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=environment(tmp_path),
    )


def real_model(model: ScriptedModel) -> list[str]:
    """The options that make ``model`` the agent's model, as a real model's name and endpoint
    (a real model on a local node needs an explicit permission mode)."""
    env_args = [arg for name, value in model.agent_env().items() for arg in ("-e", f"{name}={value}")]
    return ["--model", "claude-scripted", "--permission", "full", *env_args]


def environment(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", "NODEPROV_STORE": f"sqlite:///{tmp_path}/store.db"}


def start(tmp_path: Path, model: ScriptedModel, where: list[str]) -> tuple[subprocess.Popen[str], str]:
    marker = unique_marker()
    model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    process = run_with(tmp_path, model, *where, "task")
    deadline = time.monotonic() + 90
    while not host_processes_matching(marker):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the agent's tool never started"
        time.sleep(0.05)
    return process, marker


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_pause_the_run(
    signum: signal.Signals, where: list[str], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    process, marker = start(tmp_path, scripted_model, where)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 3, stderr
    events = [json.loads(line) for line in stdout.splitlines()]
    paused = next(e for e in events if e["type"] == "run.paused")
    assert (paused["pause_kind"], paused["reason"]) == ("system", f"nodeprov received {signum.name}")
    assert events[-1]["outcome"] == "paused"
    assert host_processes_matching(marker) == []
    assert agent_processes(scripted_model) == []


async def test_sigkill_leaves_no_agent_running(
    where: list[str], scripted_model: ScriptedModel, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    process, marker = start(tmp_path, scripted_model, [*where, "--agent-grace", "0"])  # not kept
    process.kill()
    process.communicate(timeout=30)
    killed = time.monotonic()

    async def stopped() -> bool:
        return not agent_processes(scripted_model) and not host_processes_matching(marker)

    assert await wait_until(stopped, STOP_BOUND), "the agent outlived its control plane"
    print(f"\nthe agent stopped {time.monotonic() - killed:.1f} s after its control plane was SIGKILLed")
    requests = len(scripted_model.requests)
    await anyio.sleep(1)
    assert len(scripted_model.requests) == requests  # nothing calls the model any more
    if "docker" in where:  # the container itself waits for gc once the lease expires; not here
        client: Any = request.getfixturevalue("docker_client")
        _remove_run_containers(client, tmp_path)


async def test_a_sigkilled_runs_kept_agent_is_stopped_once_its_grace_is_out(
    scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """Kept (the default), the agent outlives a SIGKILLed ``nodeprov run`` for its grace with
    nobody attached (`nodeprov attach` could take it over), then its keeper stops it and what
    it started."""
    grace = 8  # renewed every 2 s: at least 6 s of it are left at the SIGKILL
    where = ["-s", f"root={tmp_path / 'nodes'}", "--agent-grace", str(grace)]
    process, marker = start(tmp_path, scripted_model, where)
    process.kill()
    process.communicate(timeout=30)
    assert host_processes_matching(marker), "the kept agent's tool was stopped with its control plane"
    assert agent_processes(scripted_model)

    async def stopped() -> bool:
        return not agent_processes(scripted_model) and not host_processes_matching(marker)

    assert await wait_until(stopped, grace + STOP_BOUND), "the kept agent outlived its grace"


def _remove_run_containers(client: docker.DockerClient, tmp_path: Path) -> None:
    import apsw  # the store's own SQLite: never two copies on one file

    db = apsw.Connection(str(tmp_path / "store.db"))
    try:
        run_ids = [row[0] for row in db.execute("SELECT id FROM runs")]
    finally:
        db.close()
    for run_id in run_ids:
        for container in client.api.containers(all=True, filters={"label": f"{LABEL_SESSION_ID}={run_id}"}):
            client.api.remove_container(container["Id"], force=True)


def test_logs_follow_from_another_process_sees_every_event_in_order(
    scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    scripted_model.extend(
        [ToolUse("Bash", {"command": "for i in 1 2 3; do echo tick $i; sleep 0.5; done"}), Text("all done")]
    )
    running = run_with(tmp_path, scripted_model, "-s", f"root={tmp_path / 'nodes'}", "go")
    assert running.stdout is not None
    started = json.loads(running.stdout.readline())
    assert started["type"] == "run.started"
    follower = subprocess.run(
        [sys.executable, "-m", "nodeprov", "logs", started["run_id"], "--follow", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(tmp_path),
        check=False,
    )
    rest, _ = running.communicate(timeout=120)
    assert running.returncode == 0
    assert follower.returncode == 0, follower.stderr
    lived = [started, *(json.loads(line) for line in rest.splitlines())]
    followed = [json.loads(line) for line in follower.stdout.splitlines()]
    assert followed == lived  # every event, in order, the same in both processes
    assert followed[-1]["type"] == "run.finished"
