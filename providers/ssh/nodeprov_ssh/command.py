"""Sessions as local processes of a command that runs a remote command line, for hosts that
are reached only that way (``gh codespace ssh -c NAME -- COMMAND`` from a gh without
``--stdio``). Each session is one such process, one login: slower than sessions on a
shared connection, the same to everything above (:class:`~nodeprov_ssh.process.Session`)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import anyio
import asyncssh

from nodeprov.errors import ConfigError
from nodeprov_ssh.link import Link, SshSessionSettings
from nodeprov_ssh.process import Session

__all__ = ["CommandLink"]


class _Channel:
    """The part of asyncssh's channel a :class:`Session` drives, over a local process."""

    def __init__(self, transport: asyncio.SubprocessTransport) -> None:
        self._transport = transport

    def _pipe(self, fd: int) -> Any:
        return self._transport.get_pipe_transport(fd)

    def write(self, data: bytes) -> None:
        pipe = self._pipe(0)
        if pipe is None or pipe.is_closing():
            raise BrokenPipeError("stdin is closed")
        pipe.write(data)

    def write_eof(self) -> None:
        if (pipe := self._pipe(0)) is not None:
            pipe.close()

    def close(self) -> None:
        # Ends the local client; the remote process is stopped through another session.
        self._transport.close()

    def pause_reading(self) -> None:
        for fd in (1, 2):
            if (pipe := self._pipe(fd)) is not None:
                pipe.pause_reading()

    def resume_reading(self) -> None:
        for fd in (1, 2):
            if (pipe := self._pipe(fd)) is not None:
                pipe.resume_reading()


class _Relay(asyncio.SubprocessProtocol):
    """asyncio's callbacks for the local process, as the session's asyncssh callbacks."""

    def __init__(self, session: Session, logged_in: Callable[[], None]) -> None:
        self._session = session
        self._logged_in: Callable[[], None] | None = logged_in
        self._transport: asyncio.SubprocessTransport | None = None
        self._open_outputs = 2

    def _login_over(self) -> None:
        done, self._logged_in = self._logged_in, None
        if done is not None:
            done()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.SubprocessTransport, transport)
        self._session.connection_made(cast(Any, _Channel(self._transport)))

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self._login_over()  # the remote side answered (the preamble reports first)
        kind = asyncssh.EXTENDED_DATA_STDERR if fd == 2 else None
        self._session.data_received(cast(bytes, data), kind)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in (1, 2):
            self._open_outputs -= 1
            if self._open_outputs == 0:
                self._session.eof_received()

    def pause_writing(self) -> None:
        self._session.pause_writing()

    def resume_writing(self) -> None:
        self._session.resume_writing()

    def process_exited(self) -> None:
        self._login_over()
        assert self._transport is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        code = self._transport.get_returncode()
        if code is not None and code < 0:  # the local client itself was signalled
            self._session.exit_signal_received(signal.Signals(-code).name.removeprefix("SIG"), False, "", "")
        elif code is not None:
            self._session.exit_status_received(code)

    def connection_lost(self, exc: Exception | None) -> None:
        self._login_over()
        self._session.connection_lost(exc)


_CONCURRENT_LOGINS = 5  # below OpenSSH's MaxStartups (10), which drops logins beyond it


class CommandLink(Link):
    """A :class:`Link` whose sessions are local processes: ``argv`` followed by the remote
    command line (one argument), with ``env`` as their whole environment. At most
    five log in at once (the sshd drops unauthenticated connections past its MaxStartups).
    Offers no SFTP: node files go over the exec channel."""

    def __init__(
        self, host: str, settings: SshSessionSettings, argv: Sequence[str], env: Mapping[str, str]
    ) -> None:
        super().__init__(host, settings)
        self._argv = tuple(argv)
        self._env = dict(env)
        self._live: set[asyncio.SubprocessTransport] = set()
        self._logins = anyio.Semaphore(_CONCURRENT_LOGINS)

    async def open(self, command: str) -> Session:
        """Start ``command`` through a new local process.

        Raises:
            ConfigError: the command cannot run here.
        """
        session = Session()
        await self._logins.acquire()
        try:
            transport, _ = await asyncio.get_running_loop().subprocess_exec(
                lambda: _Relay(session, self._logins.release),
                *self._argv,
                command,
                env=self._env,
                start_new_session=True,
            )
        except BaseException as error:
            self._logins.release()
            if isinstance(error, OSError):
                raise ConfigError(f"{self.host}: cannot run {self._argv[0]}: {error}") from None
            raise
        self._live.add(transport)
        session.on_closed(lambda: self._live.discard(transport))
        return session

    async def sftp(self) -> None:
        return None

    async def aclose(self) -> None:
        """End the local processes still running (their remote commands lose their stdin)."""
        for transport in list(self._live):
            transport.close()
        self._live.clear()
