"""`nodeprov exec` stopped by a signal (SIGTERM from `timeout` or systemd, SIGHUP from a
closed terminal, Ctrl-C) stops its process on the node before it exits: shared by the
tests of each provider."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

from nodeprov.testing.conformance import host_processes_matching, unique_marker

from .cli import settings_environment


def exec_then_signal(
    provider: str, settings: Mapping[str, object], node_id: str, signum: signal.Signals
) -> tuple[int, str, str]:
    """Run ``sleep MARKER`` on ``node_id`` through `nodeprov exec`, send it ``signum`` once the
    sleep runs, and return (its exit status, MARKER, its stderr)."""
    marker = unique_marker()
    process = subprocess.Popen(
        [sys.executable, "-m", "nodeprov", "exec", node_id, "-p", provider, "--", "sleep", marker],
        stdin=subprocess.PIPE,  # kept open: the process must not end for want of input
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", **settings_environment(provider, settings)},
    )
    try:
        deadline = time.monotonic() + 60
        while not _on_the_node(marker):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the command never started on the node"
            time.sleep(0.05)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, marker, stderr.decode(errors="replace")


def _on_the_node(marker: str) -> list[str]:
    """The ``sleep MARKER`` processes themselves. Not any process whose arguments hold it: the
    CLI's children between fork and exec (asyncssh runs ldconfig at import) show the CLI's
    arguments, and a signal sent then would come before the CLI handles any."""
    wanted = f"sleep {marker}"
    return [found for found in host_processes_matching(wanted) if found.partition(": ")[2] == wanted]


def gone_soon(marker: str) -> bool:
    """Whether the ``sleep MARKER`` is gone (the node's own reaping may take a moment)."""
    deadline = time.monotonic() + 10
    while host_processes_matching(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    return not host_processes_matching(f"sleep {marker}")


SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]
