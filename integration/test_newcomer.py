"""A newcomer's path, with the commands as the docs give them, timed (issue 46): a fresh
clone, the demo's run, the docs' first run on Docker, then a run over HTTP (``nodeprov
serve``, ``curl`` to start a run and follow its events to its end).

What the test puts in: the clone's commands run with this machine's installed nodeprov (a
fresh ``make demo`` would install from PyPI, which no test may reach: tests talk to
127.0.0.1 alone), the test base image for the docs' IMAGE, and a free port for the docs'
8700. Each command is taken from its page, so a page that changes them changes the test."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_TIMEOUT = 300


def docs_command(page: str, starts: str) -> str:
    """The first ``$`` command of docs/``page`` that starts with ``starts``."""
    for line in (REPO / "docs" / page).read_text().splitlines():
        if line.startswith(f"$ {starts}"):
            return line[2:]
    raise AssertionError(f"docs/{page} gives no command starting {starts!r}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_newcomer_gets_from_a_fresh_clone_to_a_run_over_http(tmp_path: Path, base_image: str) -> None:
    clone = tmp_path / "nodeprov"
    environ = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "NODEPROV_STORE": f"sqlite:///{tmp_path}/store.db",
        "XDG_RUNTIME_DIR": str(tmp_path),
        "NO_COLOR": "1",
    }
    took: dict[str, float] = {}

    def step(name: str, command: str) -> str:
        began = time.monotonic()
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=clone if clone.exists() else tmp_path,
            env=environ,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            check=False,
        )
        took[name] = round(time.monotonic() - began, 2)
        assert done.returncode == 0, f"{name}: {command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    step("clone", f"git clone --quiet {REPO} {clone}")
    step("demo", docs_command("getting-started/install.md", 'nodeprov run "Say hello'))
    docker = docs_command(
        "getting-started/docker.md", "nodeprov run -p docker -s image=IMAGE -s network_mode=host --ship-cli"
    )
    step("first run on Docker", docker.replace("IMAGE", base_image))

    port = _free_port()
    serve = docs_command("getting-started/http.md", "nodeprov serve")
    service = subprocess.Popen(
        ["bash", "-c", f"exec {serve} --port {port}"],
        cwd=clone,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        here = f"127.0.0.1:{port}"
        step(
            "service up",
            f"for _ in $(seq 600); do curl -sf {here}/healthz >/dev/null && exit 0; sleep 0.1; done; exit 1",
        )
        start = docs_command("getting-started/http.md", "curl -s --json").replace("localhost:8700", here)
        run_id = json.loads(step("a run over HTTP", start))["id"]
        follow = docs_command("getting-started/http.md", "curl -sN").replace("localhost:8700", here)
        follow = re.sub(r"run-[0-9a-f]{16}", run_id, follow)
        said = step("its events to its end", follow)
        # An event stream's lines end at LF alone: str.splitlines would also cut a line at a
        # U+2028 or U+0085 inside an event's JSON (a tool's binary output carried one, once).
        kinds = [json.loads(line[5:])["type"] for line in said.split("\n") if line.startswith("data:")]
        assert (kinds[0], kinds[-1]) == ("run.started", "run.finished"), kinds
        assert '"outcome": "ok"' in said or '"outcome":"ok"' in said, said[-2000:]
    finally:
        service.terminate()
        service.wait(timeout=60)
    print(f"a newcomer's path, seconds per step: {took} (total {sum(took.values()):.1f})")
