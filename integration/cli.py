"""The CLI as a script calls it, with a provider's settings in NODEPROV_<PROVIDER>_<SETTING>
variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping

# `nodeprov providers` with a probe limit a loaded machine keeps (the default 10 s was not:
# a Codespaces probe through the real gh took longer beside another suite).
PROVIDERS = ("providers", "--probe-timeout", "120")


def settings_environment(provider: str, settings: Mapping[str, object]) -> dict[str, str]:
    """``settings`` as the CLI reads them from the environment (JSON where not a string)."""
    return {
        f"NODEPROV_{provider.upper()}_{key.upper()}": value if isinstance(value, str) else json.dumps(value)
        for key, value in settings.items()
        if value is not None
    }


def nodeprov_with(
    provider: str, settings: Mapping[str, object], *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``nodeprov ARGS`` with ``settings`` in the environment (``env`` instead of this
    process's environment, when given)."""
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **(os.environ if env is None else env),
            "NO_COLOR": "1",
            "COLUMNS": "200",
            **settings_environment(provider, settings),
        },
    )
