"""The store under many nodeprov processes at once, with random SIGKILLs: the torture test's
driver (tests/test_store_torture.py runs a short seeded one in every CI run; this module, run
as a command, soaks for longer). Test-only: never shipped, never loaded by the CLI.

    python -m tests.store_torture [--store URL] [--seconds 40] [--seeds 1-10]

For a bounded time it keeps six to ten processes of these kinds running on one store, the
CLI's own, with the fake agent on local nodes: ``serve`` (and a client starting runs through
it), ``pool keep`` with ``run --pool``, ``run`` (agents kept or not), ``pause``, ``resume``,
``attach`` (taking over the runs of killed ones), ``gc`` and ``tokens create``. It SIGKILLs
one at random every so often (seeded), and notes every write a process was told succeeded: a
run it said finished or paused, a token it made. Each such write is read back at once by
another live process (the service), and at the end by this one: ``integrity_check`` (SQLite)
is ok, every acknowledged write is there (lost: 0), and nothing is there twice (an event, a
transcript entry, a run's end: duplicated 0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import DEVNULL
from typing import Any

import anyio
import apsw
import httpx
from anyio.abc import Process

from nodeprov.store import Store
from nodeprov.testing import fake_agent_command

_KINDS = ("run", "run", "run", "pool run", "pause", "resume", "attach", "gc", "tokens")
# How many run at once (the long-lived service and keeper among them): ten at most, and
# sometimes very few, when a process that closes its store may believe itself the last.
_PROCESSES = (2, 10)
_GRACE = 3.0  # a kept agent's grace: what a killed run leaves runs on that long
_LONG_LIVED = ("serve", "pool keep")


@dataclass
class Ledger:
    """What the processes did, and what they were told succeeded."""

    started: Counter[str] = field(default_factory=Counter)
    killed: Counter[str] = field(default_factory=Counter)
    acknowledged: Counter[str] = field(default_factory=Counter)
    finished: set[str] = field(default_factory=set)
    paused: set[str] = field(default_factory=set)
    tokens: dict[str, str] = field(default_factory=dict)
    seen_runs: set[str] = field(default_factory=set)
    orphans: set[str] = field(default_factory=set)
    unread: list[str] = field(default_factory=list)  # acknowledged, not read back by another process
    misread: list[str] = field(default_factory=list)  # acknowledged, and another process did not see it

    def figures(self) -> dict[str, Any]:
        return {
            "processes": sum(self.started.values()),
            "by kind": dict(sorted(self.started.items())),
            "kills": sum(self.killed.values()),
            "acknowledged": dict(sorted(self.acknowledged.items())),
        }


class Torture:
    """One seeded torture run on the store at ``url``, its nodes and agents under ``work``."""

    def __init__(self, url: str, seed: int, seconds: float, work: Path, python: str = sys.executable) -> None:
        self.url = url
        self.python = python
        """The interpreter whose nodeprov the processes run (another version's, to check
        that this test finds what that one got wrong)."""
        self.rng = random.Random(seed)
        self.seconds = seconds
        self.work = work
        self.ledger = Ledger()
        self.live: dict[Process, tuple[int, str]] = {}  # what runs: the order it started in, its kind
        self.running: set[str] = set()  # runs whose processes drive them now
        self.log = work / "processes.log"
        self.fake = fake_agent_command(work)
        self.env = {
            **os.environ,
            "NODEPROV_STORE": url,
            "NODEPROV_LOCAL_ROOT": str(work / "nodes"),
            "NO_COLOR": "1",
            "COLUMNS": "200",
            # The service's lease heartbeats have a connection of their own, opened at the first
            # renewal: soon, so that the service has two connections for most of its life.
            "NODEPROV_SERVE_CONFIG": json.dumps({"lease_ttl": 1.5}),
        }
        self.pool = f"warm-{seed}"  # one store may see several seeds (a soak on PostgreSQL)
        self.service: str | None = None
        self.admin = ""  # the service's client token

    def agent(self, steps: list[dict[str, Any]]) -> list[str]:
        return ["-o", f"cli_path={self.fake}", "-e", f"NODEPROV_FAKE_AGENT={json.dumps(steps)}"]

    async def open(self, kind: str, args: Sequence[str]) -> Process:
        with self.log.open("ab") as log:
            process = await anyio.open_process(
                [self.python, "-m", "nodeprov", *args], env=self.env, stdin=DEVNULL, stderr=log, cwd=self.work
            )
        self.live[process] = (sum(self.ledger.started.values()), kind)
        self.ledger.started[kind] += 1
        return process

    def note_runs(self, out: bytes) -> set[str]:
        """The runs named by the whole lines of ``out`` (JSON events)."""
        named = set()
        for line in out[: out.rfind(b"\n")].decode(errors="replace").splitlines():
            if line.startswith("{") and '"run_id"' in line:
                with suppress(ValueError):
                    if isinstance(run_id := json.loads(line).get("run_id"), str):
                        named.add(run_id)
        self.ledger.seen_runs |= named
        return named

    async def spawn(self, kind: str, args: Sequence[str]) -> tuple[int, str]:
        """Run ``nodeprov ARGS`` to its end (or its kill); its status and stdout."""
        process = await self.open(kind, args)
        out = b""
        driving: set[str] = set()
        try:
            assert process.stdout is not None
            with anyio.move_on_after(120):  # a stuck process is a finding: it ends unacknowledged
                async for chunk in process.stdout:
                    if b"\n" in chunk and b'"run_id"' in (out[out.rfind(b"\n") + 1 :] + chunk):
                        driving = self.note_runs(out + chunk)  # live now: a pause may find it
                        self.running |= driving
                    out += chunk
        finally:
            self.running -= driving
            await _ended(process)
            self.live.pop(process, None)
        assert process.returncode is not None
        return process.returncode, out.decode(errors="replace")

    # -- the kinds ----------------------------------------------------------------------

    async def run(self, pool: bool) -> None:
        long = self.rng.random() < 0.4
        steps: list[dict[str, Any]] = (
            [{"stream": [30, 100, 0.05]}] if long else [{"stream": [5, 100, 0.0]}, {"text": "done"}]
        )
        where = ["--pool", self.pool] if pool else ["-p", "local"]
        grace = ["--agent-grace", str(_GRACE) if self.rng.random() < 0.5 else "0"]
        status, out = await self.spawn(
            "run --pool" if pool else "run", ["run", "task", *where, *self.agent(steps), *grace, "--json"]
        )
        await self.acknowledge_run(status, out)

    async def acknowledge_run(self, status: int, out: str) -> None:
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        last = events[-1] if events else {}
        run_id = str(last.get("run_id") or "")
        if status == 0 and last.get("type") == "run.finished" and last.get("outcome") == "ok":
            self.ledger.finished.add(run_id)
            self.ledger.acknowledged["runs finished"] += 1
            await self.read_back(run_id, {"finished"})
        elif status == 3 and last.get("type") == "run.finished" and last.get("outcome") == "paused":
            self.ledger.paused.add(run_id)
            self.ledger.acknowledged["runs paused"] += 1
            await self.read_back(run_id, {"paused", "starting", "running", "finishing", "finished", "failed"})
        elif status < 0 and run_id:  # killed: another process takes it over, or ends it
            self.ledger.orphans.add(run_id)

    async def pause(self) -> None:
        candidates = sorted(self.running)
        if candidates:
            await self.spawn("pause", ["pause", self.rng.choice(candidates), "--timeout", "10"])

    async def resume(self) -> None:
        candidates = sorted(self.ledger.paused - self.ledger.finished)
        if candidates:
            run_id = self.rng.choice(candidates)
            status, out = await self.spawn(
                "resume", ["resume", run_id, *self.agent([{"text": "back"}]), "--json"]
            )
            await self.acknowledge_run(status, out)

    async def attach(self) -> None:
        candidates = sorted(self.ledger.orphans - self.ledger.finished)
        if candidates:
            status, out = await self.spawn("attach", ["attach", self.rng.choice(candidates), "--json"])
            await self.acknowledge_run(status, out)

    async def gc(self) -> None:
        await self.spawn("gc", ["gc", "-p", "local"])

    async def tokens(self) -> None:
        status, out = await self.spawn("tokens", ["tokens", "create", "t", "--scope", "read", "--json"])
        if status == 0 and out.strip():
            made = json.loads(out)
            self.ledger.tokens[made["id"]] = made["token"]
            self.ledger.acknowledged["tokens"] += 1
            await self.read_back_token(made["id"], made["token"])

    # -- reading back, by another process ---------------------------------------------------

    async def read_back(self, run_id: str, states: set[str]) -> None:
        """The service (another process) must know ``run_id`` in one of ``states``."""
        if self.service is None:
            self.ledger.unread.append(run_id)
            return
        try:
            async with httpx.AsyncClient(base_url=self.service, timeout=30) as client:
                answer = await client.get(
                    f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {self.admin}"}
                )
        except httpx.TransportError:
            self.ledger.unread.append(run_id)  # the service was being killed: read at the end
            return
        if answer.status_code != 200 or answer.json()["state"] not in states:
            self.ledger.misread.append(
                f"the service read {run_id} as {answer.status_code} {answer.text[:200]}"
            )

    async def read_back_token(self, token_id: str, secret: str) -> None:
        if self.service is None:
            return
        try:
            async with httpx.AsyncClient(base_url=self.service, timeout=30) as client:
                answer = await client.get("/v1/runs", headers={"Authorization": f"Bearer {secret}"})
        except httpx.TransportError:
            return
        if answer.status_code != 200:
            self.ledger.misread.append(f"the service refused token {token_id}: {answer.status_code}")

    # -- the long-lived ones ---------------------------------------------------------------

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """``nodeprov serve``, started again whenever it is killed; and a client of it."""
        first = True
        while True:
            process = await self.open("serve", ["serve", "--port", "0", "--allow-option", "claude.cli_path"])
            try:
                assert process.stdout is not None
                said = b""
                while b"\n" not in said:
                    said += await process.stdout.receive()
                url = said.decode().split("listening on ", 1)[1].split()[0]
                async with httpx.AsyncClient(base_url=url, timeout=5) as probe:
                    while process.returncode is None:
                        with suppress(httpx.TransportError):
                            if (await probe.get("/readyz")).status_code == 200:
                                break
                        await anyio.sleep(0.05)
                self.service = url
                if first:
                    first = False
                    task_status.started()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self.serve_client, tg)
                    await process.wait()
                    tg.cancel_scope.cancel()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
            finally:
                self.service = None
                await _ended(process)
                self.live.pop(process, None)

    async def serve_client(self, tg: anyio.abc.TaskGroup) -> None:
        body = {
            "prompt": "through the service",
            "provider": "local",
            "options": {"cli_path": self.fake, "ship_cli": False},
            "env": {"NODEPROV_FAKE_AGENT": json.dumps([{"stream": [5, 100, 0.0]}])},
        }
        headers = {"Authorization": f"Bearer {self.admin}"}
        assert self.service is not None
        async with httpx.AsyncClient(base_url=self.service, timeout=30, headers=headers) as client:
            while True:
                try:
                    made = await client.post("/v1/runs", json=body)
                    if made.status_code == 503:  # the store is busy: the client tries again
                        await anyio.sleep(0.2)
                        continue
                    if made.status_code != 201:
                        self.ledger.misread.append(f"the service refused a run: {made.text[:200]}")
                        return
                    run_id = made.json()["id"]
                    self.ledger.seen_runs.add(run_id)
                    state = await self.until_over(client, run_id)
                except httpx.TransportError:
                    return  # the service was killed
                if state == "finished":
                    self.ledger.finished.add(run_id)
                    self.ledger.acknowledged["runs finished (service)"] += 1
                    status, out = await self.spawn("status", ["status", run_id, "--json"])  # another process
                    said = out.splitlines()[0] if out.strip() else "{}"
                    if status >= 0 and (status != 0 or json.loads(said).get("state") != "finished"):
                        self.ledger.misread.append(f"the service said {run_id} finished; status: {out[:200]}")

    async def until_over(self, client: httpx.AsyncClient, run_id: str) -> str | None:
        """The state the service says ``run_id`` ended in (``None``: it does not know it)."""
        while True:
            answer = await client.get(f"/v1/runs/{run_id}")
            if answer.status_code == 404:
                self.ledger.misread.append(f"the service made {run_id} and then did not know it")
                return None
            state = answer.json().get("state") if answer.status_code == 200 else None
            if state in ("finished", "failed", "paused"):
                return str(state)
            await anyio.sleep(0.05)

    async def keep_pool(self) -> None:
        while True:
            await self.spawn("pool keep", ["pool", "keep"])

    # -- the whole ------------------------------------------------------------------------

    async def chaos(self) -> Ledger:
        async with await Store.open(self.url) as store:
            _, self.admin = await store.tokens.create("torture", ["read", "runs", "nodes", "admin"])
        made = await self.spawn("pool create", ["pool", "create", self.pool, "--size", "2", "--no-wait"])
        assert made[0] == 0, made
        async with anyio.create_task_group() as tg:
            await tg.start(self.serve)
            tg.start_soon(self.keep_pool)
            with anyio.move_on_after(self.seconds):
                while True:
                    await anyio.sleep(self.rng.uniform(0.05, 0.3))
                    if self.rng.random() < 0.05:
                        await self.lull(tg)
                    elif len(self.live) < self.rng.randint(*_PROCESSES):
                        tg.start_soon(self.one_of_a_kind, self.rng.choice(_KINDS))
                    if self.rng.random() < 0.15 and self.live:
                        # The long-lived ones less often: the service is the README's backbone.
                        ordered = sorted(self.live, key=lambda p: self.live[p][0])
                        weights = [0.25 if self.live[p][1] in _LONG_LIVED else 1.0 for p in ordered]
                        victim = self.rng.choices(ordered, weights)[0]
                        self.ledger.killed[self.live[victim][1]] += 1
                        _kill(victim)
            tg.cancel_scope.cancel()
        return self.ledger

    async def lull(self, tg: anyio.abc.TaskGroup) -> None:
        """A quiet moment, as between a user's commands: nothing new starts until only the
        service and the keeper run (or a few seconds pass), then one short command does,
        whose store, closed, may believe itself the last on the file."""
        with anyio.move_on_after(self.rng.uniform(1.0, 4.0)):
            while any(kind not in _LONG_LIVED for _, kind in self.live.values()):  # noqa: ASYNC110 - processes
                await anyio.sleep(0.05)
        tg.start_soon(self.one_of_a_kind, self.rng.choice(("tokens", "gc")))
        self.ledger.acknowledged["lulls"] += 1

    async def one_of_a_kind(self, kind: str) -> None:
        work = {
            "run": lambda: self.run(pool=False),
            "pool run": lambda: self.run(pool=True),
            "pause": self.pause,
            "resume": self.resume,
            "attach": self.attach,
            "gc": self.gc,
            "tokens": self.tokens,
        }[kind]
        await work()


def _kill(process: Process) -> None:
    """SIGKILL ``process`` by its pid. Not through ``Popen.send_signal``, which first reaps a
    child that has exited (``poll``), so that asyncio's watcher then reports it as 255: the
    pid of a child not yet waited for is never another process's."""
    with suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)


async def _ended(process: Process) -> None:
    """Wait for ``process`` to end, killing it if it has not (this task was cancelled)."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            _kill(process)
        await process.wait()


async def settle(python: str, work: Path, env: dict[str, str]) -> None:
    """After the chaos: reconcile what the killed processes left, and stop what runs on."""
    with anyio.fail_after(120):
        await anyio.sleep(_GRACE)  # the kept agents of killed runs give up
        gc = [python, "-m", "nodeprov", "gc", "-p", "local"]
        await anyio.run_process(gc, env=env, check=False, cwd=work)
    for pid in _processes_under(work):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _processes_under(work: Path) -> list[int]:
    """Processes whose command line or working directory is ``work``'s (the fake agents and
    their keepers, on local nodes under it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                named = str(work) in (entry / "cmdline").read_bytes().decode(errors="replace")
                if named or os.readlink(entry / "cwd").startswith(str(work)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def verify(url: str, ledger: Ledger, pool: str) -> dict[str, Any]:
    """Everything acknowledged is there, nothing twice; the figures."""
    figures: dict[str, Any] = {"integrity": "n/a", "lost": 0, "duplicated": 0}
    if url.startswith("sqlite:///"):
        connection = apsw.Connection(url.removeprefix("sqlite://"))  # never the stdlib's sqlite3
        try:
            figures["integrity"] = connection.execute("PRAGMA integrity_check").fetchall()[0][0]
        finally:
            connection.close()
    lost: list[str] = []
    duplicated: list[str] = []
    async with await Store.open(url) as store:
        for token_id, secret in ledger.tokens.items():
            found = await store.tokens.authenticate(secret)
            if found is None or found.id != token_id:
                lost.append(f"token {token_id}")
        for run_id in ledger.finished | ledger.paused:
            record = await store.run(run_id)
            if record is None:
                lost.append(f"run {run_id}")
                continue
            if run_id in ledger.finished and record.state != "finished":
                lost.append(f"run {run_id} said finished, stored {record.state}")
            if run_id in ledger.paused and not await store.snapshots(run_id):
                lost.append(f"run {run_id} said paused, no snapshot")
        for record in await store.runs():
            duplicated += await _twice(store, record.id, record.project_key, record.agent_session_id)
        if await store.pools.get(pool) is None:
            lost.append(f"pool {pool}")
    lost += ledger.misread  # at once, by another process: it may be there now, and yet was lost then
    figures.update(lost=len(lost), duplicated=len(duplicated), details=(lost + duplicated)[:10])
    return figures


async def _twice(store: Store, run_id: str, project: str | None, session: str | None) -> list[str]:
    """What run ``run_id`` holds twice: an event seq (a gap means a lost one too), a drive's
    end, a transcript entry."""
    found = []
    events = await store.events(run_id, limit=1_000_000)
    if [e.seq for e in events] != list(range(1, len(events) + 1)):
        found.append(f"run {run_id}: events {[e.seq for e in events]}")
    # A drive's end written twice: two ends with no start between, and no resume begun
    # between (a resume's drive killed before its start ends once, with no start).
    resumed = [snapshot.used_at for snapshot in await store.snapshots(run_id) if snapshot.used_at]
    ended: str | None = None  # when the drive ended, once it has
    for event in events:
        if event.kind == "run.started":
            ended = None
        elif event.kind == "run.finished":
            if ended is not None and not any(ended <= used <= event.at for used in resumed):
                found.append(f"run {run_id}: run.finished {event.seq} ends a drive that had ended")
            ended = event.at
    if project and session:
        entries = await store.transcripts.load({"project_key": project, "session_id": session}) or []
        uuids = [entry.get("uuid") for entry in entries if isinstance(entry, dict) and entry.get("uuid")]
        if len(uuids) != len(set(uuids)):
            found.append(f"run {run_id}: {len(uuids) - len(set(uuids))} transcript entries twice")
    return found


async def torture(
    url: str, seed: int, seconds: float, work: Path, python: str = sys.executable
) -> dict[str, Any]:
    """One seeded run: the chaos, the settling, the verification; the figures."""
    round_ = Torture(url, seed, seconds, work, python)
    ledger = await round_.chaos()
    await settle(python, work, round_.env)
    figures = await verify(url, ledger, round_.pool)
    return {"seed": seed, **ledger.figures(), **figures}


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="postgresql://... (default: a new SQLite file per seed)")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--seeds", default="1", help="a seed, or a range: 1-10")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the nodeprov to torture")
    given = parser.parse_args()
    failed = False
    for seed in _seeds(given.seeds):
        with tempfile.TemporaryDirectory(prefix="nodeprov-torture-") as directory:
            url = given.store or f"sqlite:///{directory}/store.db"
            figures = anyio.run(torture, url, seed, given.seconds, Path(directory), given.python)
        print(json.dumps(figures), flush=True)
        failed |= bool(figures["lost"] or figures["duplicated"] or figures["integrity"] not in ("ok", "n/a"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
