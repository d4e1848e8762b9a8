"""Every query on a hot path uses an index: the statements the store runs for liveness checks,
claims, events after N, compare-and-sets, pause requests, retention and the rest are captured
as they run, and SQLite's plan of each names an index for every table it reads (no full
scan). integration/test_store_plans_postgres.py checks PostgreSQL's plans of the same calls.
``python -m tests.test_store_plans`` prints the plans."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import apsw
import pytest

from nodeprov.runs.state import LIVE_STATES, RunState
from nodeprov.store import (
    EntryBatch,
    EventRecord,
    NodeRecordState,
    PoolRecord,
    RunRecord,
    Store,
    _postgres,
    _sqlite,
    now,
)
from nodeprov.store.entries import EntryKey, Summary, keyed

pytestmark = pytest.mark.anyio

Statement = tuple[str, tuple[Any, ...]]
HotPath = Callable[[Store], Awaitable[object]]

_OVER = tuple(state for state in RunState if state not in LIVE_STATES)


async def seed(store: Store) -> None:
    """A little of everything, so each hot path finds rows."""
    session = await store.active_session("ws", "claude")
    lease = await store.leases.acquire("me", 60)
    for index, state in enumerate(("running", "finished", "paused")):
        run_id = f"run-{index}"
        record = RunRecord(
            run_id, session.id, "ws", "task", "local", "{}", "{}", state, None, None, f"n-{index}",
            "sid", "pk", f"lease:{lease.id}", None, now(), now(), "claude",
        )  # fmt: skip
        await store.create_run(record)
        await store.append_events([EventRecord(run_id, seq, "k", now(), "{}") for seq in range(1, 4)])
        await store.node_intent(f"n-{index}", "local", run_id)
    await store.transcripts.append({"project_key": "pk", "session_id": "sid"}, [{"uuid": "u-1"}], fold=_fold)
    holder = f"lease:{lease.id}"
    await store.pools.create(
        PoolRecord("warm", "local", "{}", "[]", "{}", 2, 3600.0, 2, "active", holder, None, None, 0, now())
    )
    await store.pools.add_intent("warm", "p-1", f"lease:{lease.id}")
    await store.pools.made_ready("p-1")


def _fold(previous: Summary | None, key: EntryKey, entries: list[Any]) -> Summary:
    return {"session_id": key["session_id"], "mtime": 0, "data": {"entries": len(entries)}}


# Each hot path, as the callers of the store make it (the second argument: what calls it).
HOT_PATHS: dict[str, HotPath] = {
    "liveness of owners, by key (attach, follow, reconcile)": lambda s: s.leases.states(
        ["lease-x", "lease-y"]
    ),
    "live leases": lambda s: s.leases.live(),
    "lease renewal": lambda s: s.leases.renew("lease-x", 30),
    "lease compaction (every reconcile)": lambda s: s.leases.compact(LIVE_STATES, after=0),
    "a run by id": lambda s: s.run("run-0"),
    "live runs (reconcile)": lambda s: s.runs(states=tuple(LIVE_STATES)),
    "a run's compare-and-set": lambda s: s.update_run("run-0", expect_states=("running",), state="running"),
    "pause requests of an owner": lambda s: s.pause_requests("lease:x"),
    "a run's events, by its owner (the journal)": lambda s: s.append_events(
        [EventRecord("run-0", 9, "k", now(), "{}")], writer="lease:x"
    ),
    "transcript frames with the events (the journal)": lambda s: s.append_events(
        [EventRecord("run-0", 10, "k", now(), "{}")],
        [EntryBatch({"project_key": "pk", "session_id": "sid"}, keyed([{"uuid": "u-2"}]), _fold)],
        writer="lease:x",
    ),
    "events after N": lambda s: s.events("run-0", after=1),
    "the last event": lambda s: s.last_event_seq("run-0"),
    "a run's nodes": lambda s: s.nodes(states=[NodeRecordState.INTENT], run_id="run-0"),
    "held nodes (reconcile)": lambda s: s.nodes(states=[NodeRecordState.INTENT, NodeRecordState.KEPT]),
    "a node's compare-and-set": lambda s: s.move_node("n-0", [NodeRecordState.INTENT], NodeRecordState.LIVE),
    "a run's snapshots": lambda s: s.snapshots("run-0"),
    "a claim from a pool": lambda s: s.pools.claim("warm", "run-1", "local"),
    "a pool's nodes": lambda s: s.pools.nodes("warm"),
    "pools' held nodes (gc)": lambda s: s.pools.held_ids(unless_dead=lambda owner: None),
    "a transcript": lambda s: s.transcripts.load({"project_key": "pk", "session_id": "sid"}),
    "a token by its secret": lambda s: s.tokens.authenticate("npt_not-a-token"),
    "an idempotency key": lambda s: s.idempotency.reserve(
        "me", "key", kind="run", fingerprint="f", resource_id="r", holder="h"
    ),
    "retention": lambda s: s.retention.prune(before=now(), states=_OVER),
}


@contextmanager
def captured() -> Iterator[list[Statement]]:
    """The statements the store runs meanwhile (on either backend), with their parameters."""
    seen: list[Statement] = []
    patched: list[tuple[Any, str, Any]] = []
    for module, name in ((_sqlite, "_execute"), (_sqlite, "_fetchall")):
        original = getattr(module, name)

        def recording(connection: Any, sql: str, params: Any, _original: Any = original) -> Any:
            seen.append((sql, tuple(params)))
            return _original(connection, sql, params)

        patched.append((module, name, original))
        setattr(module, name, recording)
    for kind in ("execute", "fetchall"):
        original = getattr(_postgres._PostgresTx, kind)

        async def recording_pg(self: Any, sql: str, params: Any = (), _original: Any = original) -> Any:
            seen.append((sql, tuple(params)))
            return await _original(self, sql, params)

        patched.append((_postgres._PostgresTx, kind, original))
        setattr(_postgres._PostgresTx, kind, recording_pg)
    for kind in ("execute", "fetchall"):  # grouped writes (SQLite's go through _execute, above)
        original = getattr(_postgres._PostgresStatements, kind)

        def recording_grouped(self: Any, sql: str, params: Any = (), _original: Any = original) -> Any:
            seen.append((sql, tuple(params)))
            return _original(self, sql, params)

        patched.append((_postgres._PostgresStatements, kind, original))
        setattr(_postgres._PostgresStatements, kind, recording_grouped)
    for statements in (_sqlite._SQLiteStatements, _postgres._PostgresStatements):
        original = statements.executemany

        def recording_many(self: Any, sql: str, rows: Any, _original: Any = original) -> None:
            seen.extend((sql, tuple(row)) for row in rows[:1])
            _original(self, sql, rows)

        patched.append((statements, "executemany", original))
        setattr(statements, "executemany", recording_many)  # noqa: B010 - as the loop above does
    try:
        yield seen
    finally:
        for owner, name, original in patched:
            setattr(owner, name, original)


def full_scans(plan: list[str]) -> list[str]:
    """The steps of an SQLite plan that read a whole table (no index); a batch's own rows,
    given as one JSON parameter (``Database.json_rows``, ``j``), are read whole by design."""
    return [
        step
        for step in plan
        if step.startswith("SCAN ")
        and "USING" not in step
        and not step.startswith(("SCAN CONSTANT", "SCAN j VIRTUAL TABLE"))
    ]


async def sqlite_plans(path: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """Per hot path, each statement it ran and SQLite's plan of it."""
    plans: dict[str, list[tuple[str, list[str]]]] = {}
    async with await Store.open(f"sqlite:///{path}") as store:
        await seed(store)
        for name, call in HOT_PATHS.items():
            with captured() as seen:
                await call(store)
            plans[name] = [(sql, explain(path, sql, params)) for sql, params in seen]
    return plans


def explain(path: Path, sql: str, params: tuple[Any, ...]) -> list[str]:
    connection = apsw.Connection(str(path))  # the store's own SQLite: never two copies on one file
    try:
        return [str(row[3]) for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    finally:
        connection.close()


async def test_every_hot_path_reads_through_an_index_on_sqlite(tmp_path: Path) -> None:
    plans = await sqlite_plans(tmp_path / "store.db")
    assert all(plans.values()), [name for name, statements in plans.items() if not statements]
    scans = {
        name: [(sql, full_scans(plan)) for sql, plan in statements if full_scans(plan)]
        for name, statements in plans.items()
    }
    assert {name: found for name, found in scans.items() if found} == {}


def main() -> None:
    """Print each hot path's statements and plans (SQLite)."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        plans = anyio.run(sqlite_plans, Path(directory) / "store.db")
    for name, statements in plans.items():
        print(f"# {name}")
        for sql, plan in statements:
            print(f"  {' '.join(sql.split())[:200]}")
            for step in plan:
                print(f"      {step}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
