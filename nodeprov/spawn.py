"""Starting processes on a node: :class:`SpawnOptions`, :class:`SpawnedProcess`, :data:`SpawnFn`.

These are the only things the SDK bridge needs from a node. Every provider returns the same
:class:`SpawnedProcess` shape, whether the process is a local child, a ``docker exec`` or an
SSH channel.
"""

from __future__ import annotations

import os
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Self

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from .errors import ConfigError, NodeGoneError, NodeprovError

__all__ = [
    "DECODE_ARGUMENTS_SCRIPT",
    "HOLDS_PIPE_SCRIPT",
    "SHELL_NAME",
    "ReleasedStdout",
    "SpawnFn",
    "SpawnOptions",
    "SpawnedProcess",
    "StopPolicy",
    "encode_arguments",
    "printf_escapes",
]

_ENV_NAME = re.compile(r"^[^=\x00]+$")


@dataclass(frozen=True, slots=True)
class SpawnOptions:
    """What to run on a node, and how.

    ``command`` and ``args`` form the argument vector; they are never joined into a shell
    string by nodeprov, and providers whose platform needs a command *string* (ssh) quote
    every element. ``args`` must be a sequence of strings: a bare string is rejected, since
    it would otherwise be read as a list of characters.

    ``cwd`` is a path on the node; ``None`` means the node's working directory, and a
    relative path is taken relative to it (see :meth:`NodeHandle.node_path`: a cwd outside
    the node is refused).

    ``env`` is laid over the node's base environment (:attr:`NodeHandle.base_env`) and is
    *exactly* what is added: nothing of the control plane's own environment reaches the
    process. Names may not contain ``=`` or NUL; values may not contain NUL.

    Raises (at construction) :class:`TypeError` for a non-string command, argument or env
    entry, or a bare string as ``args``; :class:`~nodeprov.errors.ConfigError` (a
    ``ValueError``) for an empty command, a NUL in any string, or a malformed variable name.
    """

    command: str
    args: Sequence[str] = ()
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.args, (str, bytes)):
            raise TypeError("args must be a list of strings, not a single string")
        args = tuple(self.args)
        env = dict(self.env)
        strings = [self.command, *args, *env, *env.values()]
        if not all(isinstance(item, str) for item in strings):
            raise TypeError("command, args and env must be strings")
        if not self.command or any("\x00" in item for item in strings):
            raise ConfigError("the command must be non-empty, and no string may contain NUL")
        bad_names = [name for name in env if not _ENV_NAME.match(name)]
        if bad_names:
            raise ConfigError(f"invalid environment variable names: {bad_names!r}")
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "env", MappingProxyType(env))

    @property
    def argv(self) -> list[str]:
        """``[command, *args]``."""
        return [self.command, *self.args]


@dataclass(frozen=True, slots=True)
class StopPolicy:
    """How :meth:`SpawnedProcess.aclose` stops a process that is still running.

    First stdin is closed and the process gets ``eof_grace`` seconds to exit on its own
    (an agent flushes its session file then); then SIGTERM and ``term_grace`` seconds;
    then SIGKILL and ``kill_grace`` seconds to be reaped.
    """

    eof_grace: float = 5.0
    term_grace: float = 5.0
    kill_grace: float = 5.0

    @property
    def total(self) -> float:
        """The longest :meth:`SpawnedProcess.aclose` can take."""
        return self.eof_grace + self.term_grace + self.kill_grace

    @classmethod
    def immediate(cls) -> StopPolicy:
        """SIGKILL straight away (used when a node is being destroyed)."""
        return cls(eof_grace=0.0, term_grace=0.0, kill_grace=5.0)


class SpawnedProcess(ABC):
    """A process running on a node, with its three standard streams.

    ``stdin`` is a byte send stream (close it to send EOF); ``stdout`` and ``stderr`` are
    byte receive streams, kept apart. A caller that does not read ``stderr`` should still
    drain or close it, or a chatty process may block on a full pipe.

    Use it as an async context manager, or call :meth:`aclose`: both stop the process with
    its :class:`StopPolicy` if it is still running, release its streams, and are idempotent,
    shielded from cancellation and bounded by the policy's total time.
    """

    stdin: ByteSendStream
    stdout: ByteReceiveStream
    stderr: ByteReceiveStream

    def __init__(self, stop_policy: StopPolicy | None = None) -> None:
        self.stop_policy = stop_policy or StopPolicy()
        self._closed = False
        self._close_lock = anyio.Lock()

    @property
    @abstractmethod
    def returncode(self) -> int | None:
        """The exit status once the process has exited and been reaped, else ``None``.

        A process killed by signal N reports ``-N`` where the platform can tell a signal
        from an exit status (local); where it cannot (Docker), ``128 + N``, as a shell would.
        """

    @abstractmethod
    async def wait(self) -> int:
        """Wait for the process to exit and return its exit status (see :attr:`returncode`).

        Raises :class:`~nodeprov.errors.NodeGoneError` if the node vanished meanwhile.
        """

    @abstractmethod
    async def terminate(self) -> None:
        """Ask the process (and what it started, where the platform allows) to stop: SIGTERM.

        Does nothing if it has already exited. Never raises for a gone process.
        """

    @abstractmethod
    async def kill(self) -> None:
        """Kill the process (and what it started, where the platform allows): SIGKILL.

        Does nothing if it has already exited. Never raises for a gone process.
        """

    async def _release(self) -> None:
        """Free what the process holds once it has exited (streams, leftover children)."""
        for stream in (self.stdout, self.stderr):
            await stream.aclose()

    async def aclose(self) -> None:
        """Stop the process with :attr:`stop_policy` if it runs, then release its streams.

        Idempotent and shielded from cancellation; takes at most ``stop_policy.total``
        seconds (plus a short release).
        """
        with anyio.CancelScope(shield=True):
            async with self._close_lock:
                if self._closed:
                    return
                policy = self.stop_policy
                await _close_quietly(self.stdin)
                steps = (
                    (policy.eof_grace, None),
                    (policy.term_grace, self.terminate),
                    (policy.kill_grace, self.kill),
                )
                for grace, signal in steps:
                    if self.returncode is not None:
                        break
                    if signal is not None:
                        await signal()
                    with anyio.move_on_after(grace if grace > 0 else 0.05), suppress(NodeGoneError):
                        await self.wait()  # a vanished node took the process with it
                with anyio.move_on_after(5):
                    await self._release()
                self._closed = True

    async def discard(self) -> None:
        """Release the process's streams without stopping it: its node is gone, and took the
        process with it. Idempotent and shielded; bounded by one second."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            if self._closed:
                return
            self._closed = True
            await _close_quietly(self.stdin)
            await self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def _close_quietly(stream: ByteSendStream) -> None:
    try:
        with anyio.move_on_after(1):
            await stream.aclose()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # the reading side is gone already: EOF is moot


SpawnFn = Callable[[SpawnOptions], Awaitable[SpawnedProcess]]
"""Start a process on a node. ``NodeHandle.spawn`` is one; the SDK bridge needs only this."""


HOLDS_PIPE_SCRIPT = r"""LC_ALL=C ls -l /proc/[0-9]*/fd 2>&1 | awk -v pipe="-> $1" -v group="$2" '
  substr($0, 3, 1) == "w" && substr($0, length($0) - length(pipe) + 1) == pipe { held = 1 }
  /^ls: / && match($0, /\/proc\/[0-9]+\/fd/) {
    stat = substr($0, RSTART, RLENGTH - 3) "/stat"
    if ((getline line < stat) > 0) {
      sub(/.*\) /, "", line); split(line, field, " ")
      if (field[3] == group || field[4] == group) held = 1
    }
    close(stat)
  }
  END { exit !held }'
"""
"""POSIX sh: exits 1 only when no process holds the pipe ``$1`` (as ``readlink
/proc/PID/fd/1`` names it: ``pipe:[INODE]``) open for writing; its reader (the exec
channel's server, on an SSH host) does not count. A process whose descriptors cannot be
read (another user's, where this user may not look) counts as holding it when it is in the
process group or session ``$2`` (the spawned process's), which whatever it started stays in
unless it left; other users' processes elsewhere do not. One ``ls`` and one ``awk``."""

SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""An environment name a POSIX shell can ``export`` (``sh`` drops the others when it execs)."""


def printf_escapes(data: bytes) -> str:
    """``data`` as ``printf %b`` octal escapes: one line of ASCII whatever the bytes."""
    return "".join(f"\\0{byte:03o}" for byte in data)


def encode_arguments(argv: Sequence[str]) -> list[str]:
    """``argv`` for :data:`DECODE_ARGUMENTS_SCRIPT`: first the indices (from 1, spaced) of
    the arguments that are not UTF-8 (surrogate escapes, which an exec channel's JSON or
    text command cannot carry), then the arguments with those spelt by
    :func:`printf_escapes`."""
    encoded: list[str] = []
    spelt: list[str] = []
    for index, arg in enumerate(argv, start=1):
        try:
            arg.encode()
        except UnicodeEncodeError:
            encoded.append(str(index))
            spelt.append(printf_escapes(os.fsencode(arg)))
        else:
            spelt.append(arg)
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

_QUIET_CHECK_FIRST, _QUIET_CHECK_MAX = 1.0, 8.0  # seconds of stdout silence before asking
_QUIET_CONFIRM = 0.25  # a "nothing holds it" is asked again after this much more silence


class ReleasedStdout(ByteReceiveStream):
    """A process's stdout over an exec channel that ends stdout only together with stderr
    (Docker's exec stream, an SSH session): a process that closes its stdout and keeps
    running would otherwise never end it. When stdout has been quiet for a second, ``held``
    asks the node (say with :data:`HOLDS_PIPE_SCRIPT`) whether anything still holds the
    pipe; when it twice says no, with silence between, ``end`` is called and what is queued
    is read out before EOF. The checks back off to every 8 s, and run only while the
    process is silent.

    ``receive(max_bytes)`` reads the stream; ``end()`` ends it where it is; ``close()``
    drops it (the reader is gone). A failing ``held`` counts as held: the node is going,
    and the channel ends with it.
    """

    def __init__(
        self,
        receive: Callable[[int], Awaitable[bytes]],
        *,
        held: Callable[[], Awaitable[bool]],
        end: Callable[[], None],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        self._receive = receive
        self._held = held
        self._end = end
        self._close = close

    async def receive(self, max_bytes: int = 65536) -> bytes:
        quiet, unheld = _QUIET_CHECK_FIRST, 0
        while True:
            with anyio.move_on_after(quiet):
                return await self._receive(max_bytes)
            try:
                held = await self._held()
            except NodeprovError:
                held = True
            if held:
                quiet, unheld = min(quiet * 2, _QUIET_CHECK_MAX), 0
                continue
            # Twice, with silence between: output written just before the last holder let
            # go may still be on its way, and a holder may have been forking.
            unheld += 1
            if unheld == 2:
                self._end()
            quiet = _QUIET_CONFIRM

    async def aclose(self) -> None:
        await self._close()


# The stdin guard (see guard_stdin). Positional parameters: marker, grace, term_grace, the
# PWD and SHLVL the command must see ("=value", or empty for none), the guard's mark, the
# watcher's script (_GUARD_WATCH), then the command.
_GUARD_SCRIPT = """\
command -v awk >/dev/null || { echo "nodeprov-guard: no awk on this node" >&2; exit 127; }
nodeprov_guard_dir=$(mktemp -d) || exit 126
mkfifo "$nodeprov_guard_dir/in" || { rm -rf "$nodeprov_guard_dir"; exit 126; }
exec 3<&0
nodeprov_guard_start=$(awk '{ sub(/.*\\) /, ""); print $20 }' "/proc/$$/stat" 2>/dev/null)
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

# The guard's watcher, in a session of its own where setsid is there (so that a stop signal
# the control plane sends the command's process group cannot end it before it has swept).
# Positional parameters: the command's pid, the FIFO's directory, the marker, grace,
# term_grace, the guard's mark, the command's start time (empty without /proc). Its fd 3 is
# the channel. The pid is signalled only while it is still the command's: once the command
# is gone, its number may be another process's, the leader of a group of its own.
_GUARD_WATCH = """\
trap '' TERM HUP INT
ours() {
  if [ -n "$7" ]; then
    [ "$(awk '{ sub(/.*\\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null)" = "$7" ]
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
# daemon): found through /proc, with no ps on the node. The watcher does not carry it.
for round in 1 2 3 4 5; do
  found=
  for environ in /proc/[0-9]*/environ; do
    tr '\\000' '\\n' <"$environ" 2>/dev/null | grep -qxF -e "NODEPROV_GUARD=$6" || continue
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
