"""``nodeprov serve`` as a real process on 127.0.0.1 (uvicorn, a port of its own), for the
service's tests: :func:`serving` starts one, waits until it is ready, and stops it."""

from __future__ import annotations

import json
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from anyio.abc import Process

from nodeprov.testing import fake_agent_command

_START_TIMEOUT = 60.0

TEST_CONFIG: dict[str, Any] = {"allow_options": ["claude.cli_path", "codex.cli_path", "opencode.cli_path"]}
"""What the tests' services allow beyond a caller's own: the test agents' executables."""


@dataclass
class Served:
    """A running service: its base ``url``, ``process``, store URL and stderr log; ``verify``:
    what its clients trust (HTTPS)."""

    url: str
    process: Process
    store: str
    log: Path
    verify: ssl.SSLContext | bool = True

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, verify=self.verify, **kwargs)


@asynccontextmanager
async def serving(
    tmp_path: Path,
    *args: str,
    store: str | None = None,
    config: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    name: str = "serve",
    verbose: int = 1,
    verify: ssl.SSLContext | bool = True,
) -> AsyncIterator[Served]:
    """Start ``nodeprov -v serve --port 0`` (``-vv`` with ``verbose=2``; a SQLite store in
    ``tmp_path`` unless ``store``), with ``config`` as NODEPROV_SERVE_CONFIG and local nodes
    under ``tmp_path/nodes``; stop it with SIGTERM on the way out (SIGKILL if it does not stop
    in time). ``verify``: what to trust when it serves HTTPS."""
    store = store or f"sqlite:///{tmp_path}/service.db"
    (tmp_path / "nodes").mkdir(exist_ok=True)
    log = tmp_path / f"{name}.log"
    environ = {
        **os.environ,
        "NODEPROV_SERVE_CONFIG": json.dumps(TEST_CONFIG | (config or {})),
        "NODEPROV_LOCAL_ROOT": str(tmp_path / "nodes"),
        **(env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "nodeprov",
        "-" + "v" * verbose,
        "serve",
        "--port",
        "0",
        "--store",
        store,
        *args,
    ]
    with log.open("ab") as stderr:
        process = await anyio.open_process(command, env=environ, stderr=stderr)
    try:
        assert process.stdout is not None
        said = b""
        with anyio.fail_after(_START_TIMEOUT):
            while b"\n" not in said:
                try:
                    said += await process.stdout.receive()
                except anyio.EndOfStream:
                    raise AssertionError(f"nodeprov serve did not start: {log.read_text()[-2000:]}") from None
            url = said.decode().split("listening on ", 1)[1].split()[0]
            async with httpx.AsyncClient(base_url=url, verify=verify) as probe:
                while True:
                    with suppress(httpx.TransportError):
                        if (await probe.get("/readyz")).status_code == 200:
                            break
                    await anyio.sleep(0.05)
        yield Served(url, process, store, log, verify)
    finally:
        with anyio.CancelScope(shield=True):
            await stop(process)


async def stop(process: Process, grace: float = 60.0) -> int:
    """SIGTERM, then SIGKILL after ``grace`` seconds; its exit status."""
    if process.returncode is None:
        with suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(grace):
            return await process.wait()
        with suppress(ProcessLookupError):
            process.kill()
    return await process.wait()


def fake_run(tmp_path: Path, steps: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A ``POST /v1/runs`` body: the fake Claude Code CLI on a local node, running ``steps``."""
    return {
        "prompt": "do the task",
        "provider": "local",
        "agent": "claude",
        "options": {"cli_path": fake_agent_command(tmp_path), "ship_cli": False},
        "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)},
        **fields,
    }


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, str, dict[str, Any]]]:
    """``(event name, id, data)`` of each server-sent event of ``response``."""
    data: list[str] = []
    name, event_id = "", ""
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield name, event_id, json.loads("\n".join(data))
            data, name, event_id = [], "", ""
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("id:"):
            event_id = line[3:].strip()
