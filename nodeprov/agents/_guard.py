"""How an agent's process is started on a node: behind the stdin guard (:func:`guard_stdin`),
which stops it when its control plane's channel closes, or kept (:func:`start_agent` with
``keep``), so that it outlives the channel and a re-attach picks it up."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

from ..errors import ConfigError
from ..exec.shell import START_TIME_FUNCTION
from ..node import NodeHandle
from ..node.keeper import KeepOptions, KeptProcess, keep
from ..spawn import SpawnedProcess, SpawnFn, SpawnOptions, StopPolicy

__all__ = ["GUARD_NAME", "EndInput", "guard_stdin", "leave_running", "start_agent"]

EndInput = Callable[[], Awaitable[None]]
"""Ends the agent's stdin while its channel stays open (see :func:`start_agent`)."""

# The stdin guard (see guard_stdin). Positional parameters: marker, grace, term_grace, the
# PWD and SHLVL the command must see ("=value", or empty for none), the guard's mark, the
# watcher's script (_GUARD_WATCH), then the command.
_GUARD_SCRIPT = (
    START_TIME_FUNCTION
    + """\
command -v awk >/dev/null || { echo "nodeprov-guard: no awk on this node" >&2; exit 127; }
nodeprov_guard_dir=$(mktemp -d) || exit 126
mkfifo "$nodeprov_guard_dir/in" || { rm -rf "$nodeprov_guard_dir"; exit 126; }
exec 3<&0
nodeprov_guard_start=$(__np_start_of $$)
if command -v setsid >/dev/null; then
  setsid /bin/sh -c "$7" nodeprov-guard-watch $$ "$nodeprov_guard_dir" "$1" "$2" "$3" "$6" \
    "$nodeprov_guard_start" >/dev/null 2>&1 &
else
  /bin/sh -c "$7" nodeprov-guard-watch $$ "$nodeprov_guard_dir" "$1" "$2" "$3" "$6" \
    "$nodeprov_guard_start" >/dev/null 2>&1 &
fi
exec <"$nodeprov_guard_dir/in" 3<&-
case $4 in =*) export PWD="${4#=}" ;; *) unset PWD ;; esac
case $5 in =*) export SHLVL="${5#=}" ;; *) unset SHLVL ;; esac
export NODEPROV_GUARD="$6"
unset nodeprov_guard_dir nodeprov_guard_start
shift 7
exec "$@"
"""
)

# The guard's watcher, in a session of its own where setsid is there (so that a stop signal
# the control plane sends the command's process group cannot end it before it has swept).
# Positional parameters: the command's pid, the FIFO's directory, the marker, grace,
# term_grace, the guard's mark, the command's start time (empty without /proc). Its fd 3 is
# the channel. The pid is signalled only while it is still the command's: once the command
# is gone, its number may be another process's, the leader of a group of its own.
_GUARD_WATCH = (
    START_TIME_FUNCTION
    + """\
trap '' TERM HUP INT
ours() {
  if [ -n "$7" ]; then
    [ "$(__np_start_of "$1")" = "$7" ]
  else
    kill -0 "$1" 2>/dev/null
  fi
}
exec 4>"$2/in"
rm -rf "$2"
NODEPROV_GUARD_MARKER=$3 LC_ALL=C awk -W interactive '
  $0 "" == ENVIRON["NODEPROV_GUARD_MARKER"] { exit }
  { print; fflush() }' <&3 >&4 &
exec 4>&-
wait $!
cat <&3 >/dev/null
nap() { sleep "$1" || sleep "$((${1%%.*} + 1))"; }
if ours "$@"; then
  nap "$4"
  if ours "$@"; then
    kill -TERM -"$1" || kill -TERM "$1"
    nap "$5"
  fi
fi
# Whatever the command started carries its mark, wherever it went (a session of its own, a
# daemon): found through /proc, with no ps on the node. The watcher does not carry it. One
# grep reads every process's environment (-z: entries end in NUL); a grep without -z (an
# old busybox) gets them one by one through tr, two processes per process on the node.
if printf 'x\\000' | grep -qzxF x 2>/dev/null; then
  marked() { grep -lzxsF -e "NODEPROV_GUARD=$1" /proc/[0-9]*/environ 2>/dev/null; }
else
  marked() {
    for environ in /proc/[0-9]*/environ; do
      tr '\\000' '\\n' <"$environ" 2>/dev/null | grep -qxF -e "NODEPROV_GUARD=$1" && echo "$environ"
    done
  }
fi
for round in 1 2 3 4 5; do
  found=
  for environ in $(marked "$6"); do
    pid=${environ#/proc/}; kill -KILL "${pid%/environ}" 2>/dev/null && found=1
  done
  [ -n "$found" ] || break
done
# What is left of the command's group (a group with members keeps its number).
if ours "$@" || [ ! -e "/proc/$1" ]; then
  kill -KILL -"$1" 2>/dev/null || kill -KILL "$1" 2>/dev/null
fi
exit 0
"""
)
GUARD_NAME = "nodeprov-guard"


def guard_stdin(options: SpawnOptions, *, marker: str, grace: float, term_grace: float) -> SpawnOptions:
    """``options`` wrapped so that the process stops itself when its control plane vanishes.

    A process on a node reads its stdin from the control plane over the platform's exec
    channel. If the control plane dies or its connection drops, that channel reaches EOF,
    but a program such as the Claude Code CLI does not stop mid-turn on stdin EOF, and
    nobody is left to stop it. The returned options run, on any provider, a POSIX ``sh``
    wrapper (``/bin/sh -c SCRIPT nodeprov-guard ...``; every argument is passed as a
    positional parameter, never interpolated into the script) that:

    - keeps the real stdin as the *channel*, and relays it line by line to the command's
      stdin through a FIFO in a private ``mktemp -d`` directory (removed as soon as both
      ends are open), with ``awk -W interactive`` and ``fflush()``;
    - on the exact line ``marker``, closes the command's stdin (a normal end of input,
      like the SDK's ``end_input()``) but goes on reading the channel;
    - when the channel reaches EOF while the command still runs, waits ``grace`` seconds,
      sends SIGTERM to the command's process group, waits ``term_grace`` seconds, then
      sends SIGKILL. After the channel closes, the command is therefore gone within
      ``grace + term_grace`` seconds (plus scheduling), whatever it does;
    - and, once the command is gone (ended, stopped, or killed by the control plane), kills
      every process that carries the guard's mark: the command's environment gets one
      variable more than asked, ``NODEPROV_GUARD`` (a random value per spawn), which what
      it starts inherits wherever it goes (a session of its own, as Claude Code's Bash tool;
      a daemon), found through ``/proc`` with no ``ps`` on the node. The watcher runs in a
      session of its own where ``setsid`` is there, so that a stop signal to the command's
      process group cannot end it first.

    The command is ``exec``'d by the wrapper, so it keeps the spawned pid, leads the spawn's
    process group, and its exit status (or the signal that killed it) is what the caller
    sees, as soon as it exits. The watcher redirects its own output (it never holds the
    command's stdout or stderr open), ignores SIGTERM, SIGHUP and SIGINT (group signals
    meant for the command), and exits once the channel is closed and the command gone.
    The environment the command gets is ``options.env`` over the node's, as without the
    wrapper (the ``PWD`` and ``SHLVL`` a shell sets are put back), and the guard's mark.

    Limits: the relay is for line-oriented text such as stream-json. A last line without a
    newline gets one; awk may not pass NUL bytes. mawk (Debian's awk) copies a long line
    once per 4 KiB read: a 1 MB line costs 0.06 s, a 10 MB line 9 s. A command that stops
    reading its stdin while the control plane keeps writing blocks the relay, and the
    channel's EOF is then seen only once the relay can write again. The node needs
    ``/bin/sh``, ``awk``, ``mktemp``, ``mkfifo``, ``cat``, ``sleep``, ``rm``, ``tr``,
    ``grep`` and ``/proc`` (all in a minimal Debian and in busybox), and uses ``setsid``
    where there is one; a fractional ``sleep`` is rounded up where ``sleep`` takes whole
    seconds only.

    Raises:
        ConfigError: an empty marker, one with a line break, or a negative or non-finite
            grace.
    """
    if not marker or "\n" in marker or "\r" in marker:
        raise ConfigError("the marker must be a non-empty single line")

    def seconds(value: float) -> str:
        if not 0 <= value < float("inf"):
            raise ConfigError(f"graces must be finite and non-negative, not {value!r}")
        return f"{value:.3f}".rstrip("0").rstrip(".")

    kept = ["=" + options.env[name] if name in options.env else "" for name in ("PWD", "SHLVL")]
    mark = secrets.token_hex(12)
    args = [seconds(grace), seconds(term_grace), *kept, mark, _GUARD_WATCH, *options.argv]
    return SpawnOptions(
        "/bin/sh", ["-c", _GUARD_SCRIPT, GUARD_NAME, marker, *args], cwd=options.cwd, env=options.env
    )


async def start_agent(
    spawn: SpawnFn,
    options: SpawnOptions,
    policy: StopPolicy,
    *,
    keep_with: KeepOptions | None = None,
    node: NodeHandle | None = None,
) -> tuple[SpawnedProcess, EndInput]:
    """Start an agent's ``options``: kept on ``node`` under a keeper with ``keep_with`` (it
    outlives its channel and this control plane, for its keeper's grace), else through
    ``spawn`` behind the stdin guard with the graces of ``policy`` (it stops itself when its
    channel closes). On a node that ends what its spawns start by itself
    (:attr:`NodeHandle.contains_spawns`: a local node's supervisor), the guard would only
    repeat that at a cost (about ten processes on the node, 7 ms of CPU a start), so the
    agent is spawned as it is and its input ends with its stdin. Returns the process, its
    stop policy set, and what ends its input.

    Raises:
        ConfigError: ``keep_with`` without a ``node``.
        CommandNotFoundError, SpawnError, NodeGoneError: as :meth:`NodeHandle.spawn`.
    """
    if keep_with is not None:
        if node is None:
            raise ConfigError("a kept agent needs its node")
        kept = await keep(node, options, keep_with)
        kept.stop_policy = policy
        return kept, kept.stdin.aclose
    if node is not None and node.contains_spawns:
        process = await spawn(options)
        process.stop_policy = policy
        return process, process.stdin.aclose
    marker = f"nodeprov-end-input-{secrets.token_hex(16)}"
    grace = policy.eof_grace + policy.term_grace
    process = await spawn(guard_stdin(options, marker=marker, grace=grace, term_grace=policy.term_grace))
    process.stop_policy = policy

    async def end_input() -> None:
        await process.stdin.send(f"{marker}\n".encode())

    return process, end_input


async def leave_running(process: SpawnedProcess | None) -> None:
    """Close the channel of a kept agent's ``process`` and leave it running (for
    :meth:`AgentSession.detach`); a process that is not kept is left to be stopped."""
    if isinstance(process, KeptProcess):
        await process.detach()
