"""The local provider: a node is a directory on the control plane's own machine.

Every spawn is a child process in a new session (its own process group), started with
exactly the node's base environment plus what the spawn asks for. Stopping signals the
whole group, so what the process started goes with it; destroying the node kills every
group it ever started and removes its directory.
"""

from nodeprov_local.provider import LocalNode, LocalProcess, LocalProvider, LocalSettings

__all__ = ["LocalNode", "LocalProcess", "LocalProvider", "LocalSettings"]
