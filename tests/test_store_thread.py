"""The SQLite store's connection thread: calls run one at a time in their order, their
errors reach their callers, and a caller cancelled while its call runs still waits for it
(the connection must be free when the caller goes on)."""

from __future__ import annotations

import os
import signal
import threading
import time

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


async def test_a_stop_ends_the_thread_and_a_call_after_it_starts_one_again() -> None:
    thread = ConnectionThread("test")
    first = await thread.run(threading.current_thread)
    thread.stop()
    thread.stop()  # idempotent
    first.join(10)
    assert not first.is_alive()
    assert await thread.run(int, "7") == 7
    thread.stop()


def test_a_child_made_by_fork_gets_a_thread_of_its_own() -> None:
    """The thread stays in the parent: a call in the child would wait for ever on it."""
    thread = ConnectionThread("test")

    async def ident() -> int:
        with anyio.fail_after(10):
            return await thread.run(threading.get_ident)

    anyio.run(ident)  # started in the parent
    child = os.fork()
    if child == 0:  # the child reports through its exit status
        try:
            anyio.run(ident)
        except BaseException:
            os._exit(1)
        os._exit(0)
    deadline = time.monotonic() + 30
    while (ended := os.waitpid(child, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.02)  # polling a child's state: there is no event to wait on here
    thread.stop()
    if ended == (0, 0):
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail("the child's call waited for a thread that stayed in its parent")
    assert os.waitstatus_to_exitcode(ended[1]) == 0
