"""The Docker provider: a node is a labelled container, a process is an exec in it.

- Provision creates and starts a container from ``settings.image`` with an init process
  (docker-init reaps zombies), the ``nodeprov.*`` labels, and a keep-alive command that ends
  after the node's ``ttl``: the container then exits and the engine removes it
  (``auto_remove``), so the hard lifetime holds even if the control plane is gone.
- Spawn is an exec with stdin attached through the Engine API; stdout and stderr arrive as
  the engine's multiplexed frames and are kept apart. The exec runs through a one-line
  ``/bin/sh`` preamble that reports the process id *inside* the container, so terminate and
  kill signal that process group there (killing only the client side of an exec would leave
  it running), and so a missing command is a clean :class:`CommandNotFoundError`.
- Destroy removes the container with force; a container already gone is fine.

Every docker SDK call runs in a worker thread; the exec's data path is a socket driven by the
event loop. Docker and requests exceptions never leave this package.
"""

from nodeprov_docker.provider import DockerNode, DockerProvider
from nodeprov_docker.settings import DockerMount, DockerSettings

__all__ = ["DockerMount", "DockerNode", "DockerProvider", "DockerSettings"]
