"""The local provider: a node is a directory on the control plane's own machine.

Every spawn starts with exactly the node's base environment plus what the spawn asks for.

On Linux each spawn runs under a small supervisor (:mod:`nodeprov_local._supervisor`), a
*child subreaper*: whatever the command starts stays below it, even a process that calls
``setsid``, double-forks or is run with ``nohup ... &`` by a tool shell of its own session.
Stopping signals every process below it; when the command exits, what it left running is
killed; if the control plane dies (even by SIGKILL), everything gets SIGTERM, then SIGKILL
after the node's ``term_grace``. Destroying the node ends every supervisor it ever started
(from any control-plane process: they are recorded in the node's directory) and removes
the directory. A cgroup per node would contain processes as well, but needs root or a
systemd delegation; a subreaper works for any user.

Nothing under the root is trusted: the root must be a directory of this user's that no one
else can write to (else :class:`~nodeprov.errors.ConfigError`); a node record counts only
if its node id is its directory's name; a recorded process is signalled only if it still
runs as this user and carries the node's marker (``NODEPROV_LOCAL_NODE=NODE_ID`` in its
``/proc/PID/environ``; the supervisor holds it, the command does not get it); nothing
outside the root is removed. File operations and working directories are confined to the
node's directory and its workdir.

Elsewhere a spawn is a plain child in its own session (its own process group): stopping
and destroy signal that group, and a process that leaves it is not contained.
"""

from nodeprov_local.process import LocalProcess
from nodeprov_local.provider import LocalNode, LocalProvider
from nodeprov_local.settings import LocalSettings

__all__ = ["LocalNode", "LocalProcess", "LocalProvider", "LocalSettings"]
