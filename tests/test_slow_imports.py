"""An agent's slow imports (Claude's SDK, most of a second): choosing the agent and checking
its options and prompts import none of it; a run imports it in a thread beside the node's
provisioning, never on the control plane's event loop. Each check is a fresh interpreter,
where nothing is imported yet."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from nodeprov.testing import fake_agent_command

# Records the thread that first imports the SDK (a finder asked before the others).
_WATCH_IMPORTS = """
import sys, threading
importers = []

class Watch:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "claude_agent_sdk":
            importers.append(threading.current_thread().name)
        return None

sys.meta_path.insert(0, Watch)
"""


def _python(code: str) -> str:
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_choosing_claude_and_checking_its_prompt_imports_no_sdk() -> None:
    said = _python(
        _WATCH_IMPORTS
        + textwrap.dedent("""
            from nodeprov.agents.registry import get_agent, route_model
            agent = get_agent(route_model("claude-sonnet-4-5"), {"permission": "edit"})
            agent.prepare_prompt("hello")
            print(importers, "claude_agent_sdk" in sys.modules)
        """)
    )
    assert said == "[] False"


def test_a_run_imports_the_sdk_beside_its_event_loop(tmp_path: Path) -> None:
    steps = json.dumps([{"text": "done"}])
    said = _python(
        _WATCH_IMPORTS
        + textwrap.dedent(f"""
            import anyio
            from nodeprov.runs import Orchestrator
            from nodeprov.store import Store

            async def main() -> None:
                async with await Store.open("sqlite:///{tmp_path}/runs.db") as store, Orchestrator(
                    store
                ) as orchestrator:
                    options = {{"cli_path": {fake_agent_command(tmp_path)!r},
                               "env": {{"NODEPROV_FAKE_AGENT": {steps!r}}}}}
                    run = await orchestrator.start(
                        "go", provider="local", provider_settings={{"root": "{tmp_path}/nodes"}},
                        permission="edit",
                        options=options,
                    )
                    assert await run.wait() == "ok", run.error
                print(importers, threading.main_thread().name)

            anyio.run(main)
        """)
    )
    importers, loop_thread = said.rsplit(" ", 1)
    assert importers.startswith("['import nodeprov.agents.claude.session'"), said
    assert loop_thread not in importers


def test_the_service_starts_every_agents_slow_imports_as_it_starts(tmp_path: Path) -> None:
    said = _python(
        _WATCH_IMPORTS
        + textwrap.dedent(f"""
            import anyio
            from nodeprov.agents.registry import agent_class, imported
            from nodeprov.service.config import ServiceConfig
            from nodeprov.service.state import Service

            async def main() -> None:
                config = ServiceConfig(store="sqlite:///{tmp_path}/service.db")
                async with Service.running(config):
                    with anyio.fail_after(60):
                        await imported(agent_class("claude"))  # or imports it here, if nothing did
                print(importers)

            anyio.run(main)
        """)
    )
    assert said == "['import nodeprov.agents.claude.session']"
