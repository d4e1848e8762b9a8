"""The remote command line of a spawn over SSH, and the environment it is sent over stdin.

SSH carries a command as one string, which the login shell parses. So the string is always
``exec /bin/sh -c PREAMBLE nodeprov-ssh ARG...`` with every argument single-quoted
(:func:`shlex.quote`); the login shell must be a POSIX shell (csh-family shells treat
quotes and newlines differently). Arguments that are not UTF-8 are spelt as ``printf %b``
octal escapes and decoded by the preamble, since the SSH channel's command is text.

No environment value is ever on a command line, where other users of the host could read it
(``ps``): the preamble reads the environment from stdin first, one ``NAME=VALUE`` line per
variable with the value spelt in octal escapes, then an empty line; what follows on stdin is
the process's own. The preamble clears the login's environment (sshd's ``USER``, ``SSH_*``
and the rest), changes to the working directory, exports exactly what it read, reports its
pid (the session leader: sshd starts each session in a session of its own, so the pid is
also the process group to signal) and execs the command, which keeps that pid.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from nodeprov.spawn import DECODE_ARGUMENTS_SCRIPT, SHELL_NAME, encode_arguments, printf_escapes

SENTINEL = b"\x1enodeprov "
REPORT_OK = SENTINEL + b"ok "
REPORT_NOT_FOUND = SENTINEL + b"notfound"
REPORT_NO_CWD = SENTINEL + b"nocwd"
REPORT_GONE = SENTINEL + b"gone"
REPORT_NO_PERL = SENTINEL + b"noperl"

# Sets the variables the shell could not export (names that are not shell names), read
# from its own environment, then execs the command, which keeps the pid.
_PERL_EXEC = (
    "for (split /\\n/, delete $ENV{__np_extra}) {"
    " my ($n, $v) = map { s/\\\\0([0-7]{3})/chr oct $1/ger } split /=/, $_, 2; $ENV{$n} = $v }"
    " exec { $ARGV[0] } @ARGV or exit 127"
)

# Positional parameters: the cwd, the node's process file (each spawn appends "PID START"
# before it starts, so a destroy can end it), then encode_arguments(argv).
PREAMBLE = f"""\
for __np_name in $(awk 'BEGIN {{ for (k in ENVIRON) print k }}'); do
  case $__np_name in [!A-Za-z_]*|*[!A-Za-z0-9_]*) ;; *) unset "$__np_name" 2>/dev/null ;; esac
done
__np_cwd=$1 __np_record=$2 __np_encoded=$3; shift 3
{DECODE_ARGUMENTS_SCRIPT}__np_start=$(awk '{{ sub(/.*\\) /, ""); print $20 }}' "/proc/$$/stat" 2>/dev/null)
if [ -n "$__np_record" ]; then
  {{ [ -d "${{__np_record%/*}}" ] && printf '%s %s\\n' "$$" "${{__np_start:--}}" >>"$__np_record"; }} ||
    {{ printf '\\036nodeprov gone\\n'; exit 125; }}
fi
cd -- "$__np_cwd" 2>/dev/null || {{ printf '\\036nodeprov nocwd\\n'; exit 126; }}
unset PWD OLDPWD
__np_extra=
while IFS= read -r __np_line && [ -n "$__np_line" ]; do
  case ${{__np_line%%=*}} in
    [!A-Za-z_]*|*[!A-Za-z0-9_]*) __np_extra="$__np_extra$__np_line
" ;;
    *) __np_value=$(printf '%bx' "${{__np_line#*=}}"); export "${{__np_line%%=*}}=${{__np_value%x}}" ;;
  esac
done
command -v -- "$1" >/dev/null 2>&1 || {{ printf '\\036nodeprov notfound\\n'; exit 127; }}
printf '\\036nodeprov ok %s %s %s\\n' "$$" "${{__np_start:--}}" "$(readlink "/proc/$$/fd/1" 2>/dev/null)"
if [ -n "$__np_extra" ]; then
  command -v perl >/dev/null 2>&1 || {{ printf '\\036nodeprov noperl\\n'; exit 127; }}
  unset __np_name __np_line __np_value __np_cwd __np_start __np_record
  export __np_extra
  exec perl -e '{_PERL_EXEC}' -- "$@"
fi
unset __np_name __np_line __np_value __np_cwd __np_start __np_record __np_extra
exec "$@"
"""


def environment_block(env: Mapping[str, str]) -> bytes:
    """The environment as the preamble reads it from stdin: ``NAME=VALUE`` lines, the value
    spelt by :func:`~nodeprov.spawn.printf_escapes`; a name that is not a shell name is
    spelt too, and set by ``perl`` on the host (a POSIX shell cannot export it)."""
    lines = []
    for name, value in env.items():
        key = name if SHELL_NAME.match(name) else printf_escapes(os.fsencode(name))
        lines.append(f"{key}={printf_escapes(os.fsencode(value))}\n")
    return ("".join(lines) + "\n").encode()


def command_line(argv: Sequence[str], cwd: str, record: str = "") -> str:
    """The remote command line that runs ``argv`` in ``cwd`` under the preamble, recording
    its process group in the file ``record`` (none if empty)."""
    return script_line(PREAMBLE, cwd, record, *encode_arguments(argv))


def script_line(script: str, *args: str) -> str:
    """The remote command line that runs the POSIX sh ``script`` with ``args`` as its
    positional parameters, each single-quoted: the login shell sees only literals."""
    words = ["exec", "/bin/sh", "-c", script, "nodeprov-ssh", *args]
    return " ".join(shlex.quote(word) for word in words)
