"""The remote command line of a spawn over SSH.

SSH carries a command as one string, which the login shell parses. So the string is always
``exec /bin/sh -c PREAMBLE nodeprov-ssh ARG...`` with every argument single-quoted
(:func:`shlex.quote`); the login shell must be a POSIX shell (csh-family shells treat
quotes and newlines differently). The preamble (:mod:`nodeprov.exec.preamble`) reads the
environment from the session's stdin, so no value is ever on a command line, where other
users of the host could read it (``ps``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from nodeprov.exec import PREAMBLE, encode_arguments

__all__ = ["command_line", "script_line"]


def command_line(argv: Sequence[str], cwd: str, record: str = "") -> str:
    """The remote command line that runs ``argv`` in ``cwd`` under the preamble, recording
    its process group in the file ``record`` (none if empty)."""
    return script_line(PREAMBLE, cwd, record, *encode_arguments(argv))


def script_line(script: str, *args: str) -> str:
    """The remote command line that runs the POSIX sh ``script`` with ``args`` as its
    positional parameters, each single-quoted: the login shell sees only literals."""
    words = ["exec", "/bin/sh", "-c", script, "nodeprov-ssh", *args]
    return " ".join(shlex.quote(word) for word in words)
