"""The ``opencode`` agent: OpenCode (npm ``opencode-ai``) on a node, ``opencode run --format json``.

Each turn is one ``opencode run`` process, started through the node's spawn function with
its prompt on stdin and its images attached as files (``--file``, written to the node);
``--session ID`` continues a session. Its JSON events become the one message model:

==========================  ===================================================
OpenCode event              message
==========================  ===================================================
(the first event)           :class:`Notice` ``session`` with ``session_id`` (its
                            ``sessionID``; OpenCode announces no session)
``step_start``              :class:`Notice` (the model answered: a step began)
``text``                    :class:`AgentText` (said once its part is complete)
``reasoning``               :class:`Thinking` (``--thinking``)
``tool_use``                :class:`ToolUse` (``bash`` with ``{"command"}``,
                            ``edit``, ``read``...) and its :class:`ToolResult`
                            at once: OpenCode says a tool call only when it is
                            over. An error for a failed call, a non-zero exit
                            code, or a tool the permission denies (OpenCode's
                            ``invalid`` tool)
``step_finish``             :class:`Notice` with the reason (``stop``,
                            ``tool-calls``); its tokens and cost go to the
                            result
``error``                   :class:`ErrorMessage` (the model API's message, e.g.
                            a 4xx), and the turn's result is an error
(exit 0 after a step)       :class:`Result` (``usage`` summed over the steps;
                            ``cost_usd`` if OpenCode priced them; ``text``: the
                            last text)
other                       :class:`Notice` of its type
==========================  ===================================================

Each workspace has its own home on the node (``$HOME/.nodeprov/opencode/KEY``, 0700):
OpenCode's data (the sessions' SQLite database), config, state, cache and temporary files
go there (``XDG_*_HOME``, ``TMPDIR``), so that two workspaces never see each other's
sessions and nothing comes from the node's ``$HOME``. The session state is what
``opencode export`` gives (its messages, images inline), archived after every turn and
before the node goes, and given to a fresh node with ``opencode import``.

OpenCode has no structured output in ``opencode run`` (``output_schema`` is refused), and
no interrupt: it dies on SIGINT or SIGTERM at once (see :meth:`OpenCodeSession.interrupt`).
"""

from .agent import OpenCodeAgent, OpenCodeOptions, OpenCodeProvider, OpenCodeSession, ProviderModel

__all__ = ["OpenCodeAgent", "OpenCodeOptions", "OpenCodeProvider", "OpenCodeSession", "ProviderModel"]
