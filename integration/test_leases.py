"""Leases across control planes: orchestrators as separate processes share PostgreSQL; the
victims run in PID namespaces of their own with the same hostname (where ``host:pid``
ownership would be misjudged) and are SIGKILLed mid-run, several at a time. The survivor
reconciles their runs and reaps their nodes within the stated bound (lease expiry plus the
reconcile interval, plus destroy time), and never touches its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from nodeprov.runs import RunState
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until
from nodeprov.testing.pytest_plugin import require_engine

pytestmark = pytest.mark.anyio

# Rounds of victims killed at once: the waits for their leases to expire overlap, and the
# survivor tells apart dead control planes whose pids and hostname are the same.
ROUNDS = int(os.environ.get("NODEPROV_LEASE_ROUNDS", "3"))
VICTIMS_PER_ROUND = 3
# Long enough that a busy machine never starves the survivor's heartbeat (every ttl / 3) past
# its expiry: with 1 s, a loaded CI had the survivor judged dead and its runs reaped; with 5 s,
# once, a CI beside a loop of the fast tests (load average above 20).
LEASE_TTL = 8.0
RECONCILE_INTERVAL = 0.5
BOUND = LEASE_TTL + RECONCILE_INTERVAL + 10  # destroying local nodes takes well under 10 s

CONTROL_PLANE = textwrap.dedent("""
    import json, signal, sys, anyio
    from nodeprov.runs import Orchestrator
    from nodeprov.store import Store

    async def main() -> None:
        url, root, cli, marker, count = sys.argv[1:6]
        steps = [{"spawn": ["sleep", marker]}, {"stall": True}]
        options = {"cli_path": cli, "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
        async with await Store.open(url) as store, Orchestrator(
            store, lease_ttl=%(ttl)s, reconcile_interval=%(interval)s
        ) as orchestrator:
            runs = [
                await orchestrator.start("work", provider="local", provider_settings={"root": root},
                                         options=options, permission="edit")
                for _ in range(int(count))
            ]
            for run in runs:
                async for _ in run.events():
                    if run.agent_session_id:
                        break
            print(json.dumps([run.id for run in runs]), flush=True)
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    break  # leaving the orchestrator pauses what runs

    anyio.run(main)
""") % {"ttl": LEASE_TTL, "interval": RECONCILE_INTERVAL}


async def start_plane(argv: list[str]) -> tuple[Process, list[str]]:
    plane = await anyio.open_process(argv)
    assert plane.stdout is not None
    with anyio.fail_after(60):
        line = await TextReceiveStream(plane.stdout).receive()
    return plane, json.loads(line)


async def start_planes(argvs: list[list[str]]) -> list[tuple[Process, list[str]]]:
    """:func:`start_plane` for each of ``argvs``, all at once."""
    planes: list[tuple[Process, list[str]]] = []

    async def start(argv: list[str]) -> None:
        planes.append(await start_plane(argv))

    async with anyio.create_task_group() as tg:
        for argv in argvs:
            tg.start_soon(start, argv)
    return planes


async def test_a_killed_control_plane_in_another_pid_namespace_is_reaped_by_a_survivor(
    postgres_url: str, tmp_path: Path
) -> None:
    unshare = shutil.which("unshare")
    require_engine("unshare(1) and root, for a PID namespace", bool(unshare) and os.geteuid() == 0)
    cli = fake_agent_command(tmp_path)
    survivor_root, victim_root = tmp_path / "survivor", tmp_path / "victim"
    survivor_marker = unique_marker()
    survivor, kept = await start_plane(
        [sys.executable, "-c", CONTROL_PLANE, postgres_url, str(survivor_root), cli, survivor_marker, "2"]
    )
    reconcile_times = []

    def in_a_pid_namespace(marker: str) -> list[str]:
        return [
            str(unshare),
            "--pid",
            "--fork",
            "--kill-child=SIGKILL",
            sys.executable,
            "-c",
            CONTROL_PLANE,
            postgres_url,
            str(victim_root),
            cli,
            marker,
            "2",
        ]

    try:
        async with await Store.open(postgres_url) as store:
            for _ in range(ROUNDS):
                markers = [unique_marker() for _ in range(VICTIMS_PER_ROUND)]
                victims = await start_planes([in_a_pid_namespace(marker) for marker in markers])
                for victim, _ in victims:
                    victim.kill()  # and its namespace's init with it: SIGKILL, no cleanup
                    await victim.wait()
                    await victim.aclose()
                killed = time.monotonic()
                doomed = [run_id for _, run_ids in victims for run_id in run_ids]

                async def reaped(doomed: list[str] = doomed) -> bool:
                    states = [(await store.run(run_id)).state for run_id in doomed]  # type: ignore[union-attr]
                    return all(state == RunState.FAILED for state in states) and not any(
                        victim_root.iterdir()
                    )

                assert await wait_until(reaped, BOUND), "the survivor did not reconcile in time"
                reconcile_times.append(time.monotonic() - killed)
                for marker in markers:
                    assert host_processes_matching(marker) == []  # no orphan
                for run_id in kept:  # no false deletion
                    record = await store.run(run_id)
                    assert record is not None
                    assert record.state == RunState.RUNNING, record.error
                assert len(list(survivor_root.iterdir())) == len(kept)
                sleeps = [p for p in host_processes_matching(survivor_marker) if ": sleep " in p]
                assert len(sleeps) == len(kept)  # the survivor's agents' tools still run
    finally:
        survivor.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            await survivor.wait()
    print(f"\nreconciled a dead control plane in {min(reconcile_times):.1f}-{max(reconcile_times):.1f} s")
