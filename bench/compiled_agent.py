"""The compiled fake Claude Code CLI (``bench/fake_agent.c``), built on demand.

The Python fake (:mod:`nodeprov.testing.fake_agent`) costs more CPU than the relay it feeds,
so a benchmark of the relay runs this one instead: it speaks the same protocol for stream
steps and reads the same ``NODEPROV_FAKE_AGENT``, so only the ``cli_path`` changes. Bench and
test code only: nothing shipped runs it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["CPU_FILE_ENV", "CompilerMissingError", "compiled_fake_agent"]

SOURCE = Path(__file__).with_name("fake_agent.c")
FLAGS = ("-O2", "-std=c11", "-Wall", "-Wextra")
CPU_FILE_ENV = "NODEPROV_FAKE_AGENT_CPU_FILE"
"""Set to a path, the compiled agent appends its own CPU time there as it exits
(``USER_US SYSTEM_US``, microseconds since its ``main()`` began, a line per agent)."""


class CompilerMissingError(RuntimeError):
    """No C compiler to build the fake agent with."""


def cache_directory() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nodeprov-bench"


def compiled_fake_agent() -> str:
    """The path of the compiled fake agent, built first if this source has not been.

    Cached as ``fake-agent-<sha256 of source and flags>`` under ``~/.cache/nodeprov-bench``,
    so an edit of the source builds anew and concurrent builders never see a partial file.

    Raises:
        CompilerMissingError: no C compiler (``$CC``, else ``cc`` on PATH).
        RuntimeError: the compiler failed (its message included).
    """
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + " ".join(FLAGS).encode()).hexdigest()[:16]
    target = cache_directory() / f"fake-agent-{digest}"
    if os.access(target, os.X_OK):
        return str(target)
    compiler = os.environ.get("CC") or shutil.which("cc")
    if compiler is None:
        raise CompilerMissingError(
            f"building {SOURCE.name} needs a C compiler: no cc on PATH and CC unset (apt-get install gcc)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        built = subprocess.run(
            [compiler, *FLAGS, "-o", str(partial), str(SOURCE)],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as error:
        raise CompilerMissingError(f"cannot run the C compiler {compiler!r}: {error}") from None
    if built.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"{compiler} could not build {SOURCE}:\n{built.stderr}")
    os.replace(partial, target)  # whole or absent, for a concurrent builder or runner
    return str(target)
