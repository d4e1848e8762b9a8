"""The SSH provider: a node is a directory on a host reached over SSH (asyncssh), a process
is a session on one connection shared by the node's spawns and made again when it drops.

- Provision makes ``ROOT/NODE_ID`` on the host (``home``, ``work``, ``node.json`` with the
  labels) and starts a watchdog there that destroys the node when its ``ttl`` is over, even
  if no control plane is left; tools are copied to the host once per content.
- Spawn sends ``exec /bin/sh -c PREAMBLE ...`` with every argument single-quoted (see
  :mod:`nodeprov_ssh.remote` and :mod:`nodeprov.exec.preamble`); the environment goes over the
  session's stdin, never on a command line. The process leads its own process group (sshd
  makes each session one), recorded in the node's directory.
- Stopping: OpenSSH ignores signal requests for root logins, and closing a channel does not
  end a process started without a pty, so terminate and kill signal the process group
  through a second session; destroy ends every recorded group, then removes the directory.
- Host keys are checked strictly (known_hosts, or a pinned ``host_key``); keepalives notice
  a dead link within ``keepalive_interval x (keepalive_count_max + 1)`` seconds.

asyncssh's exceptions never leave this package.
"""

from nodeprov_ssh.command import CommandLink
from nodeprov_ssh.link import Link, SshHostKeyError, SshLoginSettings, SshSessionSettings, Tunnel
from nodeprov_ssh.machine import MachineNode
from nodeprov_ssh.node import NODE_MARKER, SshNode
from nodeprov_ssh.process import SshProcess
from nodeprov_ssh.provider import SshNodeFields, SshNodes, SshNodeSettings, SshProvider, SshSettings

__all__ = [
    "NODE_MARKER",
    "CommandLink",
    "Link",
    "MachineNode",
    "SshHostKeyError",
    "SshLoginSettings",
    "SshNode",
    "SshNodeFields",
    "SshNodeSettings",
    "SshNodes",
    "SshProcess",
    "SshProvider",
    "SshSessionSettings",
    "SshSettings",
    "Tunnel",
]
