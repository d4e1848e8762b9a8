"""The README's own flows on one SQLite store shared by several nodeprov processes: the two
reproductions of issue 43 (a second process made the service's writes vanish; a pool keeper
beside two pool runs corrupted the file), as tests. The torture test with random kills is
tests/test_store_torture.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import apsw
import pytest

from nodeprov.testing import fake_agent_command
from tests.serving import fake_run, serving

pytestmark = pytest.mark.anyio

DEADLINE = 60


def nodeprov(store: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed CLI as a process of its own, on ``store``."""
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "NODEPROV_STORE": store, **(env or {})},
    )


def descriptors_on(pid: int, path: Path) -> int:
    """How many of process ``pid``'s descriptors are open on ``path``."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd) == str(path)
        except OSError:
            continue
    return count


def integrity(path: Path) -> str:
    """``PRAGMA integrity_check`` of the file, through the SQLite the store uses (two copies
    of SQLite in one process must never have one file open at once)."""
    connection = apsw.Connection(str(path))
    try:
        return str(connection.execute("PRAGMA integrity_check").fetchall()[0][0])
    finally:
        connection.close()


def recorded_nodes(path: Path) -> set[str]:
    connection = apsw.Connection(str(path))
    try:
        return {
            str(row[0]) for row in connection.execute("SELECT id FROM pool_nodes UNION SELECT id FROM nodes")
        }
    finally:
        connection.close()


async def test_a_second_process_leaves_the_services_writes_in_place(tmp_path: Path) -> None:
    """`nodeprov serve` in one shell, `nodeprov tokens create` and `nodeprov status` in
    another: the service's WAL stays while it writes, and every run it reports finished is
    known to the other processes. It broke when the service opened its second connection:
    making sure of the file's mode opened and closed a descriptor on it, which dropped the
    process's locks, so the next process to close its own connection believed itself the
    last, checkpointed and deleted the WAL the service still wrote to."""
    db = tmp_path / "shared.db"
    store = f"sqlite:///{db}"
    async with serving(tmp_path, store=store, config={"lease_ttl": 1.5}) as served:
        with anyio.fail_after(DEADLINE):  # its lease's heartbeats have their own connection
            while descriptors_on(served.process.pid, db) < 2:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)
        made = nodeprov(store, "tokens", "create", "ci", "--scope", "runs", "--scope", "read", "--json")
        assert made.returncode == 0, made.stderr
        secret = json.loads(made.stdout)["token"]
        assert await anyio.Path(f"{db}-wal").exists(), "the service's WAL was deleted under it"
        async with served.client(secret) as client:
            ids = []
            for index in range(3):
                answer = await client.post("/v1/runs", json=fake_run(tmp_path, [{"text": f"run {index}"}]))
                assert answer.status_code == 201, answer.text
                ids.append(answer.json()["id"])
            with anyio.fail_after(DEADLINE):
                for run_id in ids:
                    while (await client.get(f"/v1/runs/{run_id}")).json()["state"] != "finished":  # noqa: ASYNC110
                        await anyio.sleep(0.05)
        for run_id in ids:  # the service said finished: every other process reads it so
            status = nodeprov(store, "status", run_id, "--json")
            assert status.returncode == 0, status.stderr
            assert json.loads(status.stdout.splitlines()[0])["state"] == "finished"
    assert integrity(db) == "ok"


async def test_a_pool_keeper_beside_runs_claiming_from_it_keeps_the_file_whole(tmp_path: Path) -> None:
    """`nodeprov pool keep` with two `nodeprov run --pool` at a time, round after round: the
    file stays whole, the keeper keeps its lease and exits cleanly, and every node on disk
    is one the store recorded. Before, "database disk image is malformed" came within
    seconds: every process's second connection dropped its first one's locks."""
    db = tmp_path / "shared.db"
    store = f"sqlite:///{db}"
    root = tmp_path / "nodes"
    made = nodeprov(store, "pool", "create", "warm", "-s", f"root={root}", "--size", "2", "--no-wait")
    assert made.returncode == 0, made.stderr
    fake = fake_agent_command(tmp_path)
    steps = json.dumps([{"text": "from the pool"}])
    keeper_log = tmp_path / "keeper.log"
    with keeper_log.open("wb") as log:
        keeper = await anyio.open_process(
            [sys.executable, "-m", "nodeprov", "-v", "pool", "keep", "--store", store],
            stderr=log,
            env={**os.environ, "NODEPROV_STORE": store},
        )
    try:

        async def run_from_pool(index: int) -> None:
            done = await anyio.to_thread.run_sync(
                lambda: nodeprov(
                    store,
                    "run",
                    f"task {index}",
                    "--pool",
                    "warm",
                    "-o",
                    f"cli_path={fake}",
                    "-e",
                    f"NODEPROV_FAKE_AGENT={steps}",
                    "--agent-grace",
                    "0",
                )
            )
            assert done.returncode == 0, done.stderr

        with anyio.fail_after(DEADLINE):  # its lease's heartbeats have their own connection
            while descriptors_on(keeper.pid, db) < 2:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)
        for round_ in range(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_from_pool, 2 * round_)
                tg.start_soon(run_from_pool, 2 * round_ + 1)
    finally:
        keeper.terminate()
        with anyio.fail_after(DEADLINE):
            status = await keeper.wait()
    said = keeper_log.read_text()
    assert status == 0, said[-3000:]
    assert "lease" not in said or "was lost" not in said, said[-3000:]
    assert integrity(db) == "ok"
    recorded = recorded_nodes(db)
    on_disk = {path.name for path in root.iterdir()} if root.exists() else set()
    assert on_disk <= recorded, f"nodes the store never recorded: {on_disk - recorded}"
