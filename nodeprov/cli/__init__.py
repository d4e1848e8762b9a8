"""The ``nodeprov`` command line: a thin layer over the library (typer + rich).

:mod:`.app` holds the app, error handling and shared options; :mod:`.runs` and
:mod:`.nodes` the commands; :mod:`.render` what they print.
"""

from __future__ import annotations

from . import nodes, runs
from .app import app

__all__ = ["app", "main"]

# Importing the command modules registers their commands on the app.
del nodes, runs


def main() -> None:
    """Entry point of the ``nodeprov`` script."""
    app()
