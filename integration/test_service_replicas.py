"""Replicas of ``nodeprov serve`` on one PostgreSQL store act as one service (issue 28): a run
started through one is listed, followed (server-sent events, ``Last-Event-ID``), paused and
resumed through another; a replica SIGKILLed mid-run is reconciled by a survivor within the
lease bound while its clients follow on through the survivor, missing nothing; a replica
stopped with SIGTERM ends its event streams at once, then pauses its runs (kind ``system``);
``--workers 2`` is two replicas on one port. Real ``nodeprov serve`` processes, the fake
Claude Code CLI on local nodes."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest

from nodeprov.client import Client
from nodeprov.store import Store
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until
from tests.serving import Served, fake_run, serving, sse_events

pytestmark = pytest.mark.anyio

T = TypeVar("T")

LEASE_TTL = 3.0
POLL_INTERVAL = 0.2
RECONCILE_INTERVAL = LEASE_TTL / 2  # the orchestrator's default
SHUTDOWN_TIMEOUT = 10.0
CONFIG = {"lease_ttl": LEASE_TTL, "poll_interval": POLL_INTERVAL, "shutdown_timeout": SHUTDOWN_TIMEOUT}
# From the SIGKILL: the dead lease expires within LEASE_TTL (it was renewed at most a third of
# it before), a survivor's reconcile comes within RECONCILE_INTERVAL after that; the margin is
# for destroying the node and a busy machine.
RECONCILE_BOUND = LEASE_TTL + RECONCILE_INTERVAL + 4.0
STREAMS_END_BOUND = 2.0  # SIGTERM to a replica's event streams ending
STATE_TIMEOUT = 30.0  # a run reaching a state it has no bound of its own for


@asynccontextmanager
async def replicas(tmp_path: Path, store: str, count: int = 2, **config: Any) -> AsyncIterator[list[Served]]:
    """``count`` replicas on ``store`` with ``config`` over :data:`CONFIG`, each with its own
    log (``replica-a.log``...)."""
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                serving(
                    tmp_path, store=store, config=CONFIG | config, name=f"replica-{chr(ord('a') + index)}"
                )
            )
            for index in range(count)
        ]


async def until(check: Callable[[], Awaitable[T | None]], within: float, what: str) -> T:
    """Poll ``check`` (state of other processes: nothing to wait on) until it gives a value."""
    try:
        with anyio.fail_after(within):
            while (found := await check()) is None:  # noqa: ASYNC110 - other processes' state
                await anyio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {within:g} s: {what}") from None
    return found


async def run_state(client: Client, run_id: str, *states: str) -> dict[str, Any] | None:
    run = await client.run(run_id)
    return run if run["state"] in states else None


async def lease_of(store: str, pid: int) -> str:
    """``lease:ID``: the live lease of the replica process ``pid``."""
    async with await Store.open(store) as opened:
        rows = await opened.db.fetchall(
            "SELECT id FROM leases WHERE holder LIKE ? AND released = 0", (f"% pid {pid}",)
        )
    assert len(rows) == 1, rows
    return f"lease:{rows[0][0]}"


async def live_leases(store: str) -> dict[str, str]:
    """The holders of the live leases, by ``lease:ID``."""
    async with await Store.open(store) as opened:
        live = await opened.leases.live()
        rows = await opened.db.fetchall("SELECT id, holder FROM leases")
    return {f"lease:{row[0]}": str(row[1]) for row in rows if row[0] in live}


async def history(store: str, run_id: str) -> list[dict[str, Any]]:
    """The run's events as the store holds them: the truth every follower must match."""
    events: list[dict[str, Any]] = []
    async with await Store.open(store) as opened:
        while records := await opened.events(run_id, after=events[-1]["seq"] if events else 0):
            events.extend(json.loads(record.body) for record in records)
    return events


@dataclass
class Followed:
    """What :func:`follow` got: each event with the URL it came through, and how each of its
    streams ended (``(url, "ended" | "dropped" | "refused" | "over" | "left", time.time())``)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    via: list[str] = field(default_factory=list)
    streams: list[tuple[str, str, float]] = field(default_factory=list)
    arrived: anyio.Event = field(default_factory=anyio.Event)

    @property
    def seqs(self) -> list[int]:
        return [event["seq"] for event in self.events]

    async def wait_for(self, count: int) -> None:
        """Wait until ``count`` events came."""
        while len(self.events) < count:
            await self.arrived.wait()
            self.arrived = anyio.Event()

    def texts(self) -> list[str]:
        return [
            str(event["message"].get("text"))
            for event in self.events
            if event["type"] == "agent.message" and event["message"].get("text")
        ]


async def follow(
    urls: list[str],
    run_id: str,
    into: Followed,
    *,
    after: int = 0,
    until_event: Callable[[dict[str, Any]], bool] | None = None,
) -> None:
    """Follow the run's events as an ``EventSource`` would, over ``urls`` in turn: from
    ``urls[0]``; a connection that drops or is refused, or a stream that ends before the
    run's drive did, moves on to the next URL, with ``Last-Event-ID``. Returns when the run
    is over (204: nothing more, and nobody drives it), or after an event ``until_event``
    accepts (the client leaves)."""
    index, last = 0, after
    async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5)) as http:
        while True:
            url = urls[index % len(urls)]
            outcome = "ended"
            try:
                async with http.stream(
                    "GET", f"{url}/v1/runs/{run_id}/events", headers={"Last-Event-ID": str(last)}
                ) as response:
                    if response.status_code == 204:
                        into.streams.append((url, "over", time.time()))
                        return
                    assert response.status_code == 200, await response.aread()
                    async for name, event_id, data in sse_events(response):
                        assert name == "", (name, data)  # no cutoff here
                        assert int(event_id) == data["seq"]
                        into.events.append(data)
                        into.via.append(url)
                        last = data["seq"]
                        into.arrived.set()
                        if until_event is not None and until_event(data):
                            into.streams.append((url, "left", time.time()))
                            return
            except httpx.ConnectError:
                outcome = "refused"
            except httpx.TransportError:
                outcome = "dropped"
            into.streams.append((url, outcome, time.time()))
            if outcome != "ended" or not into.events or into.events[-1]["type"] != "run.finished":
                index += 1  # this replica went away, or is going: another answers
            await anyio.sleep(0.05)


def assert_every_event_once_in_order(got: list[dict[str, Any]], stored: list[dict[str, Any]]) -> None:
    assert [event["seq"] for event in stored] == list(range(1, len(stored) + 1))
    assert [event["seq"] for event in got] == [event["seq"] for event in stored]
    assert got == stored  # the very events the store holds: none that a dead replica made up


def text_is(text: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["type"] == "agent.message" and event["message"].get("text") == text


async def test_a_run_started_through_one_replica_is_followed_paused_and_resumed_through_another(
    tmp_path: Path, postgres_url: str
) -> None:
    steps: list[dict[str, Any]] = [{"text": "working"}, {"sleep": 60}, {"text": "never"}]
    async with replicas(tmp_path, postgres_url) as (a, b), Client(a.url) as via_a, Client(b.url) as via_b:
        run = await via_a.start(**fake_run(tmp_path, steps, keep_node=True))
        run_id = run["id"]
        lease_a, lease_b = (
            await lease_of(postgres_url, a.process.pid),
            await lease_of(postgres_url, b.process.pid),
        )
        assert run["owner"] == lease_a

        # Stream 1, through A: until the agent is at work.
        followed = Followed()
        with anyio.fail_after(STATE_TIMEOUT):
            await follow([a.url], run_id, followed, until_event=text_is("working"))
        assert (await via_b.run(run_id))["state"] == "running"
        assert run_id in [r["id"] for r in await via_b.runs(states=("running",))]
        got = await via_b.run(run_id)
        assert (got["owner"], got["resumable"]) == (lease_a, False)

        # Stream 2, through B (which polls the store), while B asks A to pause it.
        with anyio.fail_after(STATE_TIMEOUT):  # the stream ends by itself after the pause
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(follow, [b.url], run_id, followed, after=followed.seqs[-1]))
                paused = await via_b.pause(run_id, "human", "lunch", wait=STATE_TIMEOUT)
        assert paused["state"] == "paused"
        assert paused["resume_token"]
        assert paused["snapshots"][-1]["pause_kind"] == "human"
        assert paused["snapshots"][-1]["node_kept"] is True  # the run was started with keep_node
        assert followed.events[-1]["type"] == "run.finished"
        assert followed.events[-1]["outcome"] == "paused"
        assert followed.via[-1] == b.url

        # Resumed through B: B drives it now; stream 3, through A, follows it to its end.
        resumed = await via_b.resume(run_id, "go on", env={"NODEPROV_FAKE_AGENT": '[{"text": "resumed"}]'})
        assert resumed["owner"] == lease_b
        with anyio.fail_after(STATE_TIMEOUT):
            await follow([a.url], run_id, followed, after=followed.seqs[-1])
        assert followed.events[-1]["type"] == "run.finished"
        assert followed.events[-1]["outcome"] == "ok"
        assert "resumed" in followed.texts()
        assert "never" not in followed.texts()
        assert {followed.via[0], followed.via[-1]} == {a.url}
        assert b.url in followed.via
        ended = await via_a.run(run_id)
        assert (ended["state"], ended["outcome"], ended["owner"]) == ("finished", "ok", lease_b)
        assert_every_event_once_in_order(followed.events, await history(postgres_url, run_id))


async def test_a_replica_killed_mid_run_is_reconciled_by_a_survivor_and_followed_through_it(
    tmp_path: Path, postgres_url: str
) -> None:
    marker = unique_marker()  # a tool's child on A's node, which reconcile must end
    steps: list[dict[str, Any]] = [{"spawn": ["sleep", marker]}, {"stream": [1000, 64, 0.01]}]
    async with replicas(tmp_path, postgres_url, agent_grace=None) as (a, b), Client(b.url) as via_b:
        async with Client(a.url) as via_a:
            run_id = (await via_a.start(**fake_run(tmp_path, steps)))["id"]
        through_b: list[dict[str, Any]] = []
        followed = Followed()

        async def follow_with_the_client() -> None:  # nodeprov.client, through B from the start
            async for event in via_b.events(run_id):
                through_b.append(event.to_json())

        ended: list[str] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_noting_the_end, ended, "client", follow_with_the_client)
            tg.start_soon(
                _noting_the_end, ended, "follower", partial(follow, [a.url, b.url], run_id, followed)
            )
            with anyio.fail_after(STATE_TIMEOUT):
                await followed.wait_for(50)  # the run streams through A
            a.process.kill()
            killed = time.monotonic()
            reconciled = await until(
                lambda: run_state(via_b, run_id, "failed", "finished", "paused"),
                RECONCILE_BOUND,
                "B reconciles the run of the killed A",
            )
            took = time.monotonic() - killed
            tg.cancel_scope.deadline = anyio.current_time() + STATE_TIMEOUT  # they end by themselves...
        print(f"SIGKILL to reconciled: {took:.2f} s")
        assert (reconciled["state"], reconciled["outcome"]) == ("failed", "error")
        assert "died" in reconciled["error"]
        assert reconciled["resumable"] is True
        assert reconciled["snapshots"][-1]["pause_kind"] == "system"
        stored = await history(postgres_url, run_id)
        assert stored[-1]["type"] == "run.finished"
        assert stored[-1]["outcome"] == "error"
        assert_every_event_once_in_order(followed.events, stored)
        assert_every_event_once_in_order(through_b, stored)
        assert sorted(ended) == ["client", "follower"]  # ...once they saw the run over
        assert followed.via[0] == a.url
        assert followed.via[-1] == b.url
        assert [outcome for _, outcome, _ in followed.streams][:1] == ["dropped"]

        assert host_processes_matching(marker) == []  # A's node was destroyed, its processes too

        # Resumed through B, on a fresh node: the run completes.
        await via_b.resume(run_id, env={"NODEPROV_FAKE_AGENT": '[{"text": "resumed"}]'})
        with anyio.fail_after(STATE_TIMEOUT):
            done = await via_b.wait(run_id)
        assert (done["state"], done["outcome"]) == ("finished", "ok")
        # A client whose connection dropped after the last event reconnects, and is told to stop.
        last = (await history(postgres_url, run_id))[-1]["seq"]
        with anyio.fail_after(STATE_TIMEOUT):
            assert [event async for event in via_b.events(run_id, after=last)] == []


async def test_a_replica_killed_mid_turn_has_its_kept_agent_taken_over_by_a_survivor(
    tmp_path: Path, postgres_url: str
) -> None:
    """With ``agent_grace``, the survivor takes the dead replica's run over instead of failing
    it: the agent streams on, and every message reaches the run's events and the clients
    following through either replica once, in order, to the run's successful end."""
    count = 300
    steps: list[dict[str, Any]] = [{"stream": [count, 64, 0.01]}]
    async with replicas(tmp_path, postgres_url, agent_grace=60) as (a, b), Client(b.url) as via_b:
        async with Client(a.url) as via_a:
            run_id = (await via_a.start(**fake_run(tmp_path, steps)))["id"]
        followed = Followed()
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(follow, [a.url, b.url], run_id, followed))
            with anyio.fail_after(STATE_TIMEOUT):
                await followed.wait_for(50)  # the run streams through A
            a.process.kill()
            killed = time.monotonic()
            with anyio.fail_after(RECONCILE_BOUND + STATE_TIMEOUT):
                done = await via_b.wait(run_id)
            took = time.monotonic() - killed
            tg.cancel_scope.deadline = anyio.current_time() + STATE_TIMEOUT
        print(f"SIGKILL to the run's end through B: {took:.2f} s")
        assert (done["state"], done["outcome"]) == ("finished", "ok"), done
        stored = await history(postgres_url, run_id)
        assert [event["type"] for event in stored].count("agent.reattached") == 1
        assert_every_event_once_in_order(followed.events, stored)
        streamed = [
            str(event["message"]["text"])
            for event in followed.events
            if event["type"] == "agent.message" and event["message"].get("kind") == "text"
        ]
        assert len(streamed) == count == len(set(streamed))  # each streamed message once


async def _noting_the_end(ended: list[str], name: str, task: Callable[[], Awaitable[None]]) -> None:
    await task()
    ended.append(name)


async def test_a_replica_stopped_with_sigterm_ends_its_streams_then_pauses_its_runs(
    tmp_path: Path, postgres_url: str
) -> None:
    steps: list[dict[str, Any]] = [{"text": "working"}, {"sleep": 60}, {"text": "never"}]
    async with replicas(tmp_path, postgres_url) as (a, b), Client(b.url) as via_b:
        async with Client(a.url) as via_a:
            run_id = (await via_a.start(**fake_run(tmp_path, steps)))["id"]
        lease_a = await lease_of(postgres_url, a.process.pid)
        followed = Followed()
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow, [a.url, b.url], run_id, followed)
            with anyio.fail_after(STATE_TIMEOUT):
                while "working" not in followed.texts():
                    await followed.wait_for(len(followed.events) + 1)
            a.process.send_signal(signal.SIGTERM)
            signalled = time.time()
            with anyio.fail_after(SHUTDOWN_TIMEOUT):
                code = await a.process.wait()
            exited = time.time() - signalled
            tg.cancel_scope.deadline = anyio.current_time() + STATE_TIMEOUT  # the follower ends by itself
        print(f"SIGTERM to exit: {exited:.2f} s")
        assert code == 0, a.log.read_text()[-3000:]
        stopped = await via_b.run(run_id)
        assert (stopped["state"], stopped["outcome"], stopped["resumable"]) == ("paused", "paused", True)
        assert stopped["snapshots"][-1]["pause_kind"] == "system"
        assert lease_a not in await live_leases(postgres_url)  # released on the way out
        # A's stream ended (cleanly) at once, before A paused the run: the client had the
        # pause's events through B.
        [(url, outcome, when)] = followed.streams[:1]
        assert (url, outcome) == (a.url, "ended")
        print(f"SIGTERM to A's stream ending: {when - signalled:.2f} s")
        assert when - signalled < STREAMS_END_BOUND
        assert followed.via[0] == a.url
        assert followed.via[-1] == b.url
        finished = followed.events[-1]
        assert (finished["type"], finished["outcome"]) == ("run.finished", "paused")
        assert datetime.fromisoformat(finished["at"]).timestamp() > when
        assert_every_event_once_in_order(followed.events, await history(postgres_url, run_id))
        # B resumes it.
        await via_b.resume(run_id, env={"NODEPROV_FAKE_AGENT": '[{"text": "resumed"}]'})
        done = await via_b.wait(run_id)
        assert (done["state"], done["outcome"]) == ("finished", "ok")


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def test_workers_are_replicas_on_one_port(tmp_path: Path, postgres_url: str) -> None:
    long: list[dict[str, Any]] = [{"text": "working"}, {"sleep": 60}]
    async with (
        serving(tmp_path, "--workers", "2", store=postgres_url, config=CONFIG, name="workers") as served,
        Client(served.url) as client,
    ):

        async def two_workers() -> dict[str, int] | None:
            leases = {
                lease: int(holder.rsplit(" pid ", 1)[1])
                for lease, holder in (await live_leases(postgres_url)).items()
            }
            return leases if len(leases) == 2 else None

        workers = await until(two_workers, STATE_TIMEOUT, "two workers, each with a lease")
        assert all(_parent(pid) == served.process.pid for pid in workers.values())
        # Runs started through the one port, each on a connection of its own, until both
        # workers drive some.
        owners: dict[str, str] = {}
        with anyio.fail_after(STATE_TIMEOUT):
            while set(owners.values()) != set(workers):
                async with Client(served.url) as fresh:
                    run = await fresh.start(**fake_run(tmp_path, long))
                owners[run["id"]] = run["owner"]
        print(f"--workers 2: {len(owners)} runs started for both workers to drive some")
        quick = await client.start(**fake_run(tmp_path, [{"text": "done"}]))
        with anyio.fail_after(STATE_TIMEOUT):
            done = await client.wait(quick["id"])
        assert (done["state"], done["outcome"]) == ("finished", "ok")
        for run_id in owners:
            await until(
                partial(run_state, client, run_id, "running"), STATE_TIMEOUT, "the run's agent at work"
            )

        served.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        with anyio.fail_after(SHUTDOWN_TIMEOUT):
            code = await served.process.wait()
        print(f"--workers 2: SIGTERM to exit: {time.monotonic() - signalled:.2f} s")
        assert code == 0, served.log.read_text()[-3000:]
        for pid in workers.values():
            assert not _exists(pid)
    assert await live_leases(postgres_url) == {}
    async with await Store.open(postgres_url) as store:
        for run_id in owners:
            record = await store.run(run_id)
            assert record is not None
            assert (record.state, record.outcome) == ("paused", "paused")
            assert [s.pause_kind for s in await store.snapshots(run_id)] == ["system"]


async def test_a_pause_asked_of_a_survivor_while_it_takes_a_kept_run_over_stops_the_agent(
    tmp_path: Path, postgres_url: str
) -> None:
    """Issue 45, through the service: a pause asked right after the replica driving a run was
    SIGKILLed is served by the survivor that takes the run over, and the run is said paused
    only once its agent, and what the agent started, are stopped."""
    marker = unique_marker()
    flag = tmp_path / "flag"
    steps: list[dict[str, Any]] = [
        {"spawn": ["sleep", marker]},
        {"text": "working"},
        {"wait_for": str(flag)},
        {"text": "after the flag"},
    ]
    async with replicas(tmp_path, postgres_url, agent_grace=60) as (a, b), Client(b.url) as via_b:
        async with Client(a.url) as via_a:
            run_id = (await via_a.start(**fake_run(tmp_path, steps)))["id"]

        async def working() -> bool:
            return any(
                event["type"] == "agent.message" and event["message"].get("text") == "working"
                for event in await history(postgres_url, run_id)
            )

        assert await wait_until(working, STATE_TIMEOUT)
        assert host_processes_matching(marker)
        a.process.kill()
        with anyio.fail_after(RECONCILE_BOUND + STATE_TIMEOUT):
            paused = await via_b.pause(
                run_id, "human", "asked at once", keep_node=True, wait=RECONCILE_BOUND + STATE_TIMEOUT
            )
        assert paused["state"] == "paused", paused
        assert host_processes_matching(marker) == [], "paused, and what the agent started runs on"
        flag.touch()
        kinds = [event["type"] for event in await history(postgres_url, run_id)]
        assert kinds[-3:] == ["node.released", "run.paused", "run.finished"], kinds
        texts = [
            event["message"].get("text")
            for event in await history(postgres_url, run_id)
            if event["type"] == "agent.message"
        ]
        assert "after the flag" not in texts
