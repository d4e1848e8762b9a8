"""The Agent Client Protocol (ACP): JSON-RPC 2.0 between a client (nodeprov, or an editor)
and a coding agent, one JSON object per line on the agent's stdin and stdout, which is what a
node's exec channel carries.

:class:`AcpAgent` is what every agent that speaks it shares; :class:`ConfiguredAcpAgent`
(registered as ``acp``) is any of them, named by its options. A session
(:mod:`~nodeprov.agents.acp.session`) speaks JSON-RPC (:mod:`~nodeprov.agents.acp.rpc`),
relays the agent's updates as nodeprov's messages (:mod:`~nodeprov.agents.acp.updates`) and
serves the agent's requests on the node by the run's permission
(:mod:`~nodeprov.agents.acp.client`).
"""

from .agent import AcpAgent, AcpOptions, ConfiguredAcpAgent, ConfiguredAcpOptions
from .session import AcpSession

__all__ = ["AcpAgent", "AcpOptions", "AcpSession", "ConfiguredAcpAgent", "ConfiguredAcpOptions"]
