"""POSIX sh building blocks of the scripts nodeprov runs on nodes: arguments an exec channel
cannot carry (:func:`encode_arguments`, :data:`DECODE_ARGUMENTS_SCRIPT`), environment names a
shell can export (:data:`SHELL_NAME`), bytes spelt for ``printf %b`` (:func:`printf_escapes`),
and a process's start time (:data:`START_TIME_FUNCTION`).

Every script takes its values as positional parameters, never interpolated into its text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

__all__ = [
    "DECODE_ARGUMENTS_SCRIPT",
    "SHELL_NAME",
    "START_TIME_FUNCTION",
    "encode_arguments",
    "printf_escapes",
]

SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""An environment name a POSIX shell can ``export`` (``sh`` drops the others when it execs)."""

# The shell's own read, no awk: keepers and guards look at start times in loops, and each
# look was a process started (about 1 ms of CPU). Lines are joined, for a name may hold one.
START_TIME_FUNCTION = """\
__np_start_of() {
  __np_stat=
  { while IFS= read -r __np_line || [ -n "$__np_line" ]; do
      __np_stat="$__np_stat $__np_line"
    done; } 2>/dev/null <"/proc/$1/stat" || return 0
  case $__np_stat in *") "*) ;; *) return 0 ;; esac
  set -f; IFS=' '
  set -- ${__np_stat##*") "}
  [ $# -ge 20 ] && printf '%s\\n' "${20}"
}
"""
"""POSIX sh: defines ``__np_start_of PID``, which prints the process's start time (clock
ticks after boot, field 22 of ``/proc/PID/stat``; the command name before it may hold
spaces, parentheses and line breaks), or nothing where there is no such process or no
``/proc``. A pid and its start time name one process: a later one that gets the recycled
pid differs. Call it in ``$(...)`` only: it sets variables, ``IFS`` and ``set -f`` as it
reads, which the subshell keeps to itself."""


def printf_escapes(data: bytes) -> str:
    """``data`` as ``printf %b`` octal escapes: one line of ASCII whatever the bytes."""
    return "".join(f"\\0{byte:03o}" for byte in data)


def encode_arguments(argv: Sequence[str], *, lines: bool = False) -> list[str]:
    """``argv`` for :data:`DECODE_ARGUMENTS_SCRIPT`: first the indices (from 1, spaced) of
    the arguments that are not UTF-8 (surrogate escapes, which an exec channel's JSON or
    text command cannot carry), or with ``lines`` that hold a line break too (for a script
    that reads them one per line), then the arguments with those spelt by
    :func:`printf_escapes`."""
    encoded: list[str] = []
    spelt: list[str] = []
    for index, arg in enumerate(argv, start=1):
        try:
            arg.encode()
            plain = not (lines and "\n" in arg)
        except UnicodeEncodeError:
            plain = False
        if plain:
            spelt.append(arg)
        else:
            encoded.append(str(index))
            spelt.append(printf_escapes(os.fsencode(arg)))
    return [" ".join(encoded), *spelt]


DECODE_ARGUMENTS_SCRIPT = """\
if [ -n "$__np_encoded" ]; then
  __np_n=0
  for __np_arg in "$@"; do
    __np_n=$((__np_n + 1))
    case " $__np_encoded " in *" $__np_n "*)
      __np_arg=$(printf '%bx' "$__np_arg"); __np_arg=${__np_arg%x} ;;
    esac
    set -- "$@" "$__np_arg"
  done
  shift "$__np_n"
fi
unset __np_encoded __np_n __np_arg
"""
"""POSIX sh: decodes, in ``"$@"``, the arguments whose indices ``$__np_encoded`` lists (the
first word of :func:`encode_arguments`, shifted off by the caller)."""
