"""``nodeprov exec`` and ``cp`` on local-provider nodes, as a script calls them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

NODEPROV = [sys.executable, "-m", "nodeprov"]


def nodeprov(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*NODEPROV, *args], input=stdin, capture_output=True, timeout=60, check=False, env=environment()
    )


def environment() -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[list[str]]:
    """A local node; yields its id and the options that find it."""
    where = ["-p", "local", "-s", f"root={tmp_path / 'nodes'}"]
    made = nodeprov("provision", *where, "--json")
    assert made.returncode == 0, made.stderr
    node_id = json.loads(made.stdout)["node_id"]
    yield [node_id, *where]
    nodeprov("destroy", node_id, *where)


def test_exec_returns_when_the_process_exits_though_stdin_stays_open(node: list[str]) -> None:
    read_end, write_end = os.pipe()  # this process keeps the write end: stdin never ends
    try:
        process = subprocess.Popen(
            [*NODEPROV, "exec", *node, "--", "echo", "hi"],
            stdin=read_end,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment(),
        )
        stdout, stderr = process.communicate(timeout=30)  # the old CLI waited for stdin's EOF
        assert (process.returncode, stdout) == (0, b"hi\n"), stderr
        assert os.get_blocking(read_end)  # the shared stdin is left as it was
    finally:
        os.close(read_end)
        os.close(write_end)


def test_exec_streams_stdin(node: list[str]) -> None:
    done = nodeprov("exec", *node, "--", "tr", "a-z", "A-Z", stdin=b"hello\n")
    assert (done.returncode, done.stdout) == (0, b"HELLO\n"), done.stderr


def test_cp_round_trips_a_binary_file(node: list[str], tmp_path: Path) -> None:
    node_id, *where = node
    data = bytes(range(256)) * 4096 + b"\x00\r\n"  # 1 MiB and a bit: several chunks
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    source.chmod(0o750)

    up = nodeprov("cp", str(source), f"{node_id}:dir/copy.bin", *where)
    assert up.returncode == 0, up.stderr
    mode = nodeprov("exec", *node, "--", "stat", "-c", "%a", "dir/copy.bin")
    assert mode.stdout == b"750\n"
    down = nodeprov("cp", f"{node_id}:dir/copy.bin", str(tmp_path / "back.bin"), *where)
    assert down.returncode == 0, down.stderr
    assert (tmp_path / "back.bin").read_bytes() == data
    into_dir = nodeprov("cp", f"{node_id}:dir/copy.bin", str(tmp_path), *where)
    assert into_dir.returncode == 0, into_dir.stderr
    assert (tmp_path / "copy.bin").read_bytes() == data

    piped = nodeprov("cp", "-", f"{node_id}:piped.bin", *where, stdin=data)
    assert piped.returncode == 0, piped.stderr
    assert nodeprov("exec", *node, "--", "stat", "-c", "%a", "piped.bin").stdout == b"600\n"
    out = nodeprov("cp", f"{node_id}:piped.bin", "-", *where)
    assert (out.returncode, out.stdout) == (0, data)


def test_cp_errors_are_one_line(node: list[str], tmp_path: Path) -> None:
    node_id, *where = node
    missing = nodeprov("cp", f"{node_id}:nope.bin", str(tmp_path / "x"), *where)
    assert missing.returncode == 1
    assert len(missing.stderr.splitlines()) == 1
    assert missing.stderr.startswith(b"error: ")
    assert b"nope.bin" in missing.stderr
    assert not (tmp_path / "x").exists()

    outside = nodeprov("cp", "-", f"{node_id}:/etc/passwd", *where)
    assert outside.returncode == 2
    assert len(outside.stderr.splitlines()) == 1
    assert outside.stderr.startswith(f"error: '/etc/passwd' is outside node {node_id} (".encode())

    no_source = nodeprov("cp", str(tmp_path / "absent"), f"{node_id}:a", *where)
    assert no_source.returncode == 1
    absent = f"error: {tmp_path / 'absent'}: No such file or directory"
    assert no_source.stderr.splitlines() == [absent.encode()]

    both_local = nodeprov("cp", "a", "b")
    assert both_local.returncode == 2
    assert both_local.stderr.splitlines() == [b"error: cp: exactly one of SRC and DST must be NODE:PATH"]


def test_exec_reports_a_signal_and_a_reader_that_left_as_a_shell_does(node: list[str]) -> None:
    killed = nodeprov("exec", *node, "--", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 128 + 9, killed.stderr
    writer = subprocess.Popen(
        [*NODEPROV, "exec", *node, "--", "yes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment(),
    )
    assert writer.stdout is not None
    assert writer.stdout.read(2) == b"y\n"
    writer.stdout.close()  # the reader leaves, as `| head -1` does
    _, stderr = writer.communicate(timeout=60)
    assert writer.returncode == 128 + 13, stderr  # SIGPIPE's status
    assert b"Traceback" not in stderr
