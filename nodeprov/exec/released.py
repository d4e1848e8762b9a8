"""A process's stdout over an exec channel that ends stdout only together with stderr
(Docker's exec stream, a pod's exec, an SSH session): :class:`ReleasedStdout` ends it once
nothing on the node holds the pipe any more (:data:`HOLDS_PIPE_SCRIPT`), as a pipe would
end for a process that closes its stdout and goes on running.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import ByteReceiveStream

from ..errors import NodeprovError
from .demux import STDOUT, Demux

__all__ = ["HOLDS_PIPE_SCRIPT", "Held", "ReleasedStdout"]

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

Held = Callable[[], Awaitable[bool]]
"""Whether anything on the node still holds the process's stdout pipe (say, through
:data:`HOLDS_PIPE_SCRIPT`); may raise :class:`~nodeprov.errors.NodeprovError`."""

_QUIET_CHECK_FIRST, _QUIET_CHECK_MAX = 1.0, 8.0  # seconds of stdout silence before asking
_QUIET_CONFIRM = 0.25  # a "nothing holds it" is asked again after this much more silence


class ReleasedStdout(ByteReceiveStream):
    """The stdout of ``demux``, ended when nothing holds its pipe any more. When stdout has
    been quiet for a second, ``held`` asks the node whether anything still holds the pipe;
    when it twice says no, with silence between, the stream ends (:meth:`Demux.end`) and
    what is queued is read out before EOF. The checks back off to every 8 s, and run only
    while the process is silent. A failing ``held`` counts as held: the node is going, and
    the channel ends with it.

    Closing drops the stream (:meth:`Demux.discard`): its reader is gone.
    """

    def __init__(self, demux: Demux, held: Held) -> None:
        self._demux = demux
        self._held = held

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._demux.ready(STDOUT):  # no wait to bound: no timer to set
            return await self._demux.receive(STDOUT, max_bytes)
        quiet, unheld = _QUIET_CHECK_FIRST, 0
        while True:
            with anyio.move_on_after(quiet):
                return await self._demux.receive(STDOUT, max_bytes)
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
                self._demux.end(STDOUT)
            quiet = _QUIET_CONFIRM

    async def aclose(self) -> None:
        self._demux.discard(STDOUT)
