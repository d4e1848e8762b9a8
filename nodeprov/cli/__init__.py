"""The ``nodeprov`` command line: a thin layer over the library (typer + rich).

:mod:`.app` holds the app, its table of commands, error handling and shared options; :mod:`.runs`,
:mod:`.nodes`, :mod:`.agents`, :mod:`.attach`, :mod:`.tokens`, :mod:`.audit`, :mod:`.pools`, :mod:`.serve`
and :mod:`.store` the commands (each module imported when one of its commands is called, see
``COMMANDS``); :mod:`.render` and :mod:`.events` what they print; :mod:`.drive` how ``run``,
``resume``, ``fork`` and ``rewind`` drive a run.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import suppress

from .app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``nodeprov`` script.

    A finished command leaves without the interpreter's teardown of every module, which
    takes longer (0.2 s once the SDK is loaded) than a quick command's whole work: by then
    its store, nodes and files are closed, and only the standard streams need flushing.
    """
    try:
        app()
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    with suppress(OSError):  # a reader that left (`| head`) has been answered already
        sys.stdout.flush()
    with suppress(OSError):
        sys.stderr.flush()
    os._exit(code or 0)
