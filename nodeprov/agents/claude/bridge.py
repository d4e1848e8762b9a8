"""The Claude Agent SDK bridge: run the Claude Code CLI on any node.

:class:`NodeTransport` is a ``claude_agent_sdk.Transport`` built from a
:data:`~nodeprov.spawn.SpawnFn` and a ``ClaudeAgentOptions``. Use it with ``query`` or
``ClaudeSDKClient``::

    async with await provider.provision() as node:
        options = ClaudeAgentOptions(permission_mode="acceptEdits")
        async for message in query(prompt="...", options=options,
                                   transport=NodeTransport.for_node(node, options)):
            ...

The SDK applies no CLI flags to a custom transport, so this one builds the command line
itself, with the SDK's own builder: the argument vector is exactly what the SDK's
subprocess transport would run for the same options, with the CLI path of the node. The
environment is ``options.env`` plus what the SDK itself adds (entrypoint, SDK version,
session-state frames, checkpointing, PWD, trace context) and never the control plane's own
environment; the node's base environment lies under it.

Differences from the SDK's subprocess transport, all deliberate:

- stdout is framed as bytes and must be UTF-8: invalid bytes, a malformed JSON line or a
  line over ``options.max_buffer_size`` end the stream with :class:`AgentOutputError`.
- stderr is always drained (a full pipe would stall the agent), forwarded line by line to
  ``options.stderr`` when given, and its last lines are kept for :class:`AgentExitError`.
- A process that closes stdout but keeps running is stopped after ``exit_timeout`` and
  reported, instead of being waited for forever.
- The CLI runs behind a stdin guard (:func:`~nodeprov.agents._guard.guard_stdin`, ``guard=True``):
  if the control plane dies or loses its connection to the node, the CLI stops itself
  instead of calling the model on with nobody listening. ``end_input()`` therefore sends
  an end-of-input line that the guard turns into EOF, rather than closing the channel.
- ``options.user`` is refused: a node's user is the provider's business.
- With ``options.sandbox`` and a settings *file*, the SDK reads that file on the control
  plane, and so does this bridge; pass settings as JSON for a remote node.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any, Protocol

import anyio
from claude_agent_sdk import ClaudeAgentOptions, Transport

# A private SDK part, pinned by the version range in pyproject.toml and covered by tests.
from claude_agent_sdk._internal._task_compat import TaskHandle, spawn_detached

from ..._json import loads
from ...errors import AgentError, AgentExitError, AgentOutputError, ConfigError, NodeprovError
from ...node import NodeHandle
from ...node.keeper import KeepOptions, KeptProcess, reattach, stopped_by_keeper
from ...spawn import SpawnedProcess, SpawnFn, SpawnOptions, StopPolicy
from .._guard import EndInput, start_agent
from .command import agent_command, agent_environment
from .option_files import OptionFiles

__all__ = ["NodeTransport", "TranscriptSink", "agent_command", "agent_environment"]


class TranscriptSink(Protocol):
    """Takes the CLI's ``transcript_mirror`` frames (``--session-mirror``) off a
    :class:`NodeTransport`, in place of the SDK's own mirror (which, flushing eagerly,
    spends a task and a store call per frame)."""

    def add(self, file_path: str, entries: list[dict[str, Any]]) -> None:
        """Take a frame: ``file_path`` is the transcript file on the node. Must not block."""

    async def flush(self) -> None:
        """Make every frame taken so far durable. The transport yields a ``result`` only once
        this returned, as the SDK does, so a caller seeing a result finds its turn stored.
        Errors propagate to the reader of the messages."""


logger = logging.getLogger("nodeprov.agents.claude")

DEFAULT_MAX_LINE = 1024 * 1024  # the SDK's default max_buffer_size
_STDERR_TAIL_LINES = 20


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


NOISE_GRACE = 60.0
"""Seconds an agent that printed what is not its protocol has to say something of it."""


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


class _Reattach:
    """A re-attach to a kept CLI (``keeper``), whose output is read from its start: its first
    control response, the CLI's answer to the first SDK's ``initialize``, answers this SDK's
    own, which is never sent (a second ``initialize`` would reset the CLI's session)."""

    def __init__(self, keeper: str) -> None:
        self.keeper = keeper
        self._asked = anyio.Event()
        self._request_id = ""
        self._answered = False

    def asked(self, request_id: str) -> None:
        """The SDK sent its ``initialize`` (``request_id``); the CLI does not get it."""
        self._request_id = request_id
        self._asked.set()

    async def answer(self, response: dict[str, Any]) -> None:
        """A control response off the CLI: the first becomes the answer to this SDK's
        ``initialize``, once it has asked."""
        if self._answered:
            return
        await self._asked.wait()
        inner = response.get("response")
        if isinstance(inner, dict):
            inner["request_id"] = self._request_id
        self._answered = True


class NodeTransport(Transport):
    """A ``claude_agent_sdk.Transport`` that runs the CLI through a :data:`SpawnFn`.

    ``cli_path`` is where the CLI is *on the node*; it defaults to ``options.cli_path``,
    then ``"claude"`` on the node's PATH. ``stop_policy`` governs :meth:`close` (stdin EOF,
    then SIGTERM, then SIGKILL); ``exit_timeout`` bounds the wait for the process to exit
    once it has closed its stdout.

    ``guard`` (on by default) runs the CLI inside :func:`~nodeprov.agents._guard.guard_stdin`, so
    that it stops itself when its channel to the control plane closes without an orderly
    stop: the control plane was killed, or its connection to the node dropped. The CLI then
    gets EOF, and ``eof_grace + term_grace`` seconds later SIGTERM, and ``term_grace``
    seconds after that SIGKILL (all from ``stop_policy``): with the default policy it is
    gone within 15 s. The guard waits longer than the stop policy's own EOF step, so that
    a :meth:`close` from a live control plane always acts first. :meth:`end_input` sends a
    random per-connection line that the guard turns into EOF while the channel stays open.
    The guard needs ``/bin/sh``, ``awk``, ``mktemp`` and ``mkfifo`` on the node; with
    ``guard=False`` the CLI is spawned as is and :meth:`end_input` closes the channel.

    Made with :meth:`for_node`, the options that may carry secrets (MCP servers with their
    ``env`` and ``headers``, ``settings``) reach the CLI as ``0600`` files on the node, under
    ``CLAUDE_CONFIG_DIR`` (else the node's ``HOME``) in ``.nodeprov/``, removed by
    :meth:`close`: never as arguments, which any user of the node can read (``ps``, an
    engine's exec inspection). With a bare :data:`SpawnFn` they stay arguments.

    Errors (raised from ``connect``, ``write`` and the message stream, and so from the
    SDK's ``query`` and ``ClaudeSDKClient``): :class:`~nodeprov.errors.ConfigError`,
    :class:`~nodeprov.errors.SpawnError` and its subclasses, :class:`AgentOutputError`,
    :class:`AgentExitError`, and :class:`AgentError` for writes to a process that is gone.
    """

    def __init__(
        self,
        spawn: SpawnFn,
        options: ClaudeAgentOptions | None = None,
        *,
        cli_path: str | None = None,
        stop_policy: StopPolicy | None = None,
        exit_timeout: float = 10.0,
        guard: bool = True,
        node: NodeHandle | None = None,
        transcripts: TranscriptSink | None = None,
        keep: KeepOptions | None = None,
    ) -> None:
        if keep is not None and node is None:
            raise ConfigError("a kept agent needs its node (NodeTransport.for_node)")
        self._keep = keep
        self._end_input: EndInput | None = None
        self._reattach: _Reattach | None = None  # a kept CLI to re-attach to, not spawn
        self._spawn = spawn
        self._transcripts = transcripts
        self._node = node
        self._options = options or ClaudeAgentOptions()
        self._option_files = OptionFiles(node, self._options.env.get("CLAUDE_CONFIG_DIR"))
        self.cli_path = cli_path or (str(self._options.cli_path) if self._options.cli_path else "claude")
        self._stop_policy = stop_policy or StopPolicy()
        self._exit_timeout = exit_timeout
        self._guard = guard
        self._input_ended = False
        self._max_line = self._options.max_buffer_size or DEFAULT_MAX_LINE
        self._process: SpawnedProcess | None = None
        self._ready = False
        self._write_lock = anyio.Lock()
        self._stderr_task: TaskHandle | None = None
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._unanswered: dict[str, str] = {}  # an initialize sent to the CLI: id -> subtype
        self._noise: str | None = None  # output that is not the protocol, since the last message
        self._failure: AgentError | None = None

    @classmethod
    def for_node(
        cls, node: NodeHandle, options: ClaudeAgentOptions | None = None, **kwargs: Any
    ) -> NodeTransport:
        """A transport on ``node``; the CLI path defaults to ``node.tool_paths["claude"]``."""
        options = options or ClaudeAgentOptions()
        if "cli_path" not in kwargs and options.cli_path is None:
            kwargs["cli_path"] = node.tool_paths.get("claude", "claude")
        return cls(node.spawn, options, node=node, **kwargs)

    @property
    def process(self) -> SpawnedProcess | None:
        """The CLI process while connected."""
        return self._process

    def command(self) -> list[str]:
        """The CLI's argument vector; with ``guard``, :meth:`connect` runs it inside the guard."""
        return agent_command(self._options, self.cli_path)

    def reattach_to(self, keeper: str) -> None:
        """Make :meth:`connect` re-attach to the kept CLI of ``keeper`` (see
        :func:`~nodeprov.node.keeper.reattach`) instead of starting one, reading its output
        from the start: the SDK's ``initialize`` is then answered with the CLI's answer to
        the first one, and never reaches the CLI."""
        if self._node is None:
            raise ConfigError("re-attaching needs the node (NodeTransport.for_node)")
        self._reattach = _Reattach(keeper)

    async def connect(self) -> None:
        if self._process is not None:
            return
        if self._options.user is not None:
            raise ConfigError("options.user is not supported on a node; the provider sets the user")
        if self._reattach is not None:
            assert self._node is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
            kept = await reattach(self._node, self._reattach.keeper, settings=self._keep)
            kept.stop_policy = self._stop_policy
            self._end_input, self._process = kept.stdin.aclose, kept
            self._stderr_task = spawn_detached(self._drain_stderr(kept))
            self._ready = True
            return
        argv = await self._option_files.written(self.command())
        cwd = str(self._options.cwd) if self._options.cwd else None
        spawn_options = SpawnOptions(argv[0], argv[1:], cwd=cwd, env=agent_environment(self._options))
        self._input_ended = False
        try:
            if self._guard or self._keep is not None:
                process, self._end_input = await start_agent(
                    self._spawn, spawn_options, self._stop_policy, keep_with=self._keep, node=self._node
                )
            else:
                process = await self._spawn(spawn_options)
                self._end_input = process.stdin.aclose
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._option_files.remove()
            raise
        process.stop_policy = self._stop_policy
        self._process = process
        self._stderr_task = spawn_detached(self._drain_stderr(process))
        self._ready = True

    def is_ready(self) -> bool:
        return self._ready

    async def write(self, data: str) -> None:
        async with self._write_lock:
            process = self._process
            if self._failure is not None:
                raise self._failure
            if not self._ready or process is None:
                raise AgentError("the agent process is not connected")
            if self._input_ended and process.returncode is None:
                raise AgentError("cannot write to the agent process: its input was ended (end_input)")
            if '"initialize"' in data:  # the CLI owes an answer: see _check_exit
                if self._reattach is not None:  # answered from the CLI's first answer
                    self._reattach.asked(str(json.loads(data).get("request_id")))
                    return
                self._note_request(data)
            if process.returncode is None:
                try:
                    await process.stdin.send(data.encode())
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
                    self._ready = False
                    # Most often the process died: say how, rather than "broken pipe".
                    with anyio.move_on_after(1):
                        await process.wait()
                    if process.returncode is None:
                        raise AgentError(f"cannot write to the agent process: {error!r}") from error
                else:
                    return
            code = process.returncode
            assert code is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
            raise self._fail(await self._exit_failure(code))  # as the reader would say it

    def _fail(self, error: AgentError) -> AgentError:
        """Remember the first failure, so later calls report the cause, not a symptom."""
        self._ready = False
        if self._failure is None:
            self._failure = error
        return self._failure

    async def end_input(self) -> None:
        """End the CLI's input: EOF on its stdin. Guarded, the channel itself stays open."""
        async with self._write_lock:
            process = self._process
            if process is None or self._input_ended:
                return
            self._input_ended = True
            # Gone already: EOF is moot.
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, NodeprovError):
                if self._end_input is not None:
                    await self._end_input()

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._read_messages()

    async def _read_messages(self) -> AsyncIterator[dict[str, Any]]:
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
                        if self._reattach is not None:
                            await self._reattach.answer(message)
                        self._answered(message)
                    if self._transcripts is not None and await self._mirrored(message):
                        continue
                    yield message
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # close() took the stream away: the run is over
        except AgentOutputError as error:
            raise self._fail(error) from None
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
        """Hand a mirror frame to the sink (True: not for the SDK); flush before a result."""
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
            raise self._fail(
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
        raise self._fail(
            AgentOutputError(
                f"the agent printed what is not its protocol ({self._noise[:200]!r}) and then "
                f"nothing for {NOISE_GRACE:g} s" + _last_words(self.stderr_tail)
            )
        )

    def _note_request(self, data: str) -> None:
        with suppress(ValueError, AttributeError, TypeError):
            for line in data.splitlines():
                sent = json.loads(line) if line.strip() else {}
                # initialize: the SDK waits a minute for its answer; the others end with the turn.
                if (
                    sent.get("type") == "control_request"
                    and (sent.get("request") or {}).get("subtype") == "initialize"
                ):
                    self._unanswered[str(sent.get("request_id"))] = "initialize"

    def _answered(self, message: dict[str, Any]) -> None:
        response = message.get("response")
        if isinstance(response, dict):
            self._unanswered.pop(str(response.get("request_id")), None)

    async def _check_exit(self, process: SpawnedProcess) -> None:
        """After stdout EOF: the process must exit, with status 0, having answered every
        control request sent to it (one that exits first, say before answering
        ``initialize``, fails here, at once, rather than leaving the SDK to wait a minute for
        the answer)."""
        with anyio.move_on_after(self._exit_timeout):
            await process.wait()
        code = process.returncode
        if code is None:
            raise self._fail(
                AgentExitError(
                    f"the agent process closed its output but was still running after {self._exit_timeout}s",
                    exit_code=None,
                    stderr_tail=self.stderr_tail,
                )
            )
        if code != 0 or self._unanswered:
            raise self._fail(await self._exit_failure(code))

    async def _exit_failure(self, code: int) -> AgentExitError:
        """The process exited with ``code``: its status, the control requests it left
        unanswered, and the end of its stderr (read to its end first, briefly). The same
        words whether a write or the reader finds it gone first."""
        if self._stderr_task is not None:
            with anyio.move_on_after(1):
                await self._stderr_task.wait()
        pending = sorted(set(self._unanswered.values()))
        before = f" before answering {', '.join(pending)}" if pending else ""
        said = stopped_by_keeper(self._process) or f"the agent process exited with status {code}"
        return AgentExitError(
            f"{said}{before}" + _last_words(self.stderr_tail),
            exit_code=code,
            stderr_tail=self.stderr_tail,
        )

    @property
    def stderr_tail(self) -> str:
        """The last lines the process wrote to stderr."""
        return "\n".join(self._stderr_tail)

    async def _drain_stderr(self, process: SpawnedProcess) -> None:
        pending = bytearray()

        def emit(raw: bytes) -> None:
            line = raw.decode("utf-8", "replace").rstrip()
            if not line:
                return
            self._stderr_tail.append(line[:2000])
            if self._options.stderr is not None:
                try:
                    self._options.stderr(line)
                except Exception:  # a broken callback must not stop the draining
                    logger.debug("options.stderr callback raised", exc_info=True)

        try:
            async for chunk in process.stderr:
                *lines, tail = chunk.split(b"\n")
                for piece in lines:
                    line = piece
                    if pending:
                        line, pending = bytes(pending + piece), bytearray()
                    emit(line)
                pending += tail
                if len(pending) > self._max_line:
                    emit(bytes(pending))
                    pending = bytearray()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            emit(bytes(pending))

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
            self._ready = False
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
                task, self._stderr_task = self._stderr_task, None
                if task is not None:
                    with anyio.move_on_after(1):
                        await task.wait()
                    task.cancel()
