"""The heap of a process that drives runs for long (``nodeprov run`` and its kin, ``attach``,
``serve``)."""

from __future__ import annotations

import gc

__all__ = ["freeze_start_up"]


def freeze_start_up() -> None:
    """Keep what the process made to start (its modules, the command's set-up) out of the
    cyclic garbage collector's reach for the process's life. A full collection walks every
    object with the event loop held: on a control plane's start-up heap, 50 to 80 ms that every
    run's relay waits, and one comes whenever enough is allocated (a checkpoint's capture of
    a large workspace is enough; docs/benchmarks.md, Checkpoints). Collects first, so that no
    garbage is kept."""
    gc.collect()
    gc.freeze()
