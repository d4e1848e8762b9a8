"""The model name of every agent's built-in offline scripted model (see
:meth:`~nodeprov.agents.Agent.offline`): what ``nodeprov run`` uses unless given a model. Apart,
so that a command's options can name it without loading the agents."""

__all__ = ["SCRIPTED"]

SCRIPTED = "scripted"
