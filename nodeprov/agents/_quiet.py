"""The no-output limit of a turn, for agents whose messages come one by one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from ..errors import DeadlineError
from .messages import Message, Notice, ToolResult, ToolUse


async def quiet_bounded(
    messages: AsyncIterator[Message], limit: float | None, agent: str
) -> AsyncIterator[Message]:
    """``messages``, ended with :class:`DeadlineError` when ``limit`` seconds pass without
    one that is not a retry notice, unless a tool call is waiting for its result."""
    if limit is None:  # no cancel scope per message
        async for message in messages:
            yield message
        return
    running: set[str] = set()
    quiet_since = anyio.current_time()
    failure = ""
    while True:
        with anyio.move_on_after(quiet_since + limit - anyio.current_time()) as waiting:
            try:
                message = await anext(messages)
            except StopAsyncIteration:
                return
        if waiting.cancelled_caught:
            if running:
                quiet_since = anyio.current_time()
                continue
            said = f" (its model API: {failure})" if failure else ""
            raise DeadlineError(f"{agent} said nothing for {limit:g} s while waiting for its model{said}")
        if isinstance(message, Notice) and message.retry:
            failure = message.text
        else:
            quiet_since = anyio.current_time()
        if isinstance(message, ToolUse):
            running.add(message.id)
        elif isinstance(message, ToolResult):
            running.discard(message.tool_use_id)
        yield message
