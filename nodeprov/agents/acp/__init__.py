"""The Agent Client Protocol (ACP): JSON-RPC 2.0 between a client (nodeprov, or an editor)
and a coding agent, one JSON object per line on the agent's stdin and stdout, which is what a
node's exec channel carries. :mod:`~nodeprov.agents.acp.rpc` speaks it over a spawned process.
"""

__all__: list[str] = []
