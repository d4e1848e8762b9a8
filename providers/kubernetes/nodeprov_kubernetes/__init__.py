"""The Kubernetes provider: a node is a pod, a process runs through the API server's exec
channel (kubernetes-asyncio's websocket), so nodes anywhere in a cluster are reached
without opening a port.

- Provision creates one pod per node (``nodeprov-NODE_ID``): labelled with the node and
  session ids and ``app.kubernetes.io/managed-by=nodeprov``, the owner (or lease) and the
  expiry in annotations (label values cannot hold them), ``activeDeadlineSeconds`` from the
  node's ``ttl`` so the cluster itself ends a pod whose control plane is gone. It waits for
  ``Ready`` and fails early and clearly when the pod cannot be scheduled (after
  ``unschedulable_timeout``) or its image cannot be pulled. The workdir is an emptyDir;
  tools are copied in (or mounted from the cluster node with ``tools_host_path``). The pod
  shares its process namespace, so the pause process reaps what processes leave behind.
- Spawn execs ``/bin/sh -c PREAMBLE ...`` (see :mod:`nodeprov.exec.preamble`): the environment
  goes over stdin, never into the pod or a command line. ``v5.channel.k8s.io`` is offered
  first (it can end stdin); on ``v4.channel.k8s.io`` stdin goes through a relay ended by a
  second exec once every byte has passed (see :mod:`nodeprov_kubernetes.exec`). The process
  leads its process group, which terminate and kill signal through a second exec.
- Files go through exec (``sh`` and ``cat``, written beside the target and renamed over it).
- Destroy deletes the pod (``termination_grace`` seconds) and waits until the API server has
  let it go, the kubelet having ended its processes. ``gc`` finds pods by label, their
  owner and expiry in annotations.

kubernetes-asyncio's and aiohttp's exceptions never leave this package. It runs on asyncio.
"""

from nodeprov_kubernetes.exec import PodProcess
from nodeprov_kubernetes.node import KubernetesNode
from nodeprov_kubernetes.provider import KubernetesProvider
from nodeprov_kubernetes.settings import KubernetesSettings, Toleration

__all__ = ["KubernetesNode", "KubernetesProvider", "KubernetesSettings", "PodProcess", "Toleration"]
