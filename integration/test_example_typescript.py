"""The example TypeScript control plane (examples/typescript-control-plane), run by Node.js
with its pinned npm packages (``scripts/examples.sh`` installs them) against a real
``nodeprov serve``: it starts a run of the real Claude Code CLI on a local node against the
built-in scripted model, relays every event through the npm ``eventsource`` client exactly
once and in order, prints the result and exits 0; it sends its bearer token; a refusal is
one line and a non-zero exit. The module's fixture builds the example with its pinned
``tsc``, which type-checks it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from nodeprov.store import Store
from nodeprov.testing.pytest_plugin import require_engine
from tests.serving import Served, serving, sse_events

from .agents import TURN_TIMEOUT, require_claude_cli

pytestmark = [pytest.mark.anyio, pytest.mark.engine("node")]

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "typescript-control-plane"
PROMPT = "Say hello from the node"


def _installed_lock() -> bool:
    """Whether the example's node_modules/ was installed from its current lockfile."""
    stamp = EXAMPLE / "node_modules" / ".nodeprov-lock"
    lock = hashlib.sha256((EXAMPLE / "package-lock.json").read_bytes()).hexdigest()
    return stamp.is_file() and stamp.read_text().strip() == lock


@pytest.fixture(scope="module")
def example() -> list[str]:
    """The command that runs the example, built by its pinned tsc (a type error fails here)."""
    node = shutil.which("node")
    require_engine("Node.js", node is not None, "apt-get install nodejs (20 or later)")
    assert node is not None
    major = subprocess.run([node, "-p", "process.versions.node"], capture_output=True, text=True, check=True)
    require_engine("Node.js 20 or later", int(major.stdout.split(".")[0]) >= 20, f"this is {major.stdout}")
    require_engine(
        "the example's node_modules (from its package-lock.json)",
        _installed_lock(),
        "run scripts/examples.sh (`make engines` does)",
    )
    built = subprocess.run(
        [node, "node_modules/typescript/bin/tsc", "--pretty", "false"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, f"tsc: {built.stdout}{built.stderr}"
    return [node, str(EXAMPLE / "dist" / "main.js")]


@pytest.fixture
def _claude_cli() -> None:
    require_claude_cli()


async def _run_example(
    command: list[str],
    served: Served,
    *args: str,
    token: str | None = None,
    extra: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEPROV_")}
    env["NODEPROV_URL"] = served.url
    if token is not None:
        env["NODEPROV_TOKEN"] = token
    if extra is not None:
        env["NODEPROV_EXTRA"] = json.dumps(extra)
    with anyio.fail_after(TURN_TIMEOUT):
        return await anyio.run_process([*command, *args], env=env, check=False)


async def _stored_events(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """Every event the service stored for the run (its history, not followed)."""
    async with client.stream("GET", f"/v1/runs/{run_id}/events", params={"follow": "false"}) as response:
        assert response.status_code == 200
        return [data async for _, _, data in sse_events(response)]


async def _check_relayed_run(
    client: httpx.AsyncClient, done: subprocess.CompletedProcess[bytes], notes: int = 0
) -> None:
    """The example relayed every stored event once, in order, then printed the result (and
    ``notes`` lines about its event stream on stderr)."""
    assert done.returncode == 0, done.stderr.decode()
    *relayed, summary = [json.loads(line) for line in done.stdout.decode().splitlines()]
    run_id = summary["run_id"]
    stored = await _stored_events(client, run_id)
    assert [e["seq"] for e in relayed] == [e["seq"] for e in stored] == list(range(1, len(stored) + 1))
    assert relayed == stored
    assert [stored[0]["type"], stored[-1]["type"], stored[-1]["outcome"]] == [
        "run.started",
        "run.finished",
        "ok",
    ]
    results = [
        e["message"] for e in stored if e["type"] == "agent.message" and e["message"]["kind"] == "result"
    ]
    assert len(results) == 1
    assert results[0]["text"].startswith("(scripted model) I ran a command on the node")
    assert summary == {"run_id": run_id, "outcome": "ok", "result": results[0]["text"], "error": None}
    assert done.stderr.decode().splitlines()[0] == f"run {run_id} started; following its events"
    assert len(done.stderr.decode().splitlines()) == 1 + notes


@pytest.mark.usefixtures("_claude_cli")
async def test_the_example_relays_every_event_and_prints_the_result(
    tmp_path: Path, example: list[str]
) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        done = await _run_example(example, served, PROMPT)
        await _check_relayed_run(client, done)
        runs = (await client.get("/v1/runs")).json()
        assert [(r["prompt"], r["agent_options"]["model"]) for r in runs] == [(PROMPT, None)]
        node_dirs = list((tmp_path / "nodes").iterdir())
        assert node_dirs == [], "the run's node is destroyed"


@pytest.mark.usefixtures("_claude_cli")
async def test_the_example_sends_its_token(tmp_path: Path, example: list[str]) -> None:
    async with serving(tmp_path) as served:
        async with await Store.open(served.store) as store:
            _, secret = await store.tokens.create("example", ("runs",))
        without = await _run_example(example, served, PROMPT)
        assert without.returncode == 2
        assert without.stdout == b""
        assert without.stderr.decode().splitlines() == [
            "error: 401 unauthorized: a bearer token is required (Authorization: Bearer TOKEN)"
        ]
        done = await _run_example(example, served, PROMPT, token=secret)
        async with served.client(secret) as client:  # the events' stream needed the token too
            await _check_relayed_run(client, done)


async def test_a_refusal_is_one_line_and_a_non_zero_exit(tmp_path: Path, example: list[str]) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        done = await _run_example(example, served, "--provider", "nope", PROMPT)
        assert done.returncode == 2
        assert done.stdout == b""
        assert done.stderr.decode().splitlines() == [
            "error: 422 invalid: provider 'nope' is not offered by this service"
        ]
        bad = await _run_example(example, served, PROMPT, extra={"timeout": -1})
        assert (bad.returncode, bad.stderr.decode().splitlines()) == (
            2,
            ["error: 422 invalid: timeout: Input should be greater than 0"],
        )
        assert (await client.get("/v1/runs")).json() == []


@pytest.mark.usefixtures("_claude_cli")
async def test_the_relay_is_exact_across_reconnects(tmp_path: Path, example: list[str]) -> None:
    """A service that cuts off every client that lags at all: the EventSource reconnects
    with Last-Event-ID each time, and still relays each event once, in order."""
    async with serving(tmp_path, config={"max_lag": 1e-6}) as served, served.client() as client:
        done = await _run_example(example, served, PROMPT)
        notes = done.stderr.decode().splitlines()[1:]
        assert notes, "cut off at least once"
        assert all(line.startswith("event stream cut off (the client read too slowly") for line in notes), (
            notes
        )
        await _check_relayed_run(client, done, notes=len(notes))
