"""Kept agents under faults, seeded (issue 45): each round starts ``nodeprov run`` (its agent
kept, the CLI's default; the fake agent saying ``m0`` .. ``m5`` with pauses between, and a
child of its own named by a marker, as a tool would be), and then, drawn from the seed:

- lets it finish; or SIGTERMs the agent's keeper while it runs;
- or SIGKILLs the CLI mid-turn, then takes the run over: one ``nodeprov attach``, two at once,
  ``nodeprov attach --pause``, ``nodeprov pause`` beside an attach, or the library's
  ``adopt`` and ``pause`` at once.

Checked each round: no message of the agent's twice in the run's events, in order, and all
of them when the run finished; no run said paused while its agent (or what it started) was
alive; nothing of the agent left once the run is over, and no node. On local nodes, or on
Docker nodes (``--docker IMAGE``: the fake agent runs in the container on this machine's
Python, mounted read-only; any image with a POSIX shell and a C library as new as this
machine's). ``python -m tests.kept_trials --rounds 50 --seed 7 [--docker IMAGE]`` soaks and
prints the figures; tests/test_kept_trials.py runs every face once on each."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import DEVNULL
from typing import Any

import anyio
from anyio.abc import Process

from nodeprov import get_provider
from nodeprov.errors import RunStateError
from nodeprov.runs import Orchestrator, Run, RunState
from nodeprov.store import RunRecord, Store
from nodeprov.testing import fake_agent as fake_agent_module
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import host_processes_matching, run, unique_marker, wait_until
from nodeprov.testing.conformance.keeper import term_keeper

MESSAGES = 6
FACES = ("finish", "keeper SIGTERM", "attach", "two attaches", "attach --pause", "pause", "library pause")
_END = 120.0  # seconds a round's run has to end in
_MESSAGE = re.compile(r"^m(\d+)$")


@dataclass(frozen=True)
class Where:
    """Where a trial's runs go: ``nodeprov run``'s provider and ``--setting`` values, and the
    fake agent's path on its nodes."""

    provider: str
    settings: dict[str, Any]
    agent: str

    def args(self) -> list[str]:
        settings = (f"{name}={json.dumps(value)}" for name, value in self.settings.items())
        return ["-p", self.provider, *(arg for setting in settings for arg in ("-s", setting))]


def on_local(work: Path) -> Where:
    """Local nodes under ``work``."""
    return Where("local", {"root": str(work / "nodes")}, fake_agent_command(work))


_PYTHON, _FAKE = "/opt/nodeprov-trials/python", "/opt/nodeprov-trials/fake"


def on_docker(work: Path, image: str) -> Where:
    """Docker nodes of ``image``, this machine's Python and the fake agent mounted read-only."""
    fake = work / "fake"
    fake.mkdir()
    shutil.copy(fake_agent_module.__file__, fake / "fake_agent.py")
    python = f"{_PYTHON}/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    libraries = f"LD_LIBRARY_PATH={_PYTHON}/lib"  # an interpreter built --enable-shared needs its own
    command = f'{libraries} exec {python} -I -S {_FAKE}/fake_agent.py "$@"'
    (fake / "fake-agent").write_text(f"#!/bin/sh\n{command}\n")
    (fake / "fake-agent").chmod(0o755)
    mounts = [
        {"target": _PYTHON, "source": sys.base_prefix, "type": "bind", "read_only": True},
        {"target": _FAKE, "source": str(fake), "type": "bind", "read_only": True},
    ]
    settings = {"image": image, "pull": "never", "network_mode": "host", "mounts": mounts}
    return Where("docker", settings, f"{_FAKE}/fake-agent")


@dataclass
class Figures:
    rounds: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)
    paused_alive: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    nodes_left: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    slowest: dict[str, float] = field(default_factory=dict)  # seconds, by face

    def as_json(self) -> dict[str, Any]:
        return {
            "rounds": dict(sorted(self.rounds.items())),
            "outcomes": dict(sorted(self.outcomes.items())),
            "slowest round (s)": {face: round(took, 1) for face, took in sorted(self.slowest.items())},
            "lost": len(self.lost),
            "repeated": len(self.repeated),
            "paused with a live agent": len(self.paused_alive),
            "left running": len(self.left),
            "nodes left": len(self.nodes_left),
            "details": self.lost + self.repeated + self.paused_alive + self.left + self.nodes_left,
        }


class Trials:
    """Seeded rounds, their runs ``where`` says, their store under ``work``."""

    def __init__(self, seed: int, work: Path, where: Where, *, every_face: bool = False) -> None:
        self.rng = random.Random(seed)
        self.every_face = every_face  # the faces in turn, not drawn
        self.work = work
        self.where = where
        self.store_url = f"sqlite:///{work}/store.db"
        self.figures = Figures()
        self.env = {**os.environ, "NODEPROV_STORE": self.store_url, "NO_COLOR": "1"}

    async def cli(self, *args: str) -> Process:
        with (self.work / "cli.log").open("ab") as log:
            return await anyio.open_process(
                [sys.executable, "-m", "nodeprov", *args],
                env=self.env,
                stdin=DEVNULL,
                stderr=log,
                cwd=self.work,
            )

    async def to_end(self, process: Process) -> int:
        with anyio.fail_after(_END):
            assert process.stdout is not None
            async for _ in process.stdout:
                pass
            return await process.wait()

    async def round(self, number: int) -> None:
        marker = unique_marker()
        steps: list[dict[str, Any]] = [{"spawn": ["sleep", marker]}]
        for k in range(MESSAGES):
            steps += [{"text": f"m{k}"}, {"sleep": round(self.rng.uniform(0.05, 0.4), 3)}]
        agent = ["-o", f"cli_path={self.where.agent}", "-e", f"NODEPROV_FAKE_AGENT={json.dumps(steps)}"]
        face = FACES[number % len(FACES)] if self.every_face else self.rng.choice(FACES)
        self.figures.rounds[face] += 1
        began = anyio.current_time()
        run = await self.cli("run", "task", *self.where.args(), *agent, "--json")
        # A take-over needs the agent running: mostly killed mid-turn, now and then at its start.
        early = face in ("finish", "keeper SIGTERM") or self.rng.random() < 0.15
        run_id = await _until_messages(run, self.rng.randrange(0 if early else 1, MESSAGES))
        where = f"round {number} ({face}, run {run_id})"
        if face == "finish":
            await self.to_end(run)
        elif face == "keeper SIGTERM":
            await self.term_keeper(run_id)
            await self.to_end(run)
        else:
            with suppress(ProcessLookupError):  # it ended first: the take-over finds it over
                run.kill()
            await run.wait()
            await self.take_over(face, run_id, marker, where)
        outcome = await self.check(run_id, marker, where)
        self.figures.outcomes[f"{face}: {outcome}"] += 1
        took = anyio.current_time() - began
        self.figures.slowest[face] = max(took, self.figures.slowest.get(face, 0.0))

    async def take_over(self, face: str, run_id: str, marker: str, where: str) -> None:
        if face == "attach":
            await self.to_end(await self.cli("attach", run_id, "--json"))
        elif face == "two attaches":
            first, second = (
                await self.cli("attach", run_id, "--json"),
                await self.cli("attach", run_id, "--json"),
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.to_end, first)
                tg.start_soon(self.to_end, second)
        elif face == "attach --pause":
            if await self.to_end(await self.cli("attach", "--pause", run_id, "--json")) == 3:
                self.paused(marker, where)
        elif face == "pause":
            pause = await self.cli("pause", run_id, "--timeout", "60")
            attach = await self.cli("attach", run_id, "--json")
            if await self.to_end(pause) == 0:
                self.paused(marker, where)
            await self.to_end(attach)
        else:
            await self.library_pause(run_id, marker, where)

    async def library_pause(self, run_id: str, marker: str, where: str) -> None:
        async with await Store.open(self.store_url) as store, Orchestrator(store, take_over=False) as plane:
            adopted: list[Run] = []

            async def taken() -> bool:  # once its control plane is known dead, unless it is over
                try:
                    adopted.append(await plane.adopt(run_id))
                except RunStateError:
                    record = await store.run(run_id)
                    return record is None or not RunState(record.state).live
                return True

            if not await wait_until(taken, _END) or not adopted:
                return
            try:
                await adopted[0].pause("human", "kept trials")
            except RunStateError:
                return  # it ended first
            self.paused(marker, where)
            await adopted[0].wait()

    def paused(self, marker: str, where: str) -> None:
        """A face said paused: the agent and what it started must be gone now."""
        if host_processes_matching(marker):
            self.figures.paused_alive.append(f"{where}: said paused, its agent's child alive")

    async def term_keeper(self, run_id: str) -> None:
        async with await Store.open(self.store_url) as store:
            record = await store.run(run_id)
        if record is None or record.agent_keeper is None or record.node_id is None:
            return
        node, keeper = await _provider(record).attach(record.node_id), record.agent_keeper

        async def started() -> bool:  # the keeper is recorded before it starts: findable from then on
            code, _, _ = await run(node, "test", "-s", f"{keeper}/pid")
            return code == 0

        assert await wait_until(started, _END), f"{run_id}: its keeper {keeper} never started"
        await term_keeper(node, keeper)

    async def check(self, run_id: str, marker: str, where: str) -> str:
        """Check the round's run once it is over; how it ended."""
        async with await Store.open(self.store_url) as store:

            async def over() -> bool:
                record = await store.run(run_id)
                return record is not None and not RunState(record.state).live

            if not await wait_until(over, _END):
                async with Orchestrator(store, take_over=False) as plane:  # nobody came for it
                    await plane.reconcile()
            record = await store.run(run_id)
            events = [json.loads(event.body) for event in await store.events(run_id)]
        outcome = f"{record.state} ({record.outcome})" if record is not None else "unknown"
        said = [
            int(found.group(1))
            for event in events
            if event["type"] == "agent.message"
            and event["message"].get("kind") == "text"  # not the result, which repeats the last
            and (found := _MESSAGE.match(str(event["message"].get("text", ""))))
        ]
        if len(said) != len(set(said)):
            self.figures.repeated.append(f"{where}: messages {said}")
        if said != sorted(said):
            self.figures.repeated.append(f"{where}: out of order {said}")
        if record is not None and record.state == "finished" and sorted(set(said)) != list(range(MESSAGES)):
            self.figures.lost.append(f"{where}: finished with messages {said}")

        async def gone() -> bool:
            return not host_processes_matching(marker)

        if not await wait_until(gone, 30):
            self.figures.left.append(f"{where}: {host_processes_matching(marker)}")
        if record is not None and record.node_id is not None and not await _node_gone(record):
            self.figures.nodes_left.append(f"{where}: node {record.node_id} left ({record.state})")
        return outcome


def _provider(record: RunRecord) -> Any:
    return get_provider(record.node_provider, **json.loads(record.node_settings))


async def _node_gone(record: RunRecord) -> bool:
    """Whether the run's node is gone from its platform within 30 s (a run paused or over
    releases it)."""
    provider, node_id = _provider(record), record.node_id

    async def gone() -> bool:
        return node_id not in {node.node_id for node in await provider.list_nodes()}

    return await wait_until(gone, 30)


async def _until_messages(process: Process, count: int) -> str:
    """Read ``process``'s ``--json`` events until its run's id and ``count`` agent messages
    (or its end)."""
    assert process.stdout is not None
    said: list[dict[str, Any]] = []
    buffered, run_id = b"", ""
    with anyio.fail_after(_END):
        while sum(event["type"] == "agent.message" for event in said) < count or not run_id:
            try:
                buffered += await process.stdout.receive()
            except anyio.EndOfStream:
                break
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                if line.startswith(b"{"):
                    event = json.loads(line)
                    said.append(event)
                    run_id = run_id or str(event.get("run_id") or "")
    assert run_id, f"the run never started: {said}"
    return run_id


async def trials(
    seed: int, rounds: int, work: Path, where: Where, *, every_face: bool = False
) -> dict[str, Any]:
    """``rounds`` seeded rounds under ``work`` (``every_face``: the faces in turn); the figures."""
    runner = Trials(seed, work, where, every_face=every_face)
    for number in range(rounds):
        await runner.round(number)
    return {"seed": seed, "provider": where.provider} | runner.figures.as_json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--docker", metavar="IMAGE", help="on Docker nodes of IMAGE, not local ones")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodeprov-kept-trials-") as work:
        where = on_docker(Path(work), args.docker) if args.docker else on_local(Path(work))
        print(json.dumps(anyio.run(trials, args.seed, args.rounds, Path(work), where), indent=2))


if __name__ == "__main__":
    main()
