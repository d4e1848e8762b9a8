"""The EC2 provider: a node is an EC2 instance (boto3, each call in a worker thread),
reached over SSH with the SSH provider's machinery (:mod:`nodeprov_ssh`).

- Provision looks the node up by its ``nodeprov.node-id`` tag first (a control plane that
  died after RunInstances left an instance: it is adopted, never doubled), else launches
  one with the ``nodeprov.*`` tags on the instance and its volumes, a ClientToken derived
  from the node id, the given or a per-node key pair and security group, and a hard
  lifetime on the instance itself: shutdown behaviour ``terminate`` and user data that
  powers it off at the node's expiry, at every boot. It then waits for ``running`` and for
  SSH to let it in (with backoff, within ``ready_timeout``), and makes the node's directory
  there.
- Spawn and files go over SSH; the handle needs no SSH to exist (``attach``, ``destroy``).
- Suspend stops the instance (its disk stays, no compute is billed); wake starts it and
  waits for SSH again (its address may have changed).
- Destroy terminates every instance of the node, confirms the termination twice, then
  deletes the key pair and security group nodeprov made.

boto3's and asyncssh's exceptions never leave this package.
"""

from nodeprov_ec2.provider import Ec2Node, Ec2Provider, Ec2Settings

__all__ = ["Ec2Node", "Ec2Provider", "Ec2Settings"]
