"""A store soak: many runs through one store, with retention on and without it.

``--runs`` (10,000) real runs go through :class:`~nodeprov.runs.Orchestrator` on the fake
provider (a node is a directory, the agent a child process) with the fake Claude Code CLI
(:mod:`nodeprov.testing.fake_agent`), into one store, once per mode, in the same sitting:

- each run sends ``--messages`` assistant messages of ``--message-bytes`` (run events and
  transcript entries mirrored into the store) and has a node record; every
  ``--pause-every``-th run is paused mid-turn (a snapshot; every other one keeps its node)
  and resumed (on the kept node, or on a fresh one with its transcript restored); every
  ``--image-every``-th run's prompt holds a PNG of its own (an image, and its reference);
  runs go to ``--workspaces`` workspaces in turn, ``--per-workspace`` runs each (sessions
  and workspaces come and go);
- control planes come and go as CLI invocations do: a new orchestrator (a new lease,
  released at its exit) every ``--per-plane`` runs, ``--parallel`` runs at once; and after
  every ``--dead-every``-th one a control plane "dies": a lease is taken with a TTL of
  ``--dead-ttl`` seconds and never renewed nor released.

**Retention on** simulates a busy service's steady state, since no run can be 30 days old
here: every ``--prune-every`` runs (in the background, beside the runs, as the hourly prune
runs beside a service's runs) :func:`nodeprov.runs.retention.prune` deletes what ended
before the ``--keep``-th last run ended (an age in seconds measured then: "30 days" is
"the last ``--keep`` runs"), then dead leases are compacted with
``store.leases.compact(LIVE_STATES, after=--compact-after)`` (600 s in the product) until
none is left. **Without retention** nothing is ever pruned nor compacted. In both modes the
orchestrators' own prune (``retention=None``) and periodic reconcile
(``reconcile_interval=0``, which compacts leases dead for 600 s) are off, so that the
bench alone decides what is deleted; no dead control plane owns a run, so reconcile would
have nothing else to do.

Every ``--measure-every`` runs, between control planes (no run in flight, no prune under
way: before that point's prune), it measures: the store's size (SQLite: the WAL's bytes,
then after ``PRAGMA wal_checkpoint(TRUNCATE)`` the file's, and the pages used and free;
PostgreSQL: ``pg_total_relation_size`` summed over the schema's tables, heap and indexes,
and dead tuples); the rows of the main tables; and the liveness check's time, as the median
and p10-p90 of ``--calls`` calls: ``owner_check(store)`` (every lease: gc's form) and
``owner_check(store, owners)`` (by key, the last 20 control planes' owners: attach and
follow's form); and the time per run (wall time over the runs since the last point, and
the median run's duration, start to end, pause and resume included). No timing is asserted.

    python -m bench.store_soak [--runs 10000] [--store sqlite|sqlite:///PATH|postgresql://...]
                               [--modes retention none] [--help]

``--store postgresql://...`` names a server: each mode gets a schema of its own, dropped at
the end. ``sqlite:///PATH`` keeps each mode's file (PATH with ``-retention``/``-none``).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio

from nodeprov.agents import AgentText
from nodeprov.prompts import ImageBlock, Prompt, TextBlock
from nodeprov.registry import register_provider
from nodeprov.runs import AgentMessage, Orchestrator, RunEvent
from nodeprov.runs.lease import owner_check
from nodeprov.runs.retention import prune
from nodeprov.runs.state import LIVE_STATES
from nodeprov.store import PruneReport, Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.fake_provider import FakeProvider
from nodeprov.testing.images import sample_png

register_provider("fake", FakeProvider)  # a test double: never an installed provider

TABLES = (
    "runs",
    "run_events",
    "transcript_entries",
    "transcript_summaries",
    "snapshots",
    "nodes",
    "images",
    "image_refs",
    "sessions",
    "workspaces",
    "leases",
)
_BY_KEY_OWNERS = 20
_MB = 1e6


@dataclass
class Point:
    """What one measurement found, after ``runs`` runs."""

    runs: int
    busy: float  # seconds of runs (and prunes beside them) since the start, measurements excluded
    size: dict[str, float]
    rows: dict[str, int]
    full: list[float]  # seconds per call of owner_check(store)
    by_key: list[float]  # seconds per call of owner_check(store, owners)
    per_run: float  # wall seconds per run since the last point
    durations: list[float]  # the runs' since the last point, start to end
    failed: int  # since the start
    load: float = field(default_factory=lambda: os.getloadavg()[0])  # the machine's, over the last minute


@dataclass
class Soak:
    """One mode's sitting: what it saw."""

    mode: str
    points: list[Point] = field(default_factory=list)
    pruned: PruneReport = field(default_factory=PruneReport)
    compacted: int = 0
    prunes: int = 0
    prune_seconds: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    left: str = ""  # what is left of the nodes at the end
    durations: list[float] = field(default_factory=list)  # since the last point
    ends: list[float] = field(default_factory=list)  # time.time() of each run's end
    owners: list[str] = field(default_factory=list)  # control planes', live and dead, in order


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(values: list[float]) -> str:
    """Median and p10-p90, in milliseconds."""
    if not values:
        return "-"
    median, low, high = (
        1000 * x for x in (statistics.median(values), *(_quantile(values, q) for q in (0.1, 0.9)))
    )
    return f"{median:7.2f} [{low:6.2f}-{high:6.2f}]"


def _script(messages: int, size: int, *, stall: bool = False) -> dict[str, Any]:
    steps: list[dict[str, Any]] = (
        [{"text": "looking"}, {"stream": [messages - 1, size, 0]}] if messages > 1 else []
    )
    steps = steps or [{"text": "looking"}]
    steps += [{"stall": True}] if stall else []
    return {"NODEPROV_FAKE_AGENT": json.dumps(steps)}


def _prompt(index: int, args: argparse.Namespace) -> Prompt:
    text = f"task {index}: " + "tidy the module, run the tests, and say what changed. " * 4
    if not (args.image_every and index % args.image_every == 0):
        return text
    number = index // args.image_every  # a PNG of its own per image run
    image = sample_png(48 + (number // 255) % 128, 32, seed=number % 255 + 1)
    return [TextBlock(text), ImageBlock.from_bytes(image)]


async def _first_messages(events: AsyncIterator[RunEvent], count: int) -> None:
    """Read the run's events until the agent said ``count`` texts."""
    async with aclosing(cast(AsyncGenerator[RunEvent, None], events)) as stream:
        seen = 0
        async for event in stream:
            if isinstance(event, AgentMessage) and isinstance(event.message, AgentText):
                seen += 1
                if seen >= count:
                    return
    raise RuntimeError(f"the run's events ended after {seen} agent texts")


async def one_run(
    orchestrator: Orchestrator, index: int, args: argparse.Namespace, command: str, root: Path
) -> None:
    """One run; when it is a pausing one, paused mid-turn then resumed to its end.

    Raises:
        RuntimeError: the run did not end ``ok``.
    """
    settings = {"root": str(root)}
    pausing = bool(args.pause_every) and index % args.pause_every == args.pause_every - 1
    first = min(2, args.messages)
    script = (
        _script(first, args.message_bytes, stall=True)
        if pausing
        else _script(args.messages, args.message_bytes)
    )
    run = await orchestrator.start(
        _prompt(index, args),
        provider="fake",
        provider_settings=settings,
        options={"cli_path": command, "env": script},
        workspace=f"ws-{index // args.per_workspace % args.workspaces}",
    )
    if pausing:
        await _first_messages(run.events(), first)
        keep = index // args.pause_every % 2 == 0
        snapshot = await run.pause("human", "soak: a pause mid-turn", keep_node=keep)
        if (outcome := await run.wait()) != "paused":
            raise RuntimeError(f"paused run {run.id} ended {outcome}: {run.error}")
        rest = _script(max(1, args.messages - first), args.message_bytes)
        run = await orchestrator.resume(
            snapshot.token,
            message="go on",
            options={"cli_path": command, "env": rest},
            provider_settings=settings,
        )
    if (outcome := await run.wait()) != "ok":
        raise RuntimeError(f"run {run.id} ended {outcome}: {run.error}")


async def _timed(call: Callable[[], Awaitable[object]], times: int) -> list[float]:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        await call()
        spent.append(time.perf_counter() - started)
    return spent


async def _pragma(store: Store, name: str) -> int:
    return int((await store.db.fetchall(f"PRAGMA {name}"))[0][0])


async def _bytes(path: Path) -> int:
    where = anyio.Path(path)
    return (await where.stat()).st_size if await where.exists() else 0


async def _size(store: Store, path: Path | None) -> dict[str, float]:
    if path is not None:
        wal_bytes = await _bytes(path.with_name(path.name + "-wal"))
        await store.db.fetchall("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free = await _pragma(store, "page_count"), await _pragma(store, "freelist_count")
        page = await _pragma(store, "page_size")
        return {
            "file MB": await _bytes(path) / _MB,
            "wal MB": wal_bytes / _MB,
            "used MB": (pages - free) * page / _MB,
            "free MB": free * page / _MB,
        }
    rows = await store.db.fetchall(
        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0), COALESCE(SUM(pg_relation_size(c.oid)), 0),"
        " COALESCE(SUM(pg_indexes_size(c.oid)), 0)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relkind = 'r'"
    )
    dead = await store.db.fetchall(
        "SELECT COALESCE(SUM(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = current_schema()"
    )
    total, heap, indexes = (int(x) for x in rows[0])
    return {
        "total MB": total / _MB,
        "heap MB": heap / _MB,
        "index MB": indexes / _MB,
        "dead tup": float(dead[0][0]),
    }


async def measure(store: Store, path: Path | None, soak: Soak, runs: int, busy: float, calls: int) -> Point:
    size = await _size(store, path)
    rows = {table: int((await store.db.fetchall(f"SELECT COUNT(*) FROM {table}"))[0][0]) for table in TABLES}
    owners = soak.owners[-_BY_KEY_OWNERS:]
    full = await _timed(lambda: owner_check(store), calls)
    by_key = await _timed(lambda: owner_check(store, owners), calls)
    last = soak.points[-1] if soak.points else None
    since = runs - (last.runs if last else 0)
    per_run = (busy - (last.busy if last else 0.0)) / max(1, since)
    point = Point(runs, busy, size, rows, full, by_key, per_run, soak.durations, len(soak.errors))
    soak.durations = []
    soak.points.append(point)
    return point


async def _left(store: Store, root: Path) -> str:
    """The node records not gone, by state, and the nodes' directories left on disk."""
    held = await store.db.fetchall(
        "SELECT state, COUNT(*) FROM nodes WHERE state <> 'destroyed' GROUP BY state"
    )
    where = anyio.Path(root)
    directories = [p async for p in where.iterdir() if await p.is_dir()] if await where.exists() else []
    records = ", ".join(f"{state} {count}" for state, count in held) or "none"
    return f"node records not destroyed: {records}; node directories left: {len(directories)}"


def _crossed(before: int, after: int, every: int) -> bool:
    return every > 0 and after // every > before // every


async def soak_mode(
    mode: str, url: str, path: Path | None, args: argparse.Namespace, command: str, root: Path
) -> Soak:
    """Drive ``--runs`` runs through the store at ``url`` (see the module); retention on
    when ``mode`` is ``retention``."""
    soak, retain = Soak(mode), mode == "retention"
    async with await Store.open(url) as store:
        print(f"\n== {_title(mode, args)}: {store.db.where}", flush=True)  # no password
        print(_header(path is not None), flush=True)
        pruning = anyio.Lock()

        async def prune_now() -> None:
            async with pruning:
                started = time.perf_counter()
                if len(soak.ends) > args.keep:
                    cutoff = sorted(soak.ends)[-args.keep]
                    soak.pruned.add(await prune(store, older_than=max(0.0, time.time() - cutoff)))
                while compacted := await store.leases.compact(LIVE_STATES, after=args.compact_after):
                    soak.compacted += compacted
                soak.prunes += 1
                soak.prune_seconds.append(time.perf_counter() - started)

        async with anyio.create_task_group() as background:  # prunes, beside the runs
            done, plane, busy = 0, 0, 0.0
            limit = anyio.CapacityLimiter(args.parallel)
            while done < args.runs:
                started = time.perf_counter()
                count = min(args.per_plane, args.runs - done)
                async with (
                    Orchestrator(
                        store, holder=f"soak {mode} plane {plane}", retention=None, reconcile_interval=0
                    ) as orchestrator,
                    anyio.create_task_group() as tg,
                ):
                    soak.owners.append(orchestrator.owner)
                    for index in range(done, done + count):
                        tg.start_soon(_bounded, orchestrator, index, args, command, root, soak, limit)
                plane += 1
                if args.dead_every and plane % args.dead_every == 0:
                    dead = await store.leases.acquire(f"soak {mode} dead plane {plane}", args.dead_ttl)
                    soak.owners.append(f"lease:{dead.id}")
                busy += time.perf_counter() - started
                before, done = done, done + count
                if _crossed(before, done, args.measure_every) or done == args.runs:
                    async with pruning:  # no prune under way while measuring
                        point = await measure(store, path, soak, done, busy, args.calls)
                    print(_line(point), flush=True)
                if retain and (_crossed(before, done, args.prune_every) or done == args.runs):
                    background.start_soon(prune_now)
        soak.left = await _left(store, root)
    return soak


async def _bounded(
    orchestrator: Orchestrator,
    index: int,
    args: argparse.Namespace,
    command: str,
    root: Path,
    soak: Soak,
    limit: anyio.CapacityLimiter,
) -> None:
    async with limit:
        started = time.perf_counter()
        try:
            with anyio.fail_after(args.run_timeout):
                await one_run(orchestrator, index, args, command, root)
        except Exception as error:  # a run that broke is counted and said, and the soak goes on
            soak.errors.append(f"run #{index}: {type(error).__name__}: {error}")
            if len(soak.errors) <= 5:
                print(f"   {soak.errors[-1]}", flush=True)
        soak.durations.append(time.perf_counter() - started)
        soak.ends.append(time.time())


def _title(mode: str, args: argparse.Namespace) -> str:
    if mode == "retention":
        return (
            f"retention on (pruned every {args.prune_every} runs keeping the last {args.keep},"
            f" leases compacted {args.compact_after:g} s after they die)"
        )
    return "without retention (never pruned nor compacted)"


def _header(sqlite: bool) -> str:
    size = "file MB  wal MB  used MB  free MB" if sqlite else "total MB heap MB index MB dead tup"
    return (
        f"{'runs':>6} {'s/run':>6} {'run s p50 [p10-p90]':>21} {'fail':>4} {size}"
        f"  {'full ms p50 [p10-p90]':>23}  {'by key ms p50 [p10-p90]':>23}  load"
    )


def _line(point: Point) -> str:
    durations = point.durations or [0.0]
    low, high = _quantile(durations, 0.1), _quantile(durations, 0.9)
    run = f"{statistics.median(durations):5.2f} [{low:5.2f}-{high:5.2f}]"
    size = " ".join(
        f"{value:{len(name)}.{0 if name == 'dead tup' else 2}f}" for name, value in point.size.items()
    )
    return (
        f"{point.runs:6d} {point.per_run:6.3f} {run:>21} {point.failed:4d} {size}"
        f"  {_ms(point.full):>23}  {_ms(point.by_key):>23}  {point.load:4.1f}"
    )


def _rows_table(soak: Soak) -> list[str]:
    short = {"run_events": "events", "transcript_entries": "transcript", "transcript_summaries": "summaries"}
    names = [short.get(table, table) for table in TABLES]
    lines = ["  rows: " + " ".join(f"{name:>10}" for name in ["after", *names])]
    for point in soak.points:
        lines.append("        " + " ".join(f"{n:10d}" for n in [point.runs, *point.rows.values()]))
    return lines


def _ratio(first: Point, last: Point, of: Callable[[Point], float]) -> str:
    base = of(first)
    return f"{of(last) / base:.2f}x" if base else "n/a"


def report(soaks: list[Soak], args: argparse.Namespace, sqlite: bool, elapsed: float) -> None:
    print(f"\n==== store soak: {args.runs} runs per mode, {elapsed / 60:.1f} min in all")
    for soak in soaks:
        print(f"\n== {_title(soak.mode, args)}")
        print(_header(sqlite))
        for point in soak.points:
            print(_line(point))
        print("\n".join(_rows_table(soak)))
        if soak.prunes:
            pruned = ", ".join(f"{k} {v}" for k, v in soak.pruned.as_json().items() if v and k != "dry_run")
            print(
                f"  {soak.prunes} prunes, {_ms(soak.prune_seconds).strip()} ms each (p50 [p10-p90]):"
                f" {pruned or 'nothing'}; {soak.compacted} leases compacted"
            )
        print(f"  {soak.left}")
        if soak.errors:
            print(f"  {len(soak.errors)} runs failed; the first: {soak.errors[0]}")
    size = next(iter(soaks[0].points[0].size)) if soaks and soaks[0].points else "size"
    print(
        f"\nthe last point over the first at 1k runs, and over the first at {args.keep + args.prune_every}"
        f" (retention's store full: --keep + --prune-every); size is {size}, liveness the median call:"
    )
    ratios: dict[str, Callable[[Point], float]] = {
        "size": lambda p: next(iter(p.size.values())),
        "runs rows": lambda p: p.rows["runs"],
        "leases rows": lambda p: p.rows["leases"],
        "liveness full": lambda p: statistics.median(p.full),
        "by key": lambda p: statistics.median(p.by_key),
        "s/run": lambda p: p.per_run,
    }
    steady = args.keep + args.prune_every  # runs a store with retention holds at most
    for soak in soaks:
        for least in sorted({1000, steady}):
            first = next((p for p in soak.points if p.runs >= least), None)
            if first is not None and first is not soak.points[-1]:
                figures = ", ".join(
                    f"{name} {_ratio(first, soak.points[-1], of)}" for name, of in ratios.items()
                )
                print(f"  {soak.mode:9} {soak.points[-1].runs:6d}/{first.runs:<6d} runs: {figures}")
    print(
        f"(s/run: wall seconds per run, {args.parallel} at once, {os.cpu_count()} CPUs;"
        " run s: a run's duration, start to end;"
        f" liveness: {args.calls} calls each, by key over the last {_BY_KEY_OWNERS} control planes' owners;"
        " measured between control planes, before that point's prune; load: the 1-minute load average)"
    )


@asynccontextmanager
async def store_for(mode: str, args: argparse.Namespace, tmp: Path) -> AsyncIterator[tuple[str, Path | None]]:
    """The store's URL for ``mode``, and its file on SQLite."""
    if args.store.startswith(("postgresql://", "postgres://")):
        admin = await Store.open(args.store)
        schema = f"soak_{mode}_{secrets.token_hex(4)}"
        await admin.db.execute(f"CREATE SCHEMA {schema}")
        try:
            joint = "&" if "?" in args.store else "?"
            yield f"{args.store}{joint}options=-csearch_path%3D{schema}", None
        finally:
            await admin.db.execute(f"DROP SCHEMA {schema} CASCADE")
            await admin.aclose()
        return
    if args.store == "sqlite":
        path = tmp / f"soak-{mode}.db"
    elif args.store.startswith("sqlite:///"):
        given = Path("/" + args.store.removeprefix("sqlite://").lstrip("/"))
        path = given.with_name(f"{given.stem}-{mode}{given.suffix}")
    else:
        raise SystemExit(f"--store: sqlite, sqlite:///PATH or postgresql://..., not {args.store!r}")
    yield f"sqlite:///{path}", path


async def main(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    soaks: list[Soak] = []
    sqlite = not args.store.startswith(("postgresql://", "postgres://"))
    with tempfile.TemporaryDirectory(prefix="nodeprov-soak-") as directory:
        tmp = Path(directory)
        command = fake_agent_command(tmp)
        for mode in args.modes:
            async with store_for(mode, args, tmp) as (url, path):
                soaks.append(await soak_mode(mode, url, path, args, command, tmp / "nodes"))
    report(soaks, args, sqlite, time.perf_counter() - started)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--runs", type=int, default=10_000, help="runs per mode")
    add(
        "--store",
        default="sqlite",
        help="sqlite (a temporary file), sqlite:///PATH, or a PostgreSQL server URL",
    )
    add("--modes", nargs="+", choices=["retention", "none"], default=["retention", "none"])
    add("--parallel", type=int, default=8, help="runs at once (per control plane)")
    add("--per-plane", type=int, default=10, help="runs per control plane (orchestrator, lease)")
    add("--dead-every", type=int, default=3, help="a dead control plane's lease after every Nth (0: none)")
    add("--dead-ttl", type=float, default=1.0, help="seconds a dead control plane's lease lives")
    add("--messages", type=int, default=4, help="agent messages per run")
    add("--message-bytes", type=int, default=800, help="bytes of text per agent message")
    add("--pause-every", type=int, default=5, help="every Nth run is paused and resumed (0: none)")
    add("--image-every", type=int, default=10, help="every Nth run's prompt has an image (0: none)")
    add("--workspaces", type=int, default=1000, help="workspaces the runs go to in turn")
    add("--per-workspace", type=int, default=10, help="runs in a row to one workspace")
    add("--prune-every", type=int, default=500, help="runs between prunes (retention on)")
    add("--keep", type=int, default=1000, help="runs a prune keeps: the retention period, in runs")
    add("--compact-after", type=float, default=5.0, help="seconds a dead lease stays (retention on)")
    add("--measure-every", type=int, default=1000, help="runs between measurements")
    add("--calls", type=int, default=50, help="liveness checks timed per measurement and form")
    add("--run-timeout", type=float, default=120.0, help="seconds a run may take before it counts as failed")
    anyio.run(main, parser.parse_args())
