"""Starting a process from a worker thread: :func:`open_process` is ``anyio.open_process``
with the fork and exec off the event loop's thread.

asyncio starts a subprocess in the loop's own thread, and ``subprocess`` (vfork) holds that
thread until the child has exec'd: a Python supervisor takes a few milliseconds, and a loaded
machine many more, all of which the loop stood still (100 runs at once: 0.9 s of it before
their agents' first messages, every run's relay waiting). Since CPython 3.11.6 the vfork lets
go of the interpreter's lock, so the loop goes on while a worker thread waits. The pipes are
then the loop's (``connect_read_pipe``, ``connect_write_pipe``), and the child is reaped when
its pidfd says it ended: no child watcher, no thread per child. Linux only; where pidfds are
not to be had (before 5.3, or a sandbox's seccomp refusing them) a worker thread waits for
each child instead.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import IO

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

__all__ = ["open_process"]

_LIMIT = 2**16  # what asyncio's subprocess streams buffer before they stop reading a pipe
# Without pidfds, a thread waits for each live child: never behind the default limiter's 40.
_WAITERS = anyio.CapacityLimiter(math.inf)


async def open_process(
    argv: Sequence[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    cwd: str,
    env: Mapping[str, str],
    pass_fds: Sequence[int] = (),
    give_up: int,
) -> Process:
    """``argv`` started in a new session (``subprocess.Popen`` in a worker thread; a
    cancellation waits for the start, so that nothing started goes unseen), its pipes on the
    event loop. ``give_up``: the signal that ends it, and what it started, should the pipes
    fail to join the loop (it is then reaped before this raises).

    Raises:
        OSError: as ``subprocess.Popen`` (the executable, the working directory).
    """

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # noqa: S603 - an argument list, never a shell: the caller's argv
            list(argv),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )

    popen: subprocess.Popen[bytes] = await anyio.to_thread.run_sync(start)
    try:
        pidfd = _pidfd(popen.pid)
        loop = asyncio.get_running_loop()
        return _ThreadStartedProcess(
            popen,
            pidfd,
            None if popen.stdin is None else await _writer(loop, popen.stdin),
            None if popen.stdout is None else await _reader(loop, popen.stdout),
            None if popen.stderr is None else await _reader(loop, popen.stderr),
        )
    except BaseException:
        with anyio.CancelScope(shield=True):
            popen.send_signal(give_up)
            await anyio.to_thread.run_sync(popen.wait)
        raise


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError as error:
        if error.errno in (errno.ENOSYS, errno.EPERM, errno.EACCES):
            return None
        raise


async def _reader(loop: asyncio.AbstractEventLoop, pipe: IO[bytes]) -> _PipeReceiveStream:
    reader = asyncio.StreamReader(limit=_LIMIT)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return _PipeReceiveStream(reader, transport)


async def _writer(loop: asyncio.AbstractEventLoop, pipe: IO[bytes]) -> _PipeSendStream:
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader())  # its flow control: drain()
    transport, _ = await loop.connect_write_pipe(lambda: protocol, pipe)
    return _PipeSendStream(asyncio.StreamWriter(transport, protocol, None, loop))


class _PipeReceiveStream(ByteReceiveStream):
    """A pipe the process writes, as anyio's subprocess streams read one."""

    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.BaseTransport) -> None:
        self._reader = reader
        self._transport = transport

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if max_bytes < 1:
            raise ValueError("max_bytes must be a positive integer")
        if data := await self._reader.read(max_bytes):
            return data
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        self._reader.set_exception(anyio.ClosedResourceError())
        self._transport.close()
        await anyio.lowlevel.checkpoint()


class _PipeSendStream(ByteSendStream):
    """A pipe the process reads, as anyio's subprocess streams write one."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._closed = False

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        try:
            self._writer.write(item)
            await self._writer.drain()
        except (ConnectionResetError, BrokenPipeError, RuntimeError) as error:
            if self._closed:
                raise anyio.ClosedResourceError from error
            if self._writer.is_closing():
                raise anyio.BrokenResourceError from error
            raise

    async def aclose(self) -> None:
        self._closed = True
        self._writer.close()
        await anyio.lowlevel.checkpoint()


class _ThreadStartedProcess(Process):
    """The process :func:`open_process` started. Reaped by :meth:`wait` once its pidfd is
    readable, or by a worker thread's wait without one (the pid stays the process's, a
    zombie, until then); :meth:`aclose` closes the pipes and waits for the exit, killing the
    process if the wait is cancelled."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        pidfd: int | None,
        stdin: _PipeSendStream | None,
        stdout: _PipeReceiveStream | None,
        stderr: _PipeReceiveStream | None,
    ) -> None:
        self._popen = popen
        self._pidfd: int | None = pidfd
        self._stdin, self._stdout, self._stderr = stdin, stdout, stderr
        self._waiting = anyio.Lock()  # one task at a time waits on the pidfd

    async def wait(self) -> int:
        async with self._waiting:
            while (code := self._popen.poll()) is None:
                if self._pidfd is None:
                    return await anyio.to_thread.run_sync(
                        self._popen.wait, abandon_on_cancel=True, limiter=_WAITERS
                    )
                await anyio.wait_readable(self._pidfd)
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        return code

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True) as scope:
            for stream in (self._stdin, self._stdout, self._stderr):
                if stream is not None:
                    await stream.aclose()
            scope.shield = False
            try:
                await self.wait()
            except BaseException:
                scope.shield = True
                if self._popen.returncode is None:
                    self._popen.kill()
                await self.wait()
                raise

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()

    def send_signal(self, signal: int) -> None:
        self._popen.send_signal(signal)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    @property
    def stdin(self) -> ByteSendStream | None:
        return self._stdin

    @property
    def stdout(self) -> ByteReceiveStream | None:
        return self._stdout

    @property
    def stderr(self) -> ByteReceiveStream | None:
        return self._stderr
