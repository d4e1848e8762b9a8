"""A request on a kept-alive connection: ``nodeprov serve`` against uvicorn alone serving the
same small JSON answer (the raw tool), both real processes on 127.0.0.1, one client
connection each, in one sitting. Each of ``--sittings`` times ``--requests`` ``GET /healthz``
on each, alternating; the medians, the p99s and the ratio of the medians per sitting with
its spread.

Goal (issue 47): at most 2 ms a request (it was 44 ms: a socket without TCP_NODELAY, the
answer's second write waiting for the client's delayed ACK).

Run it with ``.venv/bin/python -m bench.keepalive [--help]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

_RAW_APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b'{"status":"ok"}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


def _timed(client: httpx.Client, requests: int) -> list[float]:
    client.get("/healthz")  # the connection made
    took = []
    for _ in range(requests):
        began = time.perf_counter()
        client.get("/healthz")
        took.append((time.perf_counter() - began) * 1000)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--sittings", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodeprov-keepalive-") as tmp:
        (Path(tmp) / "raw_app.py").write_text(_RAW_APP)
        ports = _free_port(), _free_port()
        env = {**os.environ, "PYTHONPATH": f"{tmp}:{os.environ.get('PYTHONPATH', '')}"}
        serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nodeprov",
                "serve",
                "--port",
                str(ports[0]),
                "--store",
                f"sqlite:///{tmp}/s.db",
            ],
            stdout=subprocess.DEVNULL,
            env=env,
        )
        raw = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "raw_app:app",
                "--port",
                str(ports[1]),
                "--log-level",
                "warning",
            ],
            env=env,
            cwd=tmp,
        )
        try:
            urls = [f"http://127.0.0.1:{port}" for port in ports]
            for url in urls:
                _ready(url)
            ratios = []
            with httpx.Client(base_url=urls[0]) as ours, httpx.Client(base_url=urls[1]) as theirs:
                for sitting in range(1, args.sittings + 1):
                    mine, base = _timed(ours, args.requests), _timed(theirs, args.requests)
                    ratio = statistics.median(mine) / statistics.median(base)
                    ratios.append(ratio)
                    print(
                        f"sitting {sitting}: nodeprov serve p50 {statistics.median(mine):.2f} ms "
                        f"p99 {statistics.quantiles(mine, n=100)[98]:.2f} ms | uvicorn alone p50 "
                        f"{statistics.median(base):.2f} ms p99 {statistics.quantiles(base, n=100)[98]:.2f} ms"
                        f" | ratio {ratio:.2f}x"
                    )
            print(f"ratio of medians {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
        finally:
            for process in (serve, raw):
                process.terminate()
                process.wait(timeout=60)


if __name__ == "__main__":
    main()
