"""ACP's ``terminal/*`` requests on a node: a command the agent asks its client to run (``create``),
whose output it reads (``output``), waits for (``wait_for_exit``), stops (``kill``) and lets go
(``release``). Each runs through the node's spawn function, stdout and stderr in one buffer
that keeps the last ``outputByteLimit`` bytes; a terminal that is released, or left when the
session closes, is killed."""

from __future__ import annotations

import secrets
import signal
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import anyio

from ...errors import NodeprovError
from ...node import NodeHandle
from ...spawn import SpawnedProcess, SpawnOptions
from .._detached import Detached
from .rpc import RpcError

__all__ = ["Terminals"]

_INVALID_PARAMS = -32602
_DEFAULT_LIMIT = 1024 * 1024  # bytes of output kept when the agent names no limit


class _Terminal:
    """One command's process and what it wrote, the last ``limit`` bytes of it."""

    def __init__(self, process: SpawnedProcess, limit: int) -> None:
        self.process, self.limit = process, limit
        self.output = bytearray()
        self.truncated = False
        self.readers = [Detached(self._read(process.stdout)), Detached(self._read(process.stderr))]

    async def _read(self, stream: Any) -> None:
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, NodeprovError):
            async for chunk in stream:
                self.output += chunk
                if len(self.output) > self.limit:
                    del self.output[: len(self.output) - self.limit]
                    self.truncated = True

    def text(self) -> str:
        # Cut at a character's start: a truncated buffer may begin inside one.
        start = next((i for i, byte in enumerate(self.output[:4]) if byte & 0xC0 != 0x80), 0)
        return self.output[start:].decode("utf-8", "replace")

    async def exited(self) -> dict[str, Any]:
        code = await self.process.wait()
        for reader in self.readers:
            await reader.wait()
        return _status(code)


def _status(code: int) -> dict[str, Any]:
    if code < 0:
        with suppress(ValueError):
            return {"exitCode": None, "signal": signal.Signals(-code).name}
    return {"exitCode": code, "signal": None}


class Terminals:
    """The terminals of one session on ``node``."""

    def __init__(self, node: NodeHandle) -> None:
        self._node = node
        self._terminals: dict[str, _Terminal] = {}

    async def serve(self, method: str, params: Mapping[str, Any]) -> Any:
        """The answer to ``terminal/<method>``.

        Raises:
            RpcError: the parameters are wrong, or name no terminal of this session's.
            NodeprovError: the command could not be started on the node.
        """
        if method == "create":
            return {"terminalId": await self._create(params)}
        terminal = self._terminals.get(str(params.get("terminalId")))
        if terminal is None:
            raise RpcError(_INVALID_PARAMS, f"no terminal {params.get('terminalId')!r}")
        if method == "output":
            code = terminal.process.returncode
            answer: dict[str, Any] = {"output": terminal.text(), "truncated": terminal.truncated}
            if code is not None:
                answer["exitStatus"] = _status(code)
            return answer
        if method == "wait_for_exit":
            return await terminal.exited()
        if method == "kill":
            await terminal.process.kill()
            return None
        if method == "release":
            del self._terminals[str(params["terminalId"])]
            await _closed(terminal)
            return None
        raise RpcError(-32601, f"terminal/{method} is not a method of ACP's")

    async def _create(self, params: Mapping[str, Any]) -> str:
        command, args, env = params.get("command"), params.get("args") or [], params.get("env") or []
        limit = params.get("outputByteLimit")
        if not isinstance(command, str) or not isinstance(args, list) or not isinstance(env, list):
            raise RpcError(_INVALID_PARAMS, "terminal/create takes a command, args and env")
        try:
            variables = {str(each["name"]): str(each["value"]) for each in env}
            options = SpawnOptions(command, [str(arg) for arg in args], cwd=params.get("cwd"), env=variables)
        except (KeyError, TypeError, ValueError) as error:
            raise RpcError(_INVALID_PARAMS, f"terminal/create: {error}") from None
        process = await self._node.spawn(options)
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, NodeprovError):
            await process.stdin.aclose()  # a terminal takes no input
        number = f"term_{secrets.token_hex(8)}"
        self._terminals[number] = _Terminal(
            process, limit if isinstance(limit, int) and limit > 0 else _DEFAULT_LIMIT
        )
        return number

    async def aclose(self) -> None:
        """Kill every terminal left (never raises)."""
        terminals, self._terminals = list(self._terminals.values()), {}
        for terminal in terminals:
            await _closed(terminal)


async def _closed(terminal: _Terminal) -> None:
    with suppress(NodeprovError):
        await terminal.process.aclose()
    for reader in terminal.readers:
        reader.cancel()
