"""The node commands on the Codespaces provider (the real gh against the FAKE GitHub API,
every codespace at the test sshd), settings from NODEPROV_CODESPACES_* variables, as a
script would call them; and what `nodeprov providers` says is missing."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli import PROVIDERS, nodeprov_with
from .codespaces import Codespaces, node_of, running_codespaces
from .github import Failure
from .sshd import Sshd


@pytest.fixture
def codespaces(sshd: Sshd, tmp_path: Path) -> Iterator[Codespaces]:
    with running_codespaces(sshd, tmp_path) as made:
        yield made


@pytest.fixture(params=[True, False], ids=["--stdio", "a gh without --stdio"])
def either(sshd: Sshd, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Codespaces]:
    """With a current gh, and with one from before ``codespace ssh --stdio``."""
    with running_codespaces(sshd, tmp_path, stdio=request.param) as made:
        yield made


def nodeprov(codespaces: Codespaces, *args: str, **more: object) -> subprocess.CompletedProcess[str]:
    return nodeprov_with("codespaces", codespaces.settings(**more), *args)


def test_providers_provision_exec_destroy(either: Codespaces) -> None:
    checked = nodeprov(either, *PROVIDERS, "-p", "codespaces", "--json")
    ready = json.loads(checked.stdout)
    assert (ready["ready"], ready["error"]) == (True, "")
    stdio = ["--stdio"] in [c[-1:] for c in either.gh.commands() if c[:2] == ["codespace", "ssh"]]
    assert stdio
    assert ("lacks `codespace ssh --stdio`" in checked.stderr) is (either.gh.stdio is False)

    made = nodeprov(either, "provision", "-p", "codespaces", "--ttl", "1", "--json")
    assert made.returncode == 0, made.stderr
    node_id = json.loads(made.stdout)["node_id"]
    try:
        assert [node_of(c.display_name) for c in either.github.live()] == [node_id]
        listed = nodeprov(either, "list", "-p", "codespaces", "--json")
        assert node_id in [json.loads(line)["node_id"] for line in listed.stdout.splitlines()]
        done = nodeprov(either, "exec", node_id, "-p", "codespaces", "--", "printf", "%s\\0", "a;b", "$(id)")
        assert (done.returncode, done.stdout.split("\0")[:-1]) == (0, ["a;b", "$(id)"]), done.stderr
    finally:
        gone = nodeprov(either, "destroy", node_id, "-p", "codespaces", "--json")
    assert gone.returncode == 0, gone.stderr
    assert either.github.live() == []


@pytest.mark.parametrize(
    ("more", "says"),
    [
        ({"gh": "/nonexistent/gh"}, "gh not found"),
        ({"token": "not-the-token"}, "HTTP 401"),
    ],
)
def test_providers_says_what_is_missing(codespaces: Codespaces, more: dict[str, object], says: str) -> None:
    missing = json.loads(nodeprov(codespaces, *PROVIDERS, "-p", "codespaces", "--json", **more).stdout)
    assert missing["ready"] is False
    assert says in missing["error"]


def test_providers_says_when_the_token_lacks_the_codespace_scope(codespaces: Codespaces) -> None:
    codespaces.github.failures.append(
        Failure("GET", "/user/codespaces", 403, "Must have the codespace scope")
    )
    missing = json.loads(nodeprov(codespaces, *PROVIDERS, "-p", "codespaces", "--json").stdout)
    assert "gh auth refresh -s codespace" in missing["error"]


def test_providers_says_when_gh_is_too_old(codespaces: Codespaces, tmp_path: Path) -> None:
    old = tmp_path / "old-gh"
    old.write_text("#!/bin/sh\necho 'gh version 2.4.0 (2022-01-01)'\n")
    old.chmod(0o755)
    missing = json.loads(nodeprov(codespaces, *PROVIDERS, "-p", "codespaces", "--json", gh=str(old)).stdout)
    assert "gh 2.4.0 is too old" in missing["error"]


def test_providers_says_when_gh_is_not_logged_in(codespaces: Codespaces, tmp_path: Path) -> None:
    """No token anywhere: gh refuses before asking GitHub (its exit status 4)."""
    settings = {k: v for k, v in codespaces.settings().items() if k != "token"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GH_", "GITHUB_"))}
    env = {**clean, "GH_CONFIG_DIR": str(tmp_path / "gh-config")}
    result = nodeprov_with("codespaces", settings, *PROVIDERS, "-p", "codespaces", "--json", env=env)
    assert "gh is not logged in" in json.loads(result.stdout)["error"]
