"""Pause requests across processes: asking whichever control plane drives a run to pause it,
and serving the requests made of this one."""

from __future__ import annotations

import json
import logging
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING

from ..errors import NodeprovError, RunStateError
from ..store import new_id
from .run import Run, check_pause_kind
from .state import RunState

if TYPE_CHECKING:
    from .plane import ControlPlane

__all__ = ["PauseRequests"]

logger = logging.getLogger("nodeprov.runs")


class PauseRequests:
    """Pause requests in the store. Those for runs of ``lease``'s owner are served by pausing
    the drive ``live`` gives, each in a task ``spawn`` starts."""

    def __init__(self, plane: ControlPlane) -> None:
        self._store, self._lease = plane.store, plane.lease
        self._live = plane.live
        self._spawn = plane.spawn

    async def request(self, run_id: str, kind: str, reason: str, *, keep_node: bool | None) -> str:
        """See :meth:`Orchestrator.request_pause`.

        Raises:
            ConfigError: ``kind`` is not human, external or system.
            RunStateError: the run is not starting or running.
        """
        check_pause_kind(kind)  # checked here: the driving process would meet it too late
        request = json.dumps({"kind": kind, "reason": reason, "keep_node": keep_node, "id": new_id("pause")})
        if not await self._store.update_run(
            run_id, expect_states=(RunState.STARTING, RunState.RUNNING), pause_request=request
        ):
            raise RunStateError(f"run {run_id} is not running")
        return request

    async def serve(self) -> None:
        """Start serving the pending requests for the runs driven here.

        Raises:
            StoreError: the store failed.
        """
        for run_id, raw in await self._store.pause_requests(self._lease.owner):
            drive = self._live(run_id)
            if drive is None or drive.pause is not None or not drive.run.state.live:
                continue
            self._spawn(partial(self._serve, drive.run, raw))

    async def _serve(self, run: Run, raw: str) -> None:
        try:
            request = json.loads(raw)
            keep_node = request["keep_node"]
            await run.pause(
                request["kind"], request["reason"], keep_node=None if keep_node is None else bool(keep_node)
            )
        except (NodeprovError, ValueError, KeyError, TypeError) as error:  # over meanwhile, or garbled
            logger.info("pause request for run %s not served: %s", run.id, error)
            with suppress(NodeprovError):
                await self._store.clear_pause_request(run.id, raw)
