"""The Claude Code CLI's process on a node and its stream-json, with no SDK: what
:class:`~nodeprov.agents.claude.session.ClaudeSession` drives directly and
:class:`~nodeprov.agents.claude.NodeTransport` offers the SDK as a transport.

The process's stdout is framed as bytes and must be UTF-8: invalid bytes, a malformed JSON
line or a line over ``max_line`` end the stream with :class:`AgentOutputError`. Its stderr
is always drained (a full pipe would stall the agent), passed on line by line to a callback
when given, and its last lines kept for :class:`AgentExitError`. A process that closes its
stdout but keeps running is stopped after ``exit_timeout`` and reported, instead of being
waited for for ever; one that exits owing the answer to a control request sent to it fails
at once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import suppress
from typing import Any, Protocol

import anyio

from ..._json import loads
from ...errors import AgentError, AgentExitError, AgentOutputError, NodeprovError
from ...node import NodeHandle
from ...node.keeper import KeepOptions, KeptProcess, reattach, stopped_by_keeper
from ...spawn import SpawnedProcess, SpawnFn, SpawnOptions, StopPolicy
from .._guard import EndInput, start_agent
from .._stderr import StderrTail
from .option_files import OptionFiles

__all__ = ["DEFAULT_MAX_LINE", "NOISE_GRACE", "CliChannel", "TranscriptSink"]

logger = logging.getLogger("nodeprov.agents.claude")

DEFAULT_MAX_LINE = 1024 * 1024  # the SDK's default max_buffer_size
NOISE_GRACE = 60.0
"""Seconds an agent that printed what is not its protocol has to say something of it."""


class TranscriptSink(Protocol):
    """Takes the CLI's ``transcript_mirror`` frames (``--session-mirror``) off the stream, in
    place of the SDK's own mirror (which, flushing eagerly, spends a task and a store call per
    frame)."""

    def add(self, file_path: str, entries: list[dict[str, Any]]) -> None:
        """Take a frame: ``file_path`` is the transcript file on the node. Must not block."""

    async def flush(self) -> None:
        """Make every frame taken so far durable. The stream yields a ``result`` only once
        this returned, as the SDK does, so a caller seeing a result finds its turn stored.
        Errors propagate to the reader of the messages."""


class CliChannel:
    """The CLI's process (started, or a kept one re-attached) and its messages.

    ``guard`` runs the CLI behind the stdin guard (:func:`~nodeprov.agents._guard.start_agent`):
    it stops itself when its channel closes without an orderly stop; ``keep`` keeps it under
    a keeper on ``node`` instead. ``stop_policy`` governs :meth:`close`. Secret option values
    reach the CLI as files on ``node`` (:class:`OptionFiles` under ``home``).
    """

    def __init__(
        self,
        spawn: SpawnFn,
        *,
        node: NodeHandle | None = None,
        home: str | None = None,
        stop_policy: StopPolicy | None = None,
        exit_timeout: float = 10.0,
        guard: bool = True,
        keep: KeepOptions | None = None,
        transcripts: TranscriptSink | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        stderr: Callable[[str], None] | None = None,
    ) -> None:
        self._spawn = spawn
        self._node = node
        self._option_files = OptionFiles(node, home)
        self._stop_policy = stop_policy or StopPolicy()
        self._exit_timeout = exit_timeout
        self._guard = guard
        self._keep = keep
        self._transcripts = transcripts
        self._max_line = max_line
        self._stderr = stderr
        self._process: SpawnedProcess | None = None
        self._end_input: EndInput | None = None
        self._input_ended = False
        self._write_lock = anyio.Lock()
        self._stderr_tail: StderrTail | None = None
        self._unanswered: dict[str, str] = {}  # control requests the CLI owes: id -> subtype
        self._noise: str | None = None  # output that is not the protocol, since the last message
        self._failure: AgentError | None = None

    @property
    def process(self) -> SpawnedProcess | None:
        """The CLI's process while connected."""
        return self._process

    @property
    def connected(self) -> bool:
        return self._process is not None and self._failure is None

    async def start(self, argv: list[str], env: dict[str, str], cwd: str | None) -> None:
        """Start the CLI (guarded, kept, or plain), its secret options written as files first.

        Raises:
            ConfigError: keeping without a node.
            CommandNotFoundError, SpawnError, NodeGoneError, NodeFileError: as the spawn.
        """
        argv = await self._option_files.written(argv)
        options = SpawnOptions(argv[0], argv[1:], cwd=cwd, env=env)
        self._input_ended = False
        try:
            if self._guard or self._keep is not None:
                process, self._end_input = await start_agent(
                    self._spawn, options, self._stop_policy, keep_with=self._keep, node=self._node
                )
            else:
                process = await self._spawn(options)
                self._end_input = process.stdin.aclose
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._option_files.remove()
            raise
        self._connected(process)

    async def reattach(self, keeper: str) -> None:
        """Re-attach to the kept CLI of ``keeper``, its output read from its start.

        Raises:
            AgentError: there is no node to re-attach on.
            KeeperGoneError, NodeprovError: as :func:`~nodeprov.node.keeper.reattach`.
        """
        if self._node is None:
            raise AgentError("re-attaching needs the node")
        kept = await reattach(self._node, keeper, settings=self._keep)
        self._end_input = kept.stdin.aclose
        self._connected(kept)

    def _connected(self, process: SpawnedProcess) -> None:
        process.stop_policy = self._stop_policy
        self._process = process
        self._stderr_tail = StderrTail(process, max_line=self._max_line, on_line=self._stderr)

    def expect_answer(self, request_id: str, subtype: str) -> None:
        """A control request sent: the CLI owes its answer (see :meth:`messages`)."""
        self._unanswered[request_id] = subtype

    async def write(self, data: str) -> None:
        """Write ``data`` (whole lines) to the CLI's stdin.

        Raises:
            AgentError: not connected, input ended, or the process is gone (an
                :class:`AgentExitError` saying how it ended, as the reader would).
        """
        async with self._write_lock:
            process = self._process
            if self._failure is not None:
                raise self._failure
            if process is None:
                raise AgentError("the agent process is not connected")
            if self._input_ended and process.returncode is None:
                raise AgentError("cannot write to the agent process: its input was ended (end_input)")
            if process.returncode is None:
                try:
                    await process.stdin.send(data.encode())
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
                    # Most often the process died: say how, rather than "broken pipe".
                    with anyio.move_on_after(1):
                        await process.wait()
                    if process.returncode is None:
                        failure = AgentError(f"cannot write to the agent process: {error!r}")
                        raise self.fail(failure) from error
                else:
                    return
            code = process.returncode
            assert code is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
            raise self.fail(await self._exit_failure(code))

    def fail(self, error: AgentError) -> AgentError:
        """Remember the first failure, so later calls report the cause, not a symptom."""
        if self._failure is None:
            self._failure = error
        return self._failure

    async def end_input(self) -> None:
        """End the CLI's input: EOF on its stdin (guarded, the channel itself stays open)."""
        async with self._write_lock:
            process = self._process
            if process is None or self._input_ended:
                return
            self._input_ended = True
            # Gone already: EOF is moot.
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, NodeprovError):
                if self._end_input is not None:
                    await self._end_input()

    async def messages(
        self, on_control_response: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The CLI's messages to the end of its output, then its exit checked: transcript
        frames go to the sink (flushed before each ``result`` is yielded), control responses
        to ``on_control_response`` first, then to the reader like any message.

        Raises:
            AgentError: not connected.
            AgentOutputError: output that is not the protocol (see the module).
            AgentExitError: the process ended badly, or owing an answer.
        """
        process = self._process
        if process is None:
            raise AgentError("the agent process is not connected")
        parts: list[bytes] = []  # the line being received, when it spans chunks
        pending = 0
        try:
            while chunk := await self._next_chunk(process):
                # Each chunk's complete lines at once: a newline byte never falls inside a
                # UTF-8 sequence, so each line is whole characters.
                end = chunk.rfind(b"\n")
                if end < 0:
                    parts.append(chunk)
                    pending += len(chunk)
                    self._check_size(pending)
                    continue
                block = b"".join((*parts, chunk[:end])) if parts else chunk[:end]
                rest = chunk[end + 1 :]
                parts, pending = [rest], len(rest)
                if len(block) > self._max_line:
                    self._check_size(max(len(piece) for piece in block.split(b"\n")))
                self._check_size(pending)
                for line in block.split(b"\n"):
                    # The hot path: one message, no stray whitespace.
                    message = _loads_bytes(line) if line.startswith(b"{") else _parse(_decode(line))
                    if message is None:
                        if line.strip():
                            self._noise = _decode(line.strip())
                        continue
                    self._noise = None
                    if message.get("type") == "control_response":
                        if on_control_response is not None:
                            await on_control_response(message)
                        self._answered(message)
                    if self._transcripts is not None and await self._mirrored(message):
                        continue
                    yield message
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # close() took the stream away: the run is over
        except AgentOutputError as error:
            raise self.fail(error) from None
        tail = b"".join(parts)
        if tail.strip():
            try:
                message = _parse(_decode(tail))
            except AgentOutputError:
                logger.debug("dropping a truncated last line of agent output")
                message = None
            if message is not None and not (self._transcripts is not None and await self._mirrored(message)):
                yield message
        await self._check_exit(process)

    async def _mirrored(self, message: dict[str, Any]) -> bool:
        """Hand a mirror frame to the sink (True: not for the reader); flush before a result."""
        assert self._transcripts is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        kind = message.get("type")
        if kind == "transcript_mirror":
            self._transcripts.add(str(message.get("filePath")), list(message.get("entries") or []))
            return True
        if kind == "result":
            await self._transcripts.flush()
        return False

    def _check_size(self, length: int) -> None:
        if length > self._max_line:
            raise self.fail(
                AgentOutputError(
                    f"agent output line of {length} bytes or more exceeds the limit of "
                    f"{self._max_line} bytes (options.max_buffer_size)"
                )
            )

    async def _next_chunk(self, process: SpawnedProcess) -> bytes:
        """The next piece of stdout (empty at its end). Once the agent has printed what is
        not its protocol, it must say something of it within :data:`NOISE_GRACE` seconds:
        a program that prints noise and then waits (for a prompt nobody answers, say) is no
        agent at work, and would otherwise hold the run for ever."""
        try:
            if self._noise is None:
                return await process.stdout.receive()
            with anyio.move_on_after(NOISE_GRACE):
                return await process.stdout.receive()
        except anyio.EndOfStream:
            return b""
        raise self.fail(
            AgentOutputError(
                f"the agent printed what is not its protocol ({self._noise[:200]!r}) and then "
                f"nothing for {NOISE_GRACE:g} s" + _last_words(self.stderr_tail)
            )
        )

    def _answered(self, message: dict[str, Any]) -> None:
        response = message.get("response")
        if isinstance(response, dict):
            self._unanswered.pop(str(response.get("request_id")), None)

    async def _check_exit(self, process: SpawnedProcess) -> None:
        """After stdout EOF: the process must exit, with status 0, having answered every
        control request sent to it (one that exits first, say before answering
        ``initialize``, fails here, at once, rather than leaving its caller waiting)."""
        with anyio.move_on_after(self._exit_timeout):
            await process.wait()
        code = process.returncode
        if code is None:
            raise self.fail(
                AgentExitError(
                    f"the agent process closed its output but was still running after {self._exit_timeout}s",
                    exit_code=None,
                    stderr_tail=self.stderr_tail,
                )
            )
        if code != 0 or self._unanswered:
            raise self.fail(await self._exit_failure(code))

    async def _exit_failure(self, code: int) -> AgentExitError:
        """The process exited with ``code``: its status, the control requests it left
        unanswered, and the end of its stderr (read to its end first, briefly). The same
        words whether a write or the reader finds it gone first."""
        if self._stderr_tail is not None:
            await self._stderr_tail.settled()
        pending = sorted(set(self._unanswered.values()))
        before = f" before answering {', '.join(pending)}" if pending else ""
        said = stopped_by_keeper(self._process) or f"the agent process exited with status {code}"
        return AgentExitError(
            f"{said}{before}" + _last_words(self.stderr_tail), exit_code=code, stderr_tail=self.stderr_tail
        )

    @property
    def stderr_tail(self) -> str:
        """The last lines the process wrote to stderr."""
        return self._stderr_tail.text if self._stderr_tail is not None else ""

    async def detach(self) -> None:
        """Leave a kept CLI running: close its channel, not the CLI (see
        :meth:`KeptProcess.detach`); a CLI that is not kept is stopped, as by :meth:`close`."""
        if isinstance(self._process, KeptProcess):
            await self._process.detach()  # its option files stay: the CLI still reads them
            self._option_files = OptionFiles(None, None)
        await self.close()

    async def close(self) -> None:
        """Stop the CLI (stdin EOF, then SIGTERM, then SIGKILL) and release everything.

        Idempotent, shielded, and bounded by the stop policy's total plus a few seconds,
        whatever the process or its node does. Never raises: a node that is gone or out of
        reach is logged (its process is gone, or ends with its node's lifetime), and the
        option files are removed all the same where the node still answers.
        """
        with anyio.CancelScope(shield=True):
            process, self._process = self._process, None
            if process is None:
                return
            with anyio.move_on_after(5):
                async with self._write_lock:
                    pass  # let a write in progress finish before stdin is closed
            try:
                await process.aclose()
            except NodeprovError as error:  # its node is gone or out of reach: nothing to stop
                logger.warning("stopping the agent process: %s", error)
            finally:
                await self._option_files.remove()
                if self._stderr_tail is not None:
                    await self._stderr_tail.aclose()


def _decode(block: bytes) -> str:
    try:
        return block.decode("utf-8")
    except UnicodeDecodeError as error:
        raise AgentOutputError(f"agent output is not valid UTF-8: {error}") from None


_decoder = json.JSONDecoder()


def _loads_bytes(line: bytes) -> dict[str, Any]:
    """A line (bytes) that starts with '{': it is one JSON object in UTF-8, or the output
    is corrupt. Parsed from the bytes as they are (:func:`nodeprov._json.loads`); a line
    that is not one object goes through :func:`_loads`, which says what is wrong."""
    try:
        message = loads(line)
    except ValueError:
        message = None
    return message if isinstance(message, dict) else _loads(_decode(line))


def _loads(line: str) -> dict[str, Any]:
    """A line that starts with '{': it is one JSON object, or the output is corrupt."""
    try:
        message, end = _decoder.raw_decode(line)
    except json.JSONDecodeError as error:
        raise AgentOutputError(f"agent output is not valid JSON ({error}): {line[:200]!r}") from None
    if end != len(line) and not line[end:].isspace():
        raise AgentOutputError(f"agent output has extra data after a JSON object: {line[:200]!r}")
    return message  # type: ignore[no-any-return]


def _last_words(stderr_tail: str) -> str:
    """The last line of an agent's stderr, for an error's one line."""
    last = stderr_tail.strip().splitlines()[-1:] if stderr_tail.strip() else []
    return f" (its stderr ends: {last[0][:300]})" if last else ""


def _parse(line: str) -> dict[str, Any] | None:
    """One line of NDJSON; blank and non-JSON lines (debug noise, as the SDK skips) are None."""
    line = line.strip()
    if line.startswith("{"):
        return _loads(line)
    if line:
        logger.debug("skipping a non-JSON line of agent output: %.200s", line)
    return None
