"""Looking up a node's containers in tests."""

from __future__ import annotations

import docker

from nodeprov import LABEL_NODE_ID


def node_containers(client: docker.DockerClient, *node_ids: str) -> list[str]:
    """Names and states of the containers of ``node_ids``, running or not.

    One list call (``containers.list`` would inspect each container afterwards, racing with
    the engine removing it).
    """
    found = []
    for node_id in node_ids:
        for container in client.api.containers(all=True, filters={"label": f"{LABEL_NODE_ID}={node_id}"}):
            found.append(f"{container['Names'][0].lstrip('/')} ({container['State']})")
    return found
