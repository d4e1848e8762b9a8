"""What a run's agent is waiting for, so that a run ended by a limit can say why."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from ..agents import Message, Notice, Result, ToolResult, ToolUse
from ..errors import DeadlineError

__all__ = ["Progress", "progress_bounded", "result_error"]


class Progress:
    """What the agent is waiting for, and how the model API has been failing, so that a run
    that times out can say why."""

    def __init__(self) -> None:
        self.tool: str | None = None  # the tool the agent waits on, else the model
        self.retries = 0
        self.failure = ""

    def saw(self, message: Message) -> bool:
        """Note ``message``; return whether it is progress (model-API retry notices are not)."""
        if isinstance(message, Notice) and message.retry:
            self.retries += 1
            self.failure = message.text
            return False
        if isinstance(message, ToolUse):
            self.tool = message.name
        elif isinstance(message, ToolResult | Result):
            self.tool = None
        return True

    def waiting(self) -> str:
        """What the agent waits for, in words."""
        if self.tool is not None:
            return f"waiting for its {self.tool} tool"
        if self.retries:
            return f"waiting for the model API, which failed {self.retries} times: {self.failure}"
        return "waiting for the model API"

    def cause(self) -> str:
        """The model API's failures, as a parenthesis to add to an error; empty if none."""
        return f" (the model API failed {self.retries} times: {self.failure})" if self.retries else ""


async def progress_bounded(
    messages: AsyncIterator[Message], idle_timeout: float | None, progress: Progress
) -> AsyncIterator[Message]:
    """``messages``, noted in ``progress``, ended with :class:`DeadlineError` when none but
    API-retry notices come for ``idle_timeout`` seconds; the error says what the agent was
    waiting for."""
    if idle_timeout is None:  # no cancel scope per message
        async for message in messages:
            progress.saw(message)
            yield message
        return
    progress_at = anyio.current_time()
    while True:
        with anyio.move_on_after(progress_at + idle_timeout - anyio.current_time()) as waiting:
            try:
                message = await anext(messages)
            except StopAsyncIteration:
                return
        if waiting.cancelled_caught:
            raise DeadlineError(f"the agent made no progress for {idle_timeout:g} s ({progress.waiting()})")
        if progress.saw(message):
            progress_at = anyio.current_time()
        yield message


def result_error(result: Result | None, progress: Progress) -> str:
    """Why the agent's result is a failure, in the agent's own words where it gave them."""
    if result is None:
        return "the agent ended without a result" + progress.cause()
    return (result.text or "the agent ended with an error") + progress.cause()
