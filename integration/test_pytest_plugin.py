"""The fixtures the pytest plugin gives users, used the way the README shows."""

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions, query

from nodeprov import NodeHandle
from nodeprov.agents.claude import NodeTransport, bundled_cli_path
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.pytest_plugin import require_engine


@pytest.mark.anyio
async def test_readme_example(scripted_model: ScriptedModel, local_node: NodeHandle) -> None:
    require_engine("the Claude Code CLI", bundled_cli_path() is not None, "install claude-agent-sdk")
    scripted_model.extend([ToolUse("Bash", {"command": "echo hi > out.txt"}), Text("done")])
    options = ClaudeAgentOptions(
        env=scripted_model.agent_env(), permission_mode="bypassPermissions", cli_path=bundled_cli_path()
    )
    async for _ in query(prompt="go", options=options, transport=NodeTransport.for_node(local_node, options)):
        pass
    assert scripted_model.agent_requests[1].messages[-1]["content"][0]["type"] == "tool_result"
    assert await (anyio.Path(local_node.workdir) / "out.txt").read_text() == "hi\n"
