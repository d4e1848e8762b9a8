"""The node commands on the SSH provider against a real sshd, settings from the environment
(NODEPROV_SSH_*) and flags, as a script would call them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from nodeprov import LABEL_OWNER

from .agents import require_claude_cli
from .cli import PROVIDERS
from .sshd import UNPRIVILEGED, Sshd
from .test_ssh import node_directory

ROOT = ".nodeprov/cli-tests"


def nodeprov(sshd: Sshd, *args: str, stdin: str = "", **more: object) -> subprocess.CompletedProcess[str]:
    """The CLI with the server's settings in NODEPROV_SSH_* variables (``more`` overrides)."""
    settings = {**sshd.settings(UNPRIVILEGED, root=ROOT), **more}
    env = {
        f"NODEPROV_SSH_{k.upper()}": v if isinstance(v, str) else json.dumps(v) for k, v in settings.items()
    }
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **env},
    )


def test_provision_list_exec_destroy_gc(sshd: Sshd) -> None:
    made = nodeprov(sshd, "provision", "-p", "ssh", "--label", "team=qa", "--ttl", "1", "--json")
    assert made.returncode == 0, made.stderr
    assert made.stderr == ""  # nothing left open to complain about at exit
    node = json.loads(made.stdout)
    node_id = node["node_id"]
    try:
        assert node["labels"]["team"] == "qa"
        assert node["labels"][LABEL_OWNER].startswith("cli:")
        listed = nodeprov(sshd, "list", "--json")  # every configured provider, ssh among them
        assert listed.returncode == 0, listed.stderr
        assert node_id in [json.loads(line)["node_id"] for line in listed.stdout.splitlines()]
        done = nodeprov(
            sshd, "exec", node_id, "--", "sh", "-c", "tr a-z A-Z; echo oops >&2; exit 3", stdin="hello\n"
        )
        assert (done.returncode, done.stdout, done.stderr) == (3, "HELLO\n", "oops\n")
        hostile = ["a;b", "$(id)", "-n", "two words", "line\nbreak", "'quoted'"]
        done = nodeprov(sshd, "exec", node_id, "-p", "ssh", "--", "printf", "%s\\0", *hostile)
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout.split("\0")[:-1] == hostile
    finally:
        gone = nodeprov(sshd, "destroy", node_id, "--json")
    assert gone.returncode == 0, gone.stderr
    assert json.loads(gone.stdout) == {"node_id": node_id, "provider": "ssh", "destroyed": True}
    assert not node_directory(UNPRIVILEGED, node_id, ROOT).exists()

    # gc: a node whose owner is gone is reaped; flags override the environment.
    orphan = nodeprov(
        sshd, "provision", "-p", "ssh", "--owner", f"{socket.gethostname()}:999999999:1", "--json"
    )
    orphan_id = json.loads(orphan.stdout)["node_id"]
    reaped = nodeprov(sshd, "gc", "-p", "ssh", "-s", f"root={ROOT}", "--json")
    assert reaped.returncode == 0, reaped.stderr
    assert orphan_id in reaped.stdout
    assert not node_directory(UNPRIVILEGED, orphan_id, ROOT).exists()


def test_providers_says_what_is_missing(sshd: Sshd, tmp_path: Path) -> None:
    ready = nodeprov(sshd, *PROVIDERS, "-p", "ssh", "--json")
    assert ready.returncode == 0, ready.stderr
    assert json.loads(ready.stdout)["ready"] is True
    (tmp_path / "known_hosts").write_text("")
    for more, says in (
        ({"known_hosts": str(tmp_path / "known_hosts")}, "no known_hosts entry"),
        ({"known_hosts": str(tmp_path / "none")}, "no known_hosts file"),
        ({"key_files": [str(tmp_path / "no-key")]}, "key files not found"),
    ):
        row = json.loads(nodeprov(sshd, *PROVIDERS, "-p", "ssh", "--json", **more).stdout)
        assert row["ready"] is False
        assert says in row["error"], row
    unset = subprocess.run(
        [sys.executable, "-m", "nodeprov", *PROVIDERS, "-p", "ssh", "--json"],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("NODEPROV_SSH_")},
    )
    assert "not configured" in json.loads(unset.stdout)["error"]


def test_run_on_an_ssh_node(sshd: Sshd, tmp_path: Path) -> None:
    require_claude_cli()
    store = f"sqlite:///{tmp_path}/store.db"
    done = nodeprov(sshd, "run", "-p", "ssh", "--ship-cli", "--json", "--store", store, "list the files")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1]["type"] == "run.finished"
    assert events[-1]["outcome"] == "ok"
    assert not node_directory(UNPRIVILEGED, events[1]["node_id"], ROOT).exists()
