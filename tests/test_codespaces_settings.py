"""The Codespaces provider's pure parts: settings, display names, gh's failures as
nodeprov's errors (no gh, no server)."""

from __future__ import annotations

import pytest

from nodeprov import NodeConfig, get_provider
from nodeprov.errors import ConfigError, NodeGoneError, ProviderError
from nodeprov_codespaces.provider import display_name, gh_environment, gh_error


def test_settings_need_a_repository_and_a_machine_and_forbid_the_unknown() -> None:
    with pytest.raises(ConfigError, match="machine"):
        get_provider("codespaces", repo="octo-org/hello")
    with pytest.raises(ConfigError, match="repo"):
        get_provider("codespaces", repo="not a repository", machine="basicLinux32gb")
    with pytest.raises(ConfigError, match="host_key"):
        get_provider("codespaces", repo="o/r", machine="m", host_key="ssh-ed25519 AAAA")  # not an SSH host
    with pytest.raises(ConfigError, match="idle_timeout_minutes"):
        get_provider("codespaces", repo="o/r", machine="m", idle_timeout_minutes=100000)


def test_a_display_name_holds_the_node_id_and_the_provisions_mark_within_githubs_limit() -> None:
    config = NodeConfig(node_id="np-0123456789ab")
    assert display_name(config) == f"nodeprov-np-0123456789ab.{config.provision_mark[:8]}"
    assert display_name(config) != display_name(NodeConfig(node_id=config.node_id))  # another provision
    assert len(display_name(NodeConfig(node_id="n" * 30))) == 48
    with pytest.raises(ConfigError, match="too long"):
        display_name(NodeConfig(node_id="n" * 31))


@pytest.mark.parametrize(
    ("code", "stderr", "error"),
    [
        (4, "To get started with GitHub CLI, please run:  gh auth login -s codespace", ConfigError),
        (
            1,
            "getting full codespace details: HTTP 404: Not Found (https://api.github.com/...)",
            NodeGoneError,
        ),
        (1, "error creating codespace: HTTP 401: Bad credentials (https://...)", ConfigError),
        (1, "error creating codespace: HTTP 403: Must have the codespace scope (https://...)", ConfigError),
        (1, "error creating codespace: HTTP 422: Validation Failed (https://...)", ConfigError),
        (1, "error getting machine type: there is no such machine for the repository: x", ConfigError),
        (1, "error creating codespace: HTTP 503: Service Unavailable (https://...)", ProviderError),
        (1, "", ProviderError),
    ],
)
def test_gh_failures_map_to_nodeprovs_errors(code: int, stderr: str, error: type[Exception]) -> None:
    mapped = gh_error("codespace create", code, stderr)
    assert type(mapped) is error
    assert (stderr or f"exit status {code}") in str(mapped)


def test_the_token_is_given_to_gh_in_its_environment_only() -> None:
    provider = get_provider("codespaces", repo="o/r", machine="m", token="ghp_secret", api_url="http://x/")
    env = gh_environment(provider.settings)
    assert (env["GH_TOKEN"], env["GH_ENTERPRISE_TOKEN"], env["GITHUB_API_URL"]) == (
        "ghp_secret",
        "ghp_secret",
        "http://x/",
    )
    assert env["GH_PROMPT_DISABLED"] == "1"
    assert "ghp_secret" not in repr(provider.settings)  # a secret field
