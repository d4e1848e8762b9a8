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
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions, Transport

from ...errors import AgentError, ConfigError
from ...node import NodeHandle
from ...node.keeper import KeepOptions
from ...spawn import SpawnedProcess, SpawnFn, StopPolicy
from .channel import DEFAULT_MAX_LINE, CliChannel, TranscriptSink
from .command import agent_command, agent_environment

__all__ = ["NodeTransport", "TranscriptSink", "agent_command", "agent_environment"]


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
        self._reattach: _Reattach | None = None  # a kept CLI to re-attach to, not spawn
        self._node = node
        self._options = options or ClaudeAgentOptions()
        self.cli_path = cli_path or (str(self._options.cli_path) if self._options.cli_path else "claude")
        self._channel = CliChannel(
            spawn,
            node=node,
            home=self._options.env.get("CLAUDE_CONFIG_DIR"),
            stop_policy=stop_policy,
            exit_timeout=exit_timeout,
            guard=guard,
            keep=keep,
            transcripts=transcripts,
            max_line=self._options.max_buffer_size or DEFAULT_MAX_LINE,
            stderr=self._options.stderr,
        )
        self._ready = False

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
        return self._channel.process

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
        if self._channel.process is not None:
            return
        if self._options.user is not None:
            raise ConfigError("options.user is not supported on a node; the provider sets the user")
        if self._reattach is not None:
            await self._channel.reattach(self._reattach.keeper)
        else:
            cwd = str(self._options.cwd) if self._options.cwd else None
            await self._channel.start(self.command(), agent_environment(self._options), cwd)
        self._ready = True

    def is_ready(self) -> bool:
        return self._ready and self._channel.connected

    async def write(self, data: str) -> None:
        if '"initialize"' in data:  # the CLI owes an answer: see CliChannel.messages
            request_id = _initialize_request(data)
            if request_id is not None and self._reattach is not None:
                self._reattach.asked(request_id)  # answered from the CLI's first answer
                return
            if request_id is not None:
                self._channel.expect_answer(request_id, "initialize")
        try:
            await self._channel.write(data)
        except AgentError:
            self._ready = False
            raise

    async def end_input(self) -> None:
        """End the CLI's input: EOF on its stdin. Guarded, the channel itself stays open."""
        await self._channel.end_input()

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        answer = self._reattach.answer if self._reattach is not None else None
        return self._channel.messages(on_control_response=answer)

    @property
    def stderr_tail(self) -> str:
        """The last lines the process wrote to stderr."""
        return self._channel.stderr_tail

    async def detach(self) -> None:
        """Leave a kept CLI running: close its channel, not the CLI (see
        :meth:`KeptProcess.detach`); a CLI that is not kept is stopped, as by :meth:`close`."""
        self._ready = False
        await self._channel.detach()

    async def close(self) -> None:
        """Stop the CLI (stdin EOF, then SIGTERM, then SIGKILL) and release everything.

        Idempotent, shielded, and bounded by the stop policy's total plus a few seconds,
        whatever the process or its node does. Never raises (see :meth:`CliChannel.close`).
        """
        self._ready = False
        await self._channel.close()


def _initialize_request(data: str) -> str | None:
    """The id of the ``initialize`` control request among the lines of ``data``, if any
    (the SDK waits a minute for its answer; the others end with the turn)."""
    with suppress(ValueError, AttributeError, TypeError):
        for line in data.splitlines():
            sent = json.loads(line) if line.strip() else {}
            request = sent.get("request") or {}
            if sent.get("type") == "control_request" and request.get("subtype") == "initialize":
                return str(sent.get("request_id"))
    return None
