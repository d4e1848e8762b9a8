"""The shell preamble of a process started over an exec channel that carries only a command
and the standard streams (an SSH session, a Kubernetes pod's exec), and the report every
preamble gives before it execs the command (:func:`read_report`; Docker's too).

Such a channel has no way to pass an environment, or none that stays private (a command
line shows in ``ps`` and in the platform's audit logs). So the command is always ``/bin/sh -c
PREAMBLE NAME CWD RECORD ENCODED ARG...`` (see :func:`~nodeprov.exec.shell.encode_arguments`),
and the environment goes over stdin first, one ``NAME=VALUE`` line per variable with the
value spelt in octal escapes (:func:`environment_block`), then an empty line; what follows
on stdin is the process's own. The preamble clears the channel's own environment, changes
to the working directory, exports exactly what it read, reports its pid (the exec channel
makes it a session leader, so the pid is also the process group to signal), its start time
and its stdout pipe, and execs the command, which keeps that pid.

A channel that cannot end the process's stdin by itself (Kubernetes' ``v4.channel.k8s.io``)
runs the preamble with ``__np_relay=1`` set before it (see :data:`RELAYED_PREAMBLE`): stdin
then reaches the command through a ``cat`` into a FIFO (the *relay*, in the command's
process group, reported after the start time), and :data:`END_RELAY` ends it once it has
passed on every byte the control plane sent: the command reads EOF, as from a closed pipe.

A *prepared* spawn starts its channel ahead of its command (a warm pool's ready node, see
:meth:`~nodeprov.node.NodeHandle.prepare`): :data:`PREPARED_PREAMBLE` does what needs no
command (it clears the channel's environment), then waits for the positional parameters of
:data:`PREAMBLE` on stdin (:func:`prepared_request`) and the environment after them, says
:data:`REPORT_READY`, and goes on only once it reads one more line: so a control plane that
hears nothing back knows nothing ran, and may spawn again the usual way.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass

import anyio

from ..errors import CommandNotFoundError, NodeGoneError, SpawnError
from ..spawn import SpawnOptions
from .demux import STDERR, STDOUT, Demux
from .shell import DECODE_ARGUMENTS_SCRIPT, SHELL_NAME, START_TIME_FUNCTION, printf_escapes

__all__ = [
    "END_RELAY",
    "PREAMBLE",
    "PREPARED_PREAMBLE",
    "RELAYED_PREAMBLE",
    "REPORT_GONE",
    "REPORT_NOT_FOUND",
    "REPORT_NO_CWD",
    "REPORT_NO_PERL",
    "REPORT_NO_RELAY",
    "REPORT_OK",
    "REPORT_READY",
    "SENTINEL",
    "SIGNAL_GROUP",
    "SIGNAL_GROUP_FUNCTION",
    "Explain",
    "Report",
    "environment_block",
    "read_report",
]

SENTINEL = b"\x1enodeprov "
REPORT_OK = SENTINEL + b"ok "
"""``ok PID START PIPE [RELAY RELAY_START]`` (``-`` for a start time /proc does not tell)."""
REPORT_NOT_FOUND = SENTINEL + b"notfound"
REPORT_NO_CWD = SENTINEL + b"nocwd"
REPORT_GONE = SENTINEL + b"gone"
REPORT_NO_PERL = SENTINEL + b"noperl"
REPORT_NO_RELAY = SENTINEL + b"norelay"
REPORT_READY = SENTINEL + b"ready"
"""A :data:`PREPARED_PREAMBLE` has read its request whole and waits for the line that starts it."""

# Sets the variables the shell could not export (names that are not shell names), read
# from its own environment, then execs the command, which keeps the pid.
_PERL_EXEC = (
    "for (split /\\n/, delete $ENV{__np_extra}) {"
    " my ($n, $v) = map { s/\\\\0([0-7]{3})/chr oct $1/ger } split /=/, $_, 2; $ENV{$n} = $v }"
    " exec { $ARGV[0] } @ARGV or exit 127"
)

# What needs no command: the channel's own environment cleared, the shell's start time.
_CLEAR = f"""\
{START_TIME_FUNCTION}for __np_name in $(awk 'BEGIN {{ for (k in ENVIRON) print k }}'); do
  case $__np_name in [!A-Za-z_]*|*[!A-Za-z0-9_]*) ;; *) unset "$__np_name" 2>/dev/null ;; esac
done
__np_start=$(__np_start_of $$)
"""

# Positional parameters: the cwd, a process file (each spawn appends "PID START" before it
# starts, so a destroy can end it; empty for none), then encode_arguments(argv).
_ARGUMENTS = f"""\
__np_cwd=$1 __np_record=$2 __np_encoded=$3; shift 3
{DECODE_ARGUMENTS_SCRIPT}"""

# The environment is read whole before anything that may end this early: the control plane's
# write of it must never meet a closed channel (a missing cwd is a SpawnError, not a lost node).
_ENVIRONMENT = """\
__np_env=
while :; do
  # The channel closed before the environment's end: the spawn was given up. Never run.
  IFS= read -r __np_line || exit 124
  [ -n "$__np_line" ] || break
  __np_env="$__np_env$__np_line
"
done
"""

_START = f"""\
if [ -n "$__np_record" ]; then
  {{ [ -d "${{__np_record%/*}}" ] && printf '%s %s\\n' "$$" "${{__np_start:--}}" >>"$__np_record"; }} ||
    {{ printf '\\036nodeprov gone\\n'; exit 125; }}
fi
cd -- "$__np_cwd" 2>/dev/null || {{ printf '\\036nodeprov nocwd\\n'; exit 126; }}
unset PWD OLDPWD
__np_extra= __np_ifs=$IFS
set -f; IFS='
'
for __np_line in $__np_env; do
  case ${{__np_line%%=*}} in
    [!A-Za-z_]*|*[!A-Za-z0-9_]*) __np_extra="$__np_extra$__np_line
" ;;
    IFS) __np_ifs=$(printf '%bx' "${{__np_line#*=}}"); __np_ifs=${{__np_ifs%x}}; export IFS ;;  # set below
    *) __np_value=$(printf '%bx' "${{__np_line#*=}}"); export "${{__np_line%%=*}}=${{__np_value%x}}" ;;
  esac
done
set +f; IFS=$__np_ifs
command -v -- "$1" >/dev/null 2>&1 || {{ printf '\\036nodeprov notfound\\n'; exit 127; }}
__np_relayed=
if [ -n "$__np_relay" ]; then
  __np_fifo=$(mktemp -d 2>/dev/null) && mkfifo "$__np_fifo/in" ||
    {{ printf '\\036nodeprov norelay\\n'; exit 126; }}
  exec 3<&0
  cat <&3 >"$__np_fifo/in" 2>/dev/null &
  __np_relayed=" $! $(__np_start_of $!)"
  exec <"$__np_fifo/in" 3<&-
  rm -rf "$__np_fifo"
fi
__np_pipe=$(readlink "/proc/$$/fd/1" 2>/dev/null)
printf '\\036nodeprov ok %s %s %s%s\\n' "$$" "${{__np_start:--}}" "$__np_pipe" "$__np_relayed"
unset -f __np_start_of
unset __np_name __np_line __np_value __np_cwd __np_start __np_record __np_env __np_ifs
unset __np_relay __np_relayed __np_fifo __np_pipe
if [ -n "$__np_extra" ]; then
  command -v perl >/dev/null 2>&1 || {{ printf '\\036nodeprov noperl\\n'; exit 127; }}
  export __np_extra
  exec perl -e '{_PERL_EXEC}' -- "$@"
fi
unset __np_extra
exec "$@"
"""

PREAMBLE = _CLEAR + _ARGUMENTS + _ENVIRONMENT + _START

# The request: a line "COUNT RELAY" (RELAY 1 for the stdin relay, else empty), then the
# positional parameters of PREAMBLE, one per line (see prepared_request), then the environment.
PREPARED_PREAMBLE = (
    _CLEAR
    + """\
IFS=' ' read -r __np_count __np_relay || exit 124
case $__np_count in ''|*[!0-9]*) exit 124 ;; esac
set --
while [ "$__np_count" -gt 0 ]; do
  IFS= read -r __np_line || exit 124
  set -- "$@" "$__np_line"
  __np_count=$((__np_count - 1))
done
unset __np_count
"""
    + _ARGUMENTS
    + _ENVIRONMENT
    + """\
printf '\\036nodeprov ready\\n'
# Nothing heard back means nothing ran: the control plane may spawn again the usual way.
IFS= read -r __np_line || exit 124
"""
    + _START
)

RELAYED_PREAMBLE = "__np_relay=1\n" + PREAMBLE
""":data:`PREAMBLE` with stdin relayed through a FIFO, for channels that cannot end stdin."""

# $1: the relay's pid; $2: its start time; $3: how many bytes the control plane sent. Says
# "ending" (the caller may go: this goes on without it), then waits until the relay has
# written them all into the FIFO (/proc/PID/io counts its writes) and ends it: the command
# reads EOF after the last byte. A relay that is gone, or a pid recycled, is left alone.
# Where /proc/PID/io cannot be read (a sandbox that hides it), the relay is ended at once,
# and bytes still on their way to it are lost.
END_RELAY = f"""\
printf 'ending\\n'; exec >/dev/null 2>&1
{START_TIME_FUNCTION}pause=0.01
while [ "$(__np_start_of "$1")" = "$2" ]; do
  written=$(awk '$1 == "wchar:" {{ print $2 }}' "/proc/$1/io" 2>/dev/null)
  if [ -z "$written" ] || [ "$written" -ge "$3" ]; then kill "$1"; exit 0; fi
  sleep "$pause" || sleep 1
  case $pause in 0.01) pause=0.05 ;; 0.05) pause=0.2 ;; esac
done
"""

# Signals the process group led by PID ($2), if PID is still the process recorded with
# start time START ($3: a recycled pid is left alone; "-" where the host has no /proc).
SIGNAL_GROUP_FUNCTION = (
    START_TIME_FUNCTION
    + """\
signal_group() {
  case $2 in ''|*[!0-9]*|0|1) return 0 ;; esac
  if [ -e "/proc/$2" ] && [ "$3" != - ]; then
    [ "$(__np_start_of "$2")" = "$3" ] || return 0
  fi
  kill -s "$1" -- "-$2" 2>/dev/null || kill -s "$1" "$2" 2>/dev/null
  return 0
}
"""
)
SIGNAL_GROUP = SIGNAL_GROUP_FUNCTION + 'signal_group "$@"\n'
"""POSIX sh: ``SIGNAL PID START``, see :data:`SIGNAL_GROUP_FUNCTION`."""


def environment_block(env: Mapping[str, str]) -> bytes:
    """The environment as the preamble reads it from stdin: ``NAME=VALUE`` lines, the value
    spelt by :func:`~nodeprov.exec.shell.printf_escapes`; a name that is not a shell name is
    spelt too, and set by ``perl`` on the node (a POSIX shell cannot export it)."""
    lines = []
    for name, value in env.items():
        key = name if SHELL_NAME.match(name) else printf_escapes(os.fsencode(name))
        lines.append(f"{key}={printf_escapes(os.fsencode(value))}\n")
    return ("".join(lines) + "\n").encode()


@dataclass(frozen=True, slots=True)
class Report:
    """What a preamble reported before it exec'd the command (see :data:`REPORT_OK`)."""

    pid: int
    """The process's id on the node; it leads its process group."""
    start: str
    """Its start time (see :data:`~nodeprov.exec.shell.START_TIME_FUNCTION`); ``-`` when
    unknown."""
    pipe: str
    """Its stdout pipe (``pipe:[INODE]``); empty when unknown."""
    relay: str
    """The stdin relay's pid (:data:`RELAYED_PREAMBLE`); empty without a relay."""
    relay_start: str
    """The relay's start time; empty without a relay."""

    @classmethod
    def parse(cls, line: bytes) -> Report:
        """The report in ``line``, a :data:`REPORT_OK` line without its line break."""
        words = line.removeprefix(REPORT_OK).decode().split(" ")
        pid, start, pipe, relay, relay_start = (words + [""] * 4)[:5]
        return cls(int(pid), start, pipe, relay, relay_start)


Explain = Callable[[str], Awaitable[str]]
"""Given what the channel said when no report came (the first bytes of stdout and of stderr,
perhaps nothing), what the :class:`~nodeprov.errors.SpawnError` says; may raise a nodeprov
error that tells better (the node is gone)."""

_REPORT_LIMIT = 4096  # bytes of a report line, and of what a shell that failed to start says
_SAYING_TIME = 2.0  # seconds to wait for what a failed start says on stderr


async def read_report(
    output: Demux, options: SpawnOptions, node: str, *, explain: Explain | None = None
) -> Report:
    """Read the preamble's report off ``output``'s stdout; what comes after it is left there.

    ``node`` names the node in messages (``node ID``, with its host where that helps).
    When no report comes, what the channel said is read from stdout and stderr (bounded in
    size and time) and passed through ``explain``. The channel is left open either way.

    Raises:
        CommandNotFoundError: there is no ``options.command`` on the node.
        SpawnError: the working directory does not exist, an environment name needs a perl
            the node lacks, there is no room for the stdin relay, or the shell could not
            even run the preamble (what the channel said).
        NodeGoneError: the node is gone (its directory was removed).
        NodeprovError: whatever ``explain`` raises.
    """
    first = b""
    with suppress(anyio.EndOfStream):
        while b"\n" not in first and len(first) < _REPORT_LIMIT:
            first += await output.receive(STDOUT, _REPORT_LIMIT)
    line, _, rest = first.partition(b"\n")
    if line.startswith(REPORT_OK):
        output.push_back(STDOUT, rest)
        return Report.parse(line)
    if line == REPORT_NOT_FOUND:
        raise CommandNotFoundError(f"no command {options.command!r} on {node}")
    if line == REPORT_NO_CWD:
        raise SpawnError(f"working directory {options.cwd!r} does not exist on {node}")
    if line == REPORT_GONE:
        raise NodeGoneError(f"{node} is gone")
    if line == REPORT_NO_PERL:
        raise SpawnError(f"environment names that are not shell names need perl on {node}")
    if line == REPORT_NO_RELAY:
        raise SpawnError(f"no temporary directory for the stdin relay on {node} (mktemp -d, mkfifo)")
    # Not even the preamble ran (no /bin/sh, a nologin shell, a refused exec): say what was said.
    error = b""
    with anyio.move_on_after(_SAYING_TIME), suppress(anyio.EndOfStream):
        while len(error) < _REPORT_LIMIT:
            error += await output.receive(STDERR, _REPORT_LIMIT)
    said = (first + error).decode(errors="replace").strip()
    if explain is not None:
        said = await explain(said)
    raise SpawnError(f"cannot start {options.command!r} on {node}: {said or 'no output'}")
