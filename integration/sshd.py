"""A real OpenSSH ``sshd`` (Debian's openssh-server) for tests: its own configuration, host
key and client key in a directory of the test's, listening on 127.0.0.1 on a free port,
started in the foreground and stopped at the end. Logins by key only, as root and as an
unprivileged user."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from nodeprov.testing.pytest_plugin import require_engine

SSHD = "/usr/sbin/sshd"
UNPRIVILEGED = "nodeprov-test"
_START_TIMEOUT = 20.0


@dataclass
class Sshd:
    """A running sshd: where it listens, the client key that logs in, the known_hosts file
    that pins its host key, and the host key itself (``public_host_key``)."""

    port: int
    directory: Path
    client_key: Path
    known_hosts: Path
    public_host_key: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def settings(self, user: str = "root", **more: object) -> dict[str, object]:
        """SSH provider settings that log in to this server as ``user``."""
        return {
            "host": self.host,
            "port": self.port,
            "user": user,
            "key_files": [str(self.client_key)],
            "known_hosts": str(self.known_hosts),
            "use_agent": False,
            "config_files": [],
            **more,
        }

    def client(self, user: str = "root") -> list[str]:
        """OpenSSH's own client logging in to this server as ``user``: add the command."""
        return [
            "ssh",
            "-p",
            str(self.port),
            "-i",
            str(self.client_key),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "BatchMode=yes",
            "-F",
            "/dev/null",
            f"{user}@{self.host}",
        ]

    def daemons(self) -> list[int]:
        """The listener and every sshd process below it (one or two per connection; each
        leads a session of its own). The commands of sessions are not among them."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with suppress(OSError, IndexError, ValueError):
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if (entry / "comm").read_text().strip().startswith("sshd"):
                        children.setdefault(int(fields[1]), []).append(int(entry.name))
        if self.process is None:
            return []
        found, queue = [], [self.process.pid]
        while queue:
            pid = queue.pop()
            found.append(pid)
            queue.extend(children.get(pid, []))
        return found

    def kill(self) -> None:
        """SIGKILL the listener and every sshd process of its connections, as a crash of the
        server would: connections drop; what their sessions started lives on, its pipes
        closed."""
        for pid in self.daemons():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=10)

    def freeze(self, frozen: bool = True) -> None:
        """SIGSTOP (or, with ``frozen=False``, SIGCONT) the server and its connections: a host
        that stops answering while its TCP connections stay open."""
        for pid in self.daemons():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def start(self) -> None:
        """Start the server (again, after :meth:`kill`) on the same port, with the same keys."""
        log = (self.directory / "sshd.log").open("ab")
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.directory / "sshd_config")],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            assert self.process.poll() is None, (self.directory / "sshd.log").read_text()
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert time.monotonic() < deadline, "sshd did not listen"
            time.sleep(0.05)


def require_sshd() -> None:
    require_engine("OpenSSH's sshd", os.access(SSHD, os.X_OK), "scripts/engines.sh installs openssh-server")
    require_engine("root, to run sshd", os.geteuid() == 0)


def ensure_unprivileged_user() -> str:
    """A local user without privileges to log in as (created once)."""
    try:
        pwd.getpwnam(UNPRIVILEGED)
    except KeyError:
        # "*": no password, yet not locked ("!"), which sshd would refuse even for a key
        subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/sh", "-p", "*", UNPRIVILEGED], check=True
        )
    return UNPRIVILEGED


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().strip()


@contextmanager
def running_sshd(
    *,
    extra_config: str = "",
    port: int | None = None,
    host_key_pem: str | None = None,
    client_key: Path | None = None,
    sftp: bool = True,
    sftp_denied: str = "",
) -> Iterator[Sshd]:
    """Start an sshd whose every file is in a directory of its own, stopped (its whole
    process group) and removed on exit. The directory is readable by everyone: sshd reads
    the authorized keys as the user logging in. ``port``, the host key (``host_key_pem``, an
    OpenSSH private key, as cloud-init installs one) and the client key that logs in are
    made unless given; ``sftp=False`` offers no SFTP subsystem, ``sftp_denied`` names SFTP
    requests the server refuses (``sftp-server -Q requests`` lists them)."""
    require_sshd()
    directory = Path(tempfile.mkdtemp(prefix="nodeprov-sshd-"))
    directory.chmod(0o755)
    host_key = directory / "host_key"
    if host_key_pem is None:
        public_host_key = _keygen(host_key)
    else:
        host_key.write_text(host_key_pem)
        host_key.chmod(0o600)
        public_host_key = subprocess.run(
            ["ssh-keygen", "-y", "-f", str(host_key)], capture_output=True, text=True, check=True
        ).stdout.strip()
    if client_key is None:
        client_key = directory / "client_key"
        public_client_key = _keygen(client_key)
    else:
        public_client_key = Path(f"{client_key}.pub").read_text().strip()
    authorized = directory / "authorized_keys"
    authorized.write_text(public_client_key + "\n")
    authorized.chmod(0o644)
    user = ensure_unprivileged_user()
    port = port or free_port()
    denied = f" -P {sftp_denied}" if sftp_denied else ""
    subsystem = f"Subsystem sftp internal-sftp{denied}" if sftp else ""
    config = directory / "sshd_config"
    config.write_text(
        f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {directory}/sshd.pid
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowUsers root {user}
{subsystem}
LogLevel VERBOSE
{extra_config}
"""
    )
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {public_host_key}\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    server = Sshd(port, directory, client_key, known_hosts, public_host_key)
    try:
        server.start()
        yield server
    finally:
        server.freeze(False)
        server.kill()
        shutil.rmtree(directory, ignore_errors=True)
