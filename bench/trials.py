"""Seeded SIGKILL trials of kept agents: a control plane dies mid-tool and another takes over.

On each provider, ``--trials`` turns of the real Claude Code CLI on a scripted model, each a
tool that runs ``--tool-seconds`` (60). The control plane, ``nodeprov run --agent-grace``
on PostgreSQL, is SIGKILLed at a random second of the tool (seeded, per provider); at once a
second control plane, ``nodeprov attach RUN`` (another process, in another PID namespace on
docker, ssh and kubernetes), takes the run over once the first one's lease has expired and
sees it to its end. A trial passes when:

- the second control plane re-attached within the lease bound (``nodeprov run``'s lease, 30 s)
  plus 2 s of the SIGKILL;
- the run finished ``ok``, its events numbered without a gap, one ``agent.reattached``;
- its messages are those of an undisturbed run of the same script on the same provider (run
  first, as the reference), each once, in order;
- the model had exactly the script's two requests, the second with one tool result (no
  "continue", no tool call repeated);
- nothing of the trial is left: no process of its tool, no node.

    python -m bench.trials [--providers local docker ssh kubernetes] [--trials 30]
                           [--seed 29] [--parallel 8] [--tool-seconds 60] [--json FILE]

Needs root (``unshare``), the Docker engine, PostgreSQL (``make engines``), and for
kubernetes the cached cluster build (``scripts/kubernetes.sh``); not beside the test suite
(one Kubernetes cluster per machine). A local node's processes are this machine's: on local
the second control plane is another process in another session, in the same PID namespace.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import psycopg

from integration.agents import on_docker, on_ssh
from integration.kubernetes import running_cluster
from integration.pods import pod_settings
from integration.sshd import running_sshd
from nodeprov import get_provider
from nodeprov.agents.messages import message_to_json
from nodeprov.offline import ScriptedModel, Text, ToolUse
from nodeprov.runs import AgentMessage, event_from_json
from nodeprov.store import Store
from nodeprov.testing.conformance import host_processes_matching

_REPO = Path(__file__).resolve().parents[1]
_POSTGRES = os.environ.get(
    "NODEPROV_TEST_POSTGRES_URL", "postgresql://nodeprov:nodeprov@127.0.0.1:5432/nodeprov_test"
)
_LEASE_TTL = 30.0  # `nodeprov run`'s lease (Orchestrator's default)
_SLACK = 2.0
_TURN_LIMIT = 600.0
# What identifies a message across runs: its kind and content, not its ids, usage or cost.
_VOLATILE = {"id", "tool_use_id", "session_id", "usage", "cost_usd", "raw"}


@dataclass
class Provider:
    name: str
    settings: dict[str, Any]
    other_pid_namespace: bool

    def arguments(self) -> list[str]:
        args = ["--provider", self.name, *(["--ship-cli"] if self.name != "local" else [])]
        for key, value in self.settings.items():
            args += ["-s", f"{key}={json.dumps(value)}"]
        return args


@dataclass
class Trial:
    provider: str
    index: int  # 0: the undisturbed reference run
    kill_after: float | None  # seconds into the tool
    run_id: str = ""
    node_id: str = ""
    killed_at: float = 0.0  # wall clock
    lease_expired_at: float = 0.0  # the killed control plane's lease, by the database's clock
    reattached_after: float | None = None  # seconds from the SIGKILL to `agent.reattached`
    after_lease: float | None = None  # seconds from the lease's expiry to `agent.reattached`
    turn_seconds: float = 0.0
    messages: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _fingerprint(event: AgentMessage) -> str:
    said = {k: v for k, v in message_to_json(event.message).items() if k not in _VOLATILE}
    return json.dumps(said, sort_keys=True)


def _environment(store_url: str) -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", "NODEPROV_STORE": store_url}


class _Lines:
    """A process's stdout as ``--json`` events, each with the wall clock it arrived at."""

    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.changed = anyio.Event()

    async def read(self, stream: anyio.abc.ByteReceiveStream) -> None:
        buffer = b""
        async for chunk in stream:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    self.events.append((time.time(), json.loads(line)))
            self.changed.set()
            self.changed = anyio.Event()
        self.changed.set()

    def first(self, kind: str) -> tuple[float, dict[str, Any]] | None:
        return next(((at, e) for at, e in self.events if e["type"] == kind), None)


async def _collect(stream: anyio.abc.ByteReceiveStream, into: bytearray) -> None:
    async for chunk in stream:
        into.extend(chunk)


async def _until(condition: Callable[[], Awaitable[bool]], limit: float) -> None:
    with anyio.fail_after(limit):
        while not await condition():  # noqa: ASYNC110 - a state outside this process
            await anyio.sleep(0.05)


async def _tool_running(marker: str) -> bool:
    return bool(await anyio.to_thread.run_sync(host_processes_matching, marker))


async def _tool_gone(marker: str) -> bool:
    return not await _tool_running(marker)


async def run_trial(
    provider: Provider, trial: Trial, store: Store, store_url: str, tool_seconds: int
) -> None:
    marker = f"{secrets.randbelow(10**9):09d}"  # the tool's sleep: findable among processes
    # In a shell of its own: Claude Code refuses a bare long `sleep` as a tool.
    tool = f"sh -c 'sleep {tool_seconds}.{marker}; echo tool finished'"
    env = _environment(store_url)
    started = time.monotonic()
    with ScriptedModel([ToolUse("Bash", {"command": tool}), Text("all done")]) as model:
        model_args = ["--model", "claude-scripted", "--permission", "full"]
        model_args += [arg for name, value in model.agent_env().items() for arg in ("-e", f"{name}={value}")]
        first = [sys.executable, "-m", "nodeprov", "run", "--json", "--agent-grace", "300"]
        first += [*model_args, *provider.arguments(), "work long"]
        lines = _Lines()
        async with await anyio.open_process(first, env=env, start_new_session=True) as process:
            assert process.stdout is not None
            assert process.stderr is not None
            said = bytearray()
            async with anyio.create_task_group() as tg:
                tg.start_soon(lines.read, process.stdout)
                tg.start_soon(_collect, process.stderr, said)

                async def tool_started() -> bool:
                    if process.returncode is not None:
                        raise RuntimeError(
                            f"nodeprov run exited {process.returncode} before the tool ran: "
                            + said.decode(errors="replace")[-800:]
                        )
                    return await _tool_running(marker)

                await _until(tool_started, 180)
                run_started = lines.first("run.started")
                node_ready = lines.first("node.ready")
                trial.run_id = str(run_started[1]["run_id"]) if run_started else ""
                trial.node_id = str(node_ready[1]["node_id"]) if node_ready else ""
                if trial.kill_after is None:
                    with anyio.fail_after(_TURN_LIMIT):
                        code = await process.wait()
                    if code != 0:
                        trial.failures.append(f"the undisturbed run exited {code}")
                else:
                    await anyio.sleep(trial.kill_after)
                    process.kill()
                    trial.killed_at = time.time()
                    await process.wait()
                tg.cancel_scope.cancel()
        if trial.kill_after is not None:
            await _take_over(provider, trial, store, env)
        trial.turn_seconds = time.monotonic() - started
        await _check(provider, trial, store, model, marker)


async def _take_over(provider: Provider, trial: Trial, store: Store, env: dict[str, str]) -> None:
    record = await store.run(trial.run_id)
    lease = await store.leases.get(record.owner.removeprefix("lease:")) if record and record.owner else None
    trial.lease_expired_at = lease.expires_ms / 1000 if lease else 0.0
    second = [sys.executable, "-m", "nodeprov", "attach", "--json", trial.run_id]
    if provider.other_pid_namespace:
        second = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *second]
    lines = _Lines()
    async with await anyio.open_process(second, env=env, start_new_session=True) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        said = bytearray()
        with anyio.move_on_after(_TURN_LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lines.read, process.stdout)
                tg.start_soon(_collect, process.stderr, said)
                code = await process.wait()
        if process.returncode is None:
            process.kill()
            trial.failures.append("nodeprov attach did not end")
            return
    if code != 0:
        trial.failures.append(f"nodeprov attach exited {code}: {said.decode(errors='replace')[-500:]}")
    reattached = lines.first("agent.reattached")
    if reattached is None:
        trial.failures.append("no agent.reattached")
    else:
        trial.reattached_after = reattached[0] - trial.killed_at
        trial.after_lease = reattached[0] - trial.lease_expired_at
        if trial.reattached_after > _LEASE_TTL + _SLACK:
            trial.failures.append(f"re-attached {trial.reattached_after:.1f} s after the SIGKILL")


async def _check(provider: Provider, trial: Trial, store: Store, model: ScriptedModel, marker: str) -> None:
    if not trial.run_id:
        trial.failures.append("no run.started")
        return
    record = await store.run(trial.run_id)
    if record is None or record.outcome != "ok":
        trial.failures.append(
            f"the run ended {record.outcome if record else 'unknown'}: {record and record.error}"
        )
    events = [event_from_json(json.loads(e.body)) for e in await store.events(trial.run_id, limit=100_000)]
    kinds = [event.kind for event in events]
    if [e.seq for e in events] != list(range(1, len(events) + 1)):
        trial.failures.append("the events' numbers have a gap or a repeat")
    if kinds.count("run.finished") != 1:
        trial.failures.append(f"run.finished {kinds.count('run.finished')} times")
    if trial.kill_after is not None and kinds.count("agent.reattached") != 1:
        trial.failures.append(f"agent.reattached {kinds.count('agent.reattached')} times")
    trial.messages = [
        _fingerprint(e).replace(marker, "MARKER").replace(trial.node_id, "NODE")
        for e in events
        if isinstance(e, AgentMessage)
    ]
    requests = model.agent_requests
    results = [
        block
        for message in (requests[-1].messages if requests else [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    if len(requests) != 2 or len(results) != 1:
        trial.failures.append(
            f"the model had {len(requests)} requests, the last with {len(results)} tool results"
        )
    try:
        await _until(lambda: _tool_gone(marker), 60)
    except TimeoutError:
        trial.failures.append("the tool's processes were left running")
    async with get_provider(provider.name, **provider.settings) as nodes:
        if any(info.node_id == trial.node_id for info in await nodes.list_nodes()):
            trial.failures.append(f"node {trial.node_id} was left")


def _compare_to_reference(trials: list[Trial]) -> None:
    reference = next(t for t in trials if t.kill_after is None)
    for trial in trials:
        if trial is not reference and trial.messages != reference.messages:
            trial.failures.append(
                f"messages {len(trial.messages)} differ from the reference's {len(reference.messages)}"
            )


@contextmanager
def infrastructure(names: list[str]) -> Iterator[dict[str, Provider]]:
    image = subprocess.run(
        [str(_REPO / "integration" / "images" / "build-base.sh")], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    providers: dict[str, Provider] = {}
    with _ssh(names) as sshd_settings, _kubernetes(names, image) as pods:
        for name in names:
            settings: dict[str, Any]
            if name == "local":
                settings = {"root": str(Path(f"/tmp/nodeprov-trials-{os.getpid()}"))}
            elif name == "docker":
                settings = on_docker(image)["provider_settings"]
            elif name == "ssh":
                settings = sshd_settings
            elif name == "kubernetes":
                settings = pods
            else:
                raise SystemExit(f"no trials for provider {name}")
            providers[name] = Provider(name, settings, other_pid_namespace=name != "local")
        yield providers


@contextmanager
def _ssh(names: list[str]) -> Iterator[dict[str, Any]]:
    if "ssh" not in names:
        yield {}
        return
    with running_sshd() as sshd:
        yield on_ssh(sshd)["provider_settings"]


@contextmanager
def _kubernetes(names: list[str], image: str) -> Iterator[dict[str, Any]]:
    if "kubernetes" not in names:
        yield {}
        return
    built = subprocess.run(
        ["bash", str(_REPO / "scripts" / "kubernetes.sh")], capture_output=True, text=True, check=True
    )
    with running_cluster(Path(built.stdout.split()[-1])) as cluster:
        cluster.import_docker_image(image)
        yield pod_settings(cluster, image, tools_host_path=True)


@asynccontextmanager
async def _schema() -> AsyncIterator[str]:
    """A schema of its own on the server, made over a plain connection (a store opened on the
    default schema would migrate it)."""
    async with await psycopg.AsyncConnection.connect(_POSTGRES, autocommit=True) as admin:
        schema = f"trials_{secrets.token_hex(4)}"
        await admin.execute(f"CREATE SCHEMA {schema}")
        try:
            yield f"{_POSTGRES}?options=-csearch_path%3D{schema}"
        finally:
            await admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _spread(values: list[float], unit: str, digits: int) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} / {max(values):.{digits}f} {unit}"


def _summary(trials: list[Trial], names: list[str]) -> None:
    print(
        "\n| provider | trials | passed "
        f"| SIGKILL to re-attached, p50 / max (bound {_LEASE_TTL + _SLACK:.0f} s) "
        "| lease expiry to re-attached, p50 / max | trial, p50 / max |"
    )
    print("|---|---|---|---|---|---|")
    for name in names:
        mine = [t for t in trials if t.provider == name and t.kill_after is not None]
        after = [t.reattached_after for t in mine if t.reattached_after is not None]
        lease = [t.after_lease for t in mine if t.after_lease is not None]
        print(
            f"| {name} | {len(mine)} | {sum(not t.failures for t in mine)} | {_spread(after, 's', 1)} "
            f"| {_spread(lease, 's', 2)} | {_spread([t.turn_seconds for t in mine], 's', 0)} |"
        )
    for trial in trials:
        for failure in trial.failures:
            print(f"FAILED {trial.provider} #{trial.index} (kill at {trial.kill_after}): {failure}")


async def main(arguments: argparse.Namespace) -> int:
    with infrastructure(arguments.providers) as providers:
        async with _schema() as store_url, await Store.open(store_url) as store:
            trials: list[Trial] = []
            for name in arguments.providers:
                rng = random.Random(f"{arguments.seed}-{name}")
                trials.append(Trial(name, 0, None))
                trials += [
                    Trial(name, i, round(rng.uniform(0, arguments.tool_seconds), 2))
                    for i in range(1, arguments.trials + 1)
                ]
            limit = anyio.CapacityLimiter(arguments.parallel)

            async def one(trial: Trial) -> None:
                async with limit:
                    try:
                        await run_trial(
                            providers[trial.provider], trial, store, store_url, arguments.tool_seconds
                        )
                    except Exception as error:  # a trial that broke is a failed trial, reported
                        leaves = error.exceptions if isinstance(error, ExceptionGroup) else [error]
                        trial.failures += [f"{type(leaf).__name__}: {leaf}" for leaf in leaves]
                    print(
                        f"{trial.provider} #{trial.index}: {'ok' if not trial.failures else trial.failures}",
                        flush=True,
                    )

            # The references first: every trial is compared to its provider's.
            async with anyio.create_task_group() as tg:
                for trial in trials:
                    if trial.kill_after is None:
                        tg.start_soon(one, trial)
            async with anyio.create_task_group() as tg:
                for trial in trials:
                    if trial.kill_after is not None:
                        tg.start_soon(one, trial)
    for name in arguments.providers:
        _compare_to_reference([t for t in trials if t.provider == name])
    _summary(trials, arguments.providers)
    if arguments.json:
        await anyio.Path(arguments.json).write_text(json.dumps([asdict(t) for t in trials], indent=1))
    return 1 if any(t.failures for t in trials) else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--providers", nargs="+", default=["local", "docker", "ssh", "kubernetes"])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--tool-seconds", type=int, default=60)
    parser.add_argument("--json", help="write every trial's figures and failures here")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the cluster and sshd on the way out
    sys.exit(anyio.run(main, parser.parse_args()))
