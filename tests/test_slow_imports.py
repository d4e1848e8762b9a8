"""Slow imports: choosing the claude agent, checking its options and prompts, and running it
import no Claude Agent SDK (most of a second); an agent that declares slow imports has them
imported in threads beside the node's provisioning, never on the control plane's event loop.
Each check is a fresh interpreter, where nothing is imported yet."""

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


def test_a_claude_run_imports_no_sdk(tmp_path: Path) -> None:
    """The Claude Agent SDK (most of a second to import, its mcp) is for the SDK's users: a
    run drives the CLI without it."""
    steps = json.dumps([{"text": "done"}])
    said = _python(
        textwrap.dedent(f"""
            import sys
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
                print("claude_agent_sdk" in sys.modules, "mcp" in sys.modules)

            anyio.run(main)
        """)
    )
    assert said == "False False"


def test_an_agents_slow_imports_run_in_threads_of_their_own_never_on_the_event_loop() -> None:
    """An agent that declares slow imports (a plugin's SDK, say) has them started in a thread
    as soon as its agent is known, and a session waits for them off the event loop."""
    said = _python(
        textwrap.dedent("""
            import sys, threading
            import anyio
            from nodeprov.agents import Agent
            from nodeprov.agents.registry import import_soon, imported

            importers = []

            class Watch:
                @staticmethod
                def find_spec(name, path=None, target=None):
                    if name in ("xml.dom.minidom", "wave"):
                        importers.append(threading.current_thread().name)
                    return None

            sys.meta_path.insert(0, Watch)

            class Slow(Agent):  # only what the registry reads
                slow_imports = ("xml.dom.minidom",)

            class Slower(Agent):
                slow_imports = ("wave",)

            async def main() -> None:
                import_soon(Slow)
                await imported(Slow)
                await imported(Slower)  # never started: imported in a worker thread
                print(importers, "xml.dom.minidom" in sys.modules and "wave" in sys.modules)

            anyio.run(main)
        """)
    )
    assert said.startswith("['import xml.dom.minidom', "), said
    assert "MainThread" not in said, said
    assert said.endswith("True"), said
