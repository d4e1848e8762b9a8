"""The agents' offline scripted models (a run's model :data:`~nodeprov.scripted.SCRIPTED`),
each up while the control plane drives its run: a run taken over elsewhere finds it gone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..agents.registry import on_model
from ..errors import ConfigError
from ..scripted import SCRIPTED
from .run import Run

__all__ = ["OfflineModels"]


class OfflineModels:
    """Scripted models held for runs. Enter it before the runs' task group and leave it
    after: each model outlives its run."""

    def __init__(self) -> None:
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> OfflineModels:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None  # noqa: S101 - narrows a type: entered
        self._tg.cancel_scope.cancel()  # the runs are over: nothing asks a model any more
        return await self._tg.__aexit__(kind, error, tb)

    async def start(
        self,
        model: str | None,
        agent: str,
        prompt: str,
        options: Mapping[str, Any],
        start: Callable[[dict[str, Any]], Awaitable[Run]],
    ) -> Run:
        """``start(options)``, on ``agent``'s offline model playing its demo for ``prompt``
        when ``model`` is :data:`~nodeprov.scripted.SCRIPTED` (its options laid over, see
        :func:`~nodeprov.agents.registry.on_model`), up until the run ends.

        Raises:
            ConfigError: the agent has no offline model; and what ``start`` raises.
        """
        if model != SCRIPTED:
            return await start(dict(options))
        if self._tg is None:
            raise ConfigError("use the Orchestrator as an async context manager")

        async def hold(*, task_status: TaskStatus[Run]) -> None:
            async with on_model(model, agent, prompt, options) as on_it:
                run = await start(on_it)
                task_status.started(run)
                await run.wait()

        run: Run = await self._tg.start(hold)
        return run
