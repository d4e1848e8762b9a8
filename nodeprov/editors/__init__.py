"""nodeprov as an ACP agent for editors: ``nodeprov acp`` speaks the Agent Client Protocol
on its own standard input and output, so an editor that runs agents over ACP (Zed,
JetBrains' AI Assistant, Neovim's plugins) runs any of nodeprov's agents on any node.

An editor session is one run (its id the session's): its first prompt starts the run on a
node of the provider (or pool) the command names, each later prompt resumes it, on the same
node and in the same agent session, for one turn (``keep_node`` and ``pause_after_turn``,
see :mod:`nodeprov.runs`). The agent's messages are told as ``session/update``s while its
turn runs; its file and terminal work is done on the node. A ``session/cancel`` pauses the
turn (the prompt's answer says ``cancelled``) and the next prompt resumes it. The run is in
the store like any other: ``nodeprov logs``, ``nodeprov attach`` and the service's events
see it, and a ``session/load`` of its id (by this editor or another, later) replays its
turns and goes on with it. When the editor leaves, a turn under way is paused and the nodes
kept for the next turns are destroyed.

:mod:`.server` serves the protocol, :mod:`.updates` translates, :mod:`.stdio` is the pipe.
"""

from .server import EditorServer
from .stdio import StdioPipes

__all__ = ["EditorServer", "StdioPipes"]
