"""The run state machine under races, with a fake agent executable on the fake provider.

Each race runs many seeded iterations with random delays (``NODEPROV_RACE_ITERATIONS``,
100 by default), several at a time, every one under a deadline: no iteration may hang, the
stored state must always be one of the table's, and a run's outcome must agree with what
each caller was told. The seeds start at a number drawn afresh for every session, so each run
of the suite tries other interleavings; a failure names the first seed of its set, and
``NODEPROV_RACE_SEED=<that seed>`` draws the same delays again.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.errors import RunStateError, TokenError
from nodeprov.runs import TRANSITIONS, AgentMessage, Orchestrator, Run, RunFinished, RunState
from nodeprov.runs.lease import LEASE_PREFIX
from nodeprov.store import NodeRecordState, SnapshotRecord, Store

pytestmark = pytest.mark.anyio

ITERATIONS = int(os.environ.get("NODEPROV_RACE_ITERATIONS", "100"))
FIRST_SEED = int(os.environ.get("NODEPROV_RACE_SEED") or random.randrange(1_000_000_000))
AT_ONCE = 20
ITERATION_DEADLINE = 60


def fake(tmp_path: Path, **settings: Any) -> dict[str, Any]:
    return {"provider": "fake", "provider_settings": {"root": str(tmp_path / "nodes"), **settings}}


async def iterate(body: Callable[[random.Random], Awaitable[None]], iterations: int = ITERATIONS) -> None:
    """Run ``body`` with a seeded generator per iteration, AT_ONCE at a time, each bounded."""
    limiter = anyio.CapacityLimiter(AT_ONCE)

    async def one(seed: int) -> None:
        async with limiter:
            with anyio.fail_after(ITERATION_DEADLINE):
                try:
                    await body(random.Random(seed))
                except Exception as error:
                    raise AssertionError(
                        f"iteration with seed {seed} failed (its set began at "
                        f"NODEPROV_RACE_SEED={FIRST_SEED}): {error!r}"
                    ) from error

    async with anyio.create_task_group() as tg:
        for seed in range(FIRST_SEED, FIRST_SEED + iterations):
            tg.start_soon(one, seed)


async def settled(store: Store, run: Run) -> RunState:
    """The run's stored state once it ended, checked against the table and its outcome."""
    outcome = await run.wait()
    record = await store.run(run.id)
    assert record is not None
    state = RunState(record.state)
    assert state in TRANSITIONS
    assert not state.live
    assert state.outcome == outcome == record.outcome
    return state


async def agent_started(run: Run) -> None:
    """Wait until the agent on the run's node has reported its session."""
    async for _ in run.events():
        if run.agent_session_id is not None:
            return
    raise AssertionError(f"run {run.id} ended before its agent started: {run.error}")


async def pause_or_refusal(run: Run, **pause: Any) -> SnapshotRecord | None:
    try:
        return await run.pause("human", "race", **pause)
    except RunStateError:
        return None


async def test_pause_races_completion(store: Store, agent: Any, tmp_path: Path) -> None:
    """A pause may land while the node is provisioned, the agent runs, or the run is
    finishing (the node being destroyed): it either pauses the run or is refused."""
    async with Orchestrator(store) as orchestrator:

        async def race(rng: random.Random) -> None:
            options = agent({"sleep": rng.uniform(0, 0.05)}, {"text": "done"})
            settings = fake(
                tmp_path, provision_delay=rng.uniform(0, 0.03), destroy_delay=rng.uniform(0, 0.05)
            )
            run = await orchestrator.start("go", options=options, **settings)
            await anyio.sleep(rng.uniform(0, 0.4))
            snapshot = await pause_or_refusal(run)
            state = await settled(store, run)
            assert state is (RunState.PAUSED if snapshot else RunState.FINISHED)

        await iterate(race)
    assert list((tmp_path / "nodes").iterdir()) == []


async def test_pause_races_failure(store: Store, agent: Any, tmp_path: Path) -> None:
    async with Orchestrator(store) as orchestrator:

        async def race(rng: random.Random) -> None:
            run = await orchestrator.start(
                "go", options=agent({"sleep": rng.uniform(0, 0.05)}, {"exit": 3}), **fake(tmp_path)
            )
            await anyio.sleep(rng.uniform(0, 0.3))
            snapshot = await pause_or_refusal(run)
            state = await settled(store, run)
            assert state is (RunState.PAUSED if snapshot else RunState.FAILED)

        await iterate(race)


async def test_pause_races_pause(store: Store, agent: Any, tmp_path: Path) -> None:
    async with Orchestrator(store) as orchestrator:

        async def race(rng: random.Random) -> None:
            run = await orchestrator.start("go", options=agent({"stall": True}), **fake(tmp_path))
            await anyio.sleep(rng.uniform(0, 0.2))
            snapshots: list[SnapshotRecord | None] = []

            async def pause() -> None:
                await anyio.sleep(rng.uniform(0, 0.01))
                snapshots.append(await pause_or_refusal(run, keep_node=rng.random() < 0.5))

            async with anyio.create_task_group() as tg:
                tg.start_soon(pause)
                tg.start_soon(pause)
            assert len([s for s in snapshots if s is not None]) == 1
            assert await settled(store, run) is RunState.PAUSED

        await iterate(race)


async def test_pause_races_shutdown(store: Store, agent: Any, tmp_path: Path) -> None:
    """Leaving the orchestrator while a caller pauses: both end, the run is paused once."""

    async def race(rng: random.Random) -> None:
        snapshots: list[SnapshotRecord | None] = []

        async def pause(run: Run) -> None:
            snapshots.append(await pause_or_refusal(run))

        async with anyio.create_task_group() as callers, Orchestrator(store) as orchestrator:
            run = await orchestrator.start(
                "go",
                options=agent({"stall": True}),
                **fake(tmp_path, provision_delay=rng.uniform(0, 0.05)),
            )
            await anyio.sleep(rng.uniform(0, 0.2))
            callers.start_soon(pause, run)
            await anyio.sleep(rng.uniform(0, 0.02))
        assert await settled(store, run) is RunState.PAUSED
        assert len(snapshots) == 1  # the caller was answered, one way or the other
        assert len([s for s in await store.snapshots(run.id) if s.used_at is None]) == 1

    await iterate(race, max(ITERATIONS // 4, 10))


async def test_a_pause_cut_short_by_leaving_is_settled_and_said(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    """Leaving cancels a pause whose last store write hangs, after its snapshot was saved:
    the pause is settled again on the way out, once, and says so (``run.paused``)."""
    real_update = store.update_run
    hung = anyio.Event()

    async def paused_after_a_hang(run_id: str, **changes: Any) -> bool:
        if changes.get("state") == RunState.PAUSED and not hung.is_set():
            hung.set()
            await anyio.sleep_forever()  # until leaving cancels it
        return await real_update(run_id, **changes)

    async with Orchestrator(store, shutdown_timeout=10) as orchestrator:
        run = await orchestrator.start("go", options=agent({"stall": True}), **fake(tmp_path))
        await agent_started(run)
        store.update_run = paused_after_a_hang  # type: ignore[method-assign]
    store.update_run = real_update  # type: ignore[method-assign]
    assert hung.is_set()
    assert await settled(store, run) is RunState.PAUSED
    async with Orchestrator(store) as reader:
        paused = [event async for event in reader.events(run.id, after=0) if event.kind == "run.paused"]
    assert len(paused) == 1
    assert len([s for s in await store.snapshots(run.id) if s.used_at is None]) == 1


async def test_a_pause_during_a_resumes_start_up_keeps_the_conversation(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    async with Orchestrator(store) as orchestrator:

        async def race(rng: random.Random) -> None:
            run = await orchestrator.start(
                "go", options=agent({"text": "hi"}, {"stall": True}), **fake(tmp_path)
            )
            await agent_started(run)
            session = run.agent_session_id
            first = await run.pause("human", "first")
            resumed = await orchestrator.resume(
                first.token, options=agent({"stall": True}), idle_timeout=None, deadline=None
            )
            await anyio.sleep(rng.uniform(0, 0.1))
            second = await pause_or_refusal(resumed)
            assert second is not None  # it stalls: the pause always wins
            assert second.agent_session_id == session  # whatever the moment, nothing is lost
            again = await orchestrator.resume(second.token, options=agent({"text": "back"}))
            assert await again.wait() == "ok", again.error
            assert again.agent_session_id == session  # the fake agent kept the --resume id

        await iterate(race, max(ITERATIONS // 4, 10))


async def test_two_control_planes_race_to_resume(store: Store, agent: Any, tmp_path: Path) -> None:
    async with await Store.open(store.url) as other, Orchestrator(store) as one, Orchestrator(other) as two:

        async def race(rng: random.Random) -> None:
            run = await one.start("go", options=agent({"text": "hi"}, {"stall": True}), **fake(tmp_path))
            await agent_started(run)
            snapshot = await run.pause("human", "to be resumed")
            outcomes: list[Any] = []

            async def resume(orchestrator: Orchestrator) -> None:
                await anyio.sleep(rng.uniform(0, 0.01))
                try:
                    resumed = await orchestrator.resume(snapshot.token, options=agent({"text": "again"}))
                    outcomes.append(await resumed.wait())
                except (TokenError, RunStateError) as error:
                    outcomes.append(error)

            async with anyio.create_task_group() as tg:
                tg.start_soon(resume, one)
                tg.start_soon(resume, two)
            assert outcomes.count("ok") == 1, outcomes
            assert (await store.run(run.id)).state == RunState.FINISHED  # type: ignore[union-attr]

        await iterate(race, max(ITERATIONS // 4, 10))


async def test_failing_runs_never_touch_bystanders(store: Store, agent: Any, tmp_path: Path) -> None:
    """Every way a run can fail ends that run only: agent crash, garbage output, a failed
    provision, settings that no longer validate on resume, a store failure mid-run, a
    garbled pause request."""
    async with Orchestrator(store, poll_interval=0.05) as orchestrator:
        bystanders = [
            await orchestrator.start(
                "steady", options=agent({"sleep": 1.5}, {"text": "fine"}), **fake(tmp_path)
            )
            for _ in range(5)
        ]
        crashed = await orchestrator.start("crash", options=agent({"exit": 3}), **fake(tmp_path))
        garbled = await orchestrator.start("garbage", options=agent({"garbage": "{nope"}), **fake(tmp_path))
        unprovisioned = await orchestrator.start(
            "no node", options=agent({"text": "x"}), **fake(tmp_path, provision_error="no capacity")
        )
        # A run whose stored settings no longer validate fails on resume, in the background.
        stale = await orchestrator.start(
            "stale", options=agent({"text": "hi"}, {"stall": True}), **fake(tmp_path)
        )
        await agent_started(stale)
        snapshot = await stale.pause("human", "edit settings")
        await store.update_run(stale.id, node_settings=json.dumps({"colour": "blue"}))
        restarted = await orchestrator.resume(snapshot.token, options=agent({"text": "x"}))
        # A store failure in the middle of one run.
        broken = await orchestrator.start(
            "store", options=agent({"sleep": 0.2}, {"text": "x"}), **fake(tmp_path)
        )
        real_update = store.update_run

        async def failing_update(run_id: str, **changes: Any) -> bool:
            if run_id == broken.id and changes.get("state") == RunState.FINISHING:
                from nodeprov.errors import StoreError

                raise StoreError("injected: the database went away")
            return await real_update(run_id, **changes)

        store.update_run = failing_update  # type: ignore[method-assign]
        garbage_request = await orchestrator.start(
            "noise", options=agent({"sleep": 1}, {"text": "x"}), **fake(tmp_path)
        )
        await store.update_run(garbage_request.id, pause_request="{not json")
        with anyio.fail_after(ITERATION_DEADLINE):
            for run in (crashed, garbled, unprovisioned, restarted, broken):
                assert await run.wait() == "error", run.id
            assert "no capacity" in (unprovisioned.error or "")
            assert "invalid settings" in (restarted.error or "")
            assert "injected" in (broken.error or "")
            assert await garbage_request.wait() == "ok"
            for bystander in bystanders:
                assert await bystander.wait() == "ok", bystander.error
        store.update_run = real_update  # type: ignore[method-assign]
        intents = await store.nodes(states=(NodeRecordState.INTENT,))
        assert intents == []  # the failed provision's intent was settled
    assert list((tmp_path / "nodes").iterdir()) == []


async def test_leaving_is_bounded_when_a_provider_hangs(store: Store, agent: Any, tmp_path: Path) -> None:
    # The default shutdown_timeout: a quarter of it (7.5 s) is kept for the store writes after
    # a destroy that hangs, which a loaded machine's disk slows (with 2 s in all, the run was
    # once left pausing; with 6 s, its last writes ended 7.6 s past the bound).
    shutdown_timeout = 30
    async with Orchestrator(store, shutdown_timeout=shutdown_timeout) as orchestrator:
        hung_provision = await orchestrator.start(
            "never provisioned", options=agent({"text": "x"}), **fake(tmp_path, provision_delay=3600)
        )
        hung_destroy = await orchestrator.start(
            "never destroyed", options=agent({"stall": True}), **fake(tmp_path, destroy_delay=3600)
        )
        await agent_started(hung_destroy)
        started = anyio.current_time()
    # Neither the hour's hang nor a destroy's own limit (NodeHandle.destroy_timeout) was
    # waited for; the bound documented adds the store's own time, so the margin is a loaded
    # disk's.
    assert anyio.current_time() - started < shutdown_timeout + 60
    assert hung_provision.outcome == "paused"  # provisioning was interrupted
    assert hung_destroy.outcome in ("paused", "error")
    record = await store.run(hung_destroy.id)
    assert record is not None
    assert not RunState(record.state).live


async def test_a_pause_right_after_start_does_not_wait_for_the_node(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    """A pause during provisioning stops it: the run pauses now, with no node to keep."""
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "go", options=agent({"text": "x"}), **fake(tmp_path, provision_delay=3600)
        )
        with anyio.fail_after(ITERATION_DEADLINE):  # provisioning in full would take an hour
            snapshot = await run.pause("human", "at once")
        assert await settled(store, run) is RunState.PAUSED
        assert snapshot.node_id is None
    assert not (tmp_path / "nodes").exists() or list((tmp_path / "nodes").iterdir()) == []


async def test_deadlines_end_a_run_with_the_real_cause(store: Store, agent: Any, tmp_path: Path) -> None:
    async with Orchestrator(store) as orchestrator:
        refused = await orchestrator.start(
            "retries",
            options=agent(*[{"retry": "connect ECONNREFUSED 127.0.0.1:9"}, {"sleep": 0.2}] * 100),
            idle_timeout=5,  # the first retry comes well within it on a busy machine too
            **fake(tmp_path),
        )
        silent = await orchestrator.start(
            "silent", options=agent({"stall": True}), idle_timeout=1, **fake(tmp_path)
        )
        overall = await orchestrator.start("slow", options=agent({"sleep": 60}), deadline=1, **fake(tmp_path))
        errored = await orchestrator.start(
            "error result", options=agent({"error_result": "API Error: 529 overloaded"}), **fake(tmp_path)
        )
        with anyio.fail_after(30):
            for run in (refused, silent, overall, errored):
                assert await run.wait() == "error"
    assert refused.error is not None
    assert refused.error.startswith(
        "the agent made no progress for 5 s (waiting for the model API, which failed "
    )
    assert refused.error.endswith(" times: connect ECONNREFUSED 127.0.0.1:9)")
    assert silent.error == "the agent made no progress for 1 s (waiting for the model API)"
    assert overall.error == "the run's deadline of 1 s passed (waiting for the model API)"
    assert "API Error: 529 overloaded" in (errored.error or "")
    assert "success" not in (errored.error or "")


async def test_a_slow_subscriber_reads_the_store_and_misses_nothing(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "chatty", options=agent(*[{"text": f"line {i}"} for i in range(3000)]), **fake(tmp_path)
        )
        seen = []
        async for event in run.events():
            seen.append(event.seq)
            if len(seen) == 2:
                await anyio.sleep(1)  # meanwhile thousands of events overflow its buffer
        assert seen == list(range(run.first_seq, seen[-1] + 1))
        assert isinstance([e async for e in run.events()][-1], RunFinished)
        with pytest.raises(RunStateError):  # a finished run leaves memory
            orchestrator.run(run.id)
        assert run._events.unwritten == []
        replay = [e.seq async for e in orchestrator.events(run.id, follow=False)]
        assert replay == seen


async def test_reconcile_ends_runs_of_released_leases_and_clears_their_pause_requests(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    """A control plane whose lease is gone: its runs are reconciled, a pause request nobody
    will serve is cleared, and the next resume runs instead of pausing at once."""
    async with Orchestrator(store) as dead:
        run = await dead.start("orphan", options=agent({"text": "hi"}, {"stall": True}), **fake(tmp_path))
        await agent_started(run)
        dead_owner = dead.owner
    # As if it had died mid-run (its lease is released), with a `nodeprov pause` pending.
    request = '{"kind": "external", "reason": "", "keep_node": false}'
    await store.update_run(
        run.id, state=RunState.RUNNING, outcome=None, owner=dead_owner, pause_request=request
    )
    async with Orchestrator(store, reconcile_interval=0) as survivor:
        alive = await survivor.start("alive", options=agent({"stall": True}), **fake(tmp_path))
        report = await survivor.reconcile()
        assert report.ended == [run.id]
        assert alive.id not in report.ended
        record = await store.run(run.id)
        assert record is not None
        assert (record.state, record.pause_request) == (RunState.FAILED, None)
        events = [e async for e in survivor.events(run.id, follow=True)]  # ends: reconcile wrote the end
        assert isinstance(events[-1], RunFinished)
        resumed = await survivor.resume_run(run.id, options=agent({"text": "back"}))
        assert await resumed.wait() == "ok"
        await alive.pause("human", "done testing")


async def test_kept_nodes_of_paused_runs_are_never_garbage(store: Store, agent: Any, tmp_path: Path) -> None:
    from nodeprov import get_provider

    async with Orchestrator(store) as first:
        run = await first.start("keep", options=agent({"text": "hi"}, {"stall": True}), **fake(tmp_path))
        await agent_started(run)
        snapshot = await run.pause("human", "overnight", keep_node=True)
    provider = get_provider("fake", root=str(tmp_path / "nodes"))
    async with Orchestrator(store) as second:  # the first one's lease is released: it is gone
        report = await second.collect_garbage(provider)
        assert report.reaped == []
        assert snapshot.node_id in {info.node_id for info in await provider.list_nodes()}
        resumed = await second.resume(snapshot.token, options=agent({"text": "back"}))
        assert await resumed.wait() == "ok"
        ready = [e async for e in resumed.events() if e.kind == "node.ready"]
        assert ready[0].node_id == snapshot.node_id  # type: ignore[attr-defined]


async def test_a_pause_request_nobody_served_can_be_withdrawn(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    async with Orchestrator(store, poll_interval=3600) as deaf:  # never looks at requests
        run = await deaf.start("go", options=agent({"sleep": 0.5}, {"text": "done"}), **fake(tmp_path))
        request = await deaf.request_pause(run.id, "external", "timed out")
        assert await deaf.withdraw_pause(run.id, request)
        assert not await deaf.withdraw_pause(run.id, request)  # once
        assert await run.wait() == "ok"
        record = await store.run(run.id)
        assert record is not None
        assert record.pause_request is None


@pytest.mark.parametrize(
    ("started_keeping", "asked", "kept"), [(True, None, True), (True, False, False), (False, None, False)]
)
async def test_a_pause_that_does_not_say_keeps_the_node_as_the_run_was_started(
    store: Store, agent: Any, tmp_path: Path, started_keeping: bool, asked: bool | None, kept: bool
) -> None:
    """A run started with ``keep_node`` keeps its node when paused by a request (another
    process's, ``nodeprov pause``) or its control plane's shutdown, unless the pause says."""
    async with Orchestrator(store, poll_interval=0.05) as plane:
        run = await plane.start(
            "go", options=agent({"text": "hi"}, {"stall": True}), keep_node=started_keeping, **fake(tmp_path)
        )
        await agent_started(run)
        await plane.request_pause(run.id, "external", "asked", keep_node=asked)
        assert await run.wait() == "paused"
    [snapshot] = await store.snapshots(run.id)
    assert snapshot.node_kept is kept
    async with Orchestrator(store) as plane:
        resumed = await plane.resume(
            snapshot.token, options=agent({"text": "back"}, {"stall": True}), keep_node=True
        )
        async for event in resumed.events():  # the agent answers on its node
            if isinstance(event, AgentMessage):
                break
    # Leaving pauses what still runs (kind system), with the node the resume asked to keep.
    later = [s for s in await store.snapshots(run.id) if s.used_at is None]
    assert [(s.pause_kind, s.node_kept) for s in later] == [("system", True)]


async def test_a_control_plane_judged_gone_while_it_drives_writes_nothing_more_of_the_run(
    store: Store, agent: Any, tmp_path: Path
) -> None:
    """Its lease ends under it (as one expires under load) and another control plane ends
    its run: what its drive says afterwards (the agent's next message, the drive's own end)
    is not stored, so the run's events end once, with the survivor's end. (Before, the
    torture test found two ends: the survivor's, then the drive's.)"""
    go = tmp_path / "go"
    steps = agent({"text": "hi"}, {"wait_for": str(go)}, {"text": "late"})
    async with Orchestrator(store, lease_ttl=3600, reconcile_interval=0) as judged_gone:
        run = await judged_gone.start("go", options=steps, **fake(tmp_path))
        await agent_started(run)
        await store.leases.release(judged_gone.owner.removeprefix(LEASE_PREFIX))
        async with Orchestrator(store, reconcile_interval=0) as survivor:
            assert (await survivor.reconcile()).ended == [run.id]
        ended = await store.events(run.id, limit=1000)
        assert ended[-1].kind == RunFinished.kind
        go.touch()
        with anyio.fail_after(30):
            await run.wait()  # the drive went on, unaware, to its own end
        assert isinstance([event async for event in run.events()][-1], RunFinished)
    assert await store.events(run.id, limit=1000) == ended
