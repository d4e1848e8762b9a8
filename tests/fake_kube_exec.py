"""A FAKE of the Kubernetes API server's pod exec, for the protocol paths no cluster here
speaks: ``v5.channel.k8s.io`` (Kubernetes 1.30+; the test cluster is 1.20, v4 only).

It serves ``GET /api/v1/namespaces/NS/pods/NAME/exec`` as the API server does: a websocket
upgrade offering ``v5.channel.k8s.io`` and ``v4.channel.k8s.io`` (or only the latter), the
command from repeated ``command`` query parameters, binary messages with a channel byte (0
stdin, 1 stdout, 2 stderr, 3 a JSON ``Status`` when the process has exited; v5's 255 with a
stream number ends that stream, only stdin here). The command runs on this machine, a
session leader as runc makes it, and a process killed by signal N reports 128 + N, as the
container runtime does. ``GET /api/v1/namespaces/NS/pods/NAME`` answers a running pod.
Every exec's command is kept in :attr:`FakeExecServer.commands`.
"""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
POD_UID = "fake-uid"


class FakeExecServer:
    def __init__(self, *, protocols: tuple[str, ...] = (V5, V4), env: dict[str, str] | None = None) -> None:
        self.protocols = protocols
        self.env = env or {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOSTNAME": "fake-pod"}
        self.commands: list[list[str]] = []
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}/exec", self._exec)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}", self._pod)
        return app

    async def _pod(self, request: web.Request) -> web.Response:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": request.match_info["name"], "uid": POD_UID},
            "status": {"phase": "Running"},
        }
        return web.json_response(pod)

    async def _exec(self, request: web.Request) -> web.WebSocketResponse:
        command = request.query.getall("command")
        self.commands.append(command)
        ws = web.WebSocketResponse(protocols=self.protocols)
        await ws.prepare(request)
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        stdin = process.stdin

        async def pump(stream: asyncio.StreamReader, channel: int) -> None:
            while data := await stream.read(65536):
                with suppress(ConnectionError, RuntimeError):
                    await ws.send_bytes(bytes([channel]) + data)

        async def feed() -> None:
            async for message in ws:
                if message.type is not aiohttp.WSMsgType.BINARY or not message.data:
                    continue
                channel, payload = message.data[0], message.data[1:]
                if channel == 0 and not stdin.is_closing():
                    stdin.write(payload)
                    with suppress(ConnectionError):
                        await stdin.drain()
                elif channel == 255 and ws.ws_protocol == V5 and payload[:1] == b"\x00":
                    stdin.close()
            stdin.close()  # the connection closed: stdin ends, as with the API server

        feeding = asyncio.ensure_future(feed())
        await asyncio.gather(pump(process.stdout, 1), pump(process.stderr, 2))
        code = await process.wait()
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        if code != 0:
            exit_code = 128 - code if code < 0 else code
            status = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: exit code {exit_code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
            }
        with suppress(ConnectionError, RuntimeError):
            await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        feeding.cancel()
        with suppress(asyncio.CancelledError):
            await feeding
        return ws

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "fake-kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path


async def start(server: FakeExecServer) -> web.AppRunner:
    """Serve ``server`` on a free port of 127.0.0.1 (its :attr:`port`); clean up the runner."""
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = runner.addresses[0][1]
    return runner
