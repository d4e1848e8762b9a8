"""The SQLite store's connection thread: calls run one at a time in their order, their
errors reach their callers, and a caller cancelled while its call runs still waits for it
(the connection must be free when the caller goes on)."""

from __future__ import annotations

import threading

import anyio
import pytest

from nodeprov.store._thread import ConnectionThread

pytestmark = pytest.mark.anyio


async def test_calls_run_in_order_in_one_thread_and_errors_reach_their_callers() -> None:
    thread = ConnectionThread("test")
    seen: list[tuple[int, int]] = []

    def note(index: int) -> int:
        seen.append((index, threading.get_ident()))
        return index * 2

    def fail() -> None:
        raise KeyError("no such row")

    try:
        async with anyio.create_task_group() as tg:
            for index in range(50):
                tg.start_soon(thread.run, note, index)
        assert [index for index, _ in seen] == list(range(50))
        assert len({ident for _, ident in seen}) == 1
        assert seen[0][1] != threading.get_ident()
        assert await thread.run(note, 7) == 14
        with pytest.raises(KeyError, match="no such row"):
            await thread.run(fail)
    finally:
        thread.stop()


async def test_a_cancelled_caller_waits_for_its_call_to_end() -> None:
    thread = ConnectionThread("test")
    release, finished = threading.Event(), threading.Event()

    def busy() -> None:
        release.wait(10)
        finished.set()

    try:
        with anyio.fail_after(10):
            threading.Timer(0.3, release.set).start()
            with anyio.move_on_after(0.05) as scope:
                await thread.run(busy)
                assert finished.is_set()  # run() returned only once its call ended
                await anyio.lowlevel.checkpoint()  # where the cancellation, held back, lands
            assert scope.cancelled_caught
    finally:
        thread.stop()


async def test_a_stopped_thread_starts_again_on_the_next_call() -> None:
    thread = ConnectionThread("test")
    first = await thread.run(threading.current_thread)
    thread.stop()
    thread.stop()  # idempotent
    second = await thread.run(threading.current_thread)
    thread.stop()
    assert first is not second
    first.join(10)  # ended by the stop
    assert not first.is_alive()
