"""What a provider takes from its environment is made explicit in the settings a run stores,
so that a control plane in another environment (a reconcile elsewhere) looks in the same place."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeprov import get_provider

KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: ctx-a
contexts:
- name: ctx-a
  context: {cluster: c, user: u}
- name: ctx-b
  context: {cluster: c, user: u}
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
"""


def test_docker_stores_the_engine_it_was_given_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/elsewhere/docker.sock")
    assert get_provider("docker").resolved_settings().storable() == {
        "docker_host": "unix:///run/elsewhere/docker.sock"
    }
    monkeypatch.delenv("DOCKER_HOST")
    assert get_provider("docker").resolved_settings().storable() == {
        "docker_host": "unix:///var/run/docker.sock"
    }
    given = get_provider("docker", docker_host="tcp://127.0.0.1:2375")
    assert given.resolved_settings().storable() == {"docker_host": "tcp://127.0.0.1:2375"}


def test_kubernetes_stores_the_kubeconfig_and_context_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config").write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    resolved = get_provider("kubernetes").resolved_settings().storable()
    assert (resolved["kubeconfig"], resolved["context"]) == (str(tmp_path / "config"), "ctx-a")
    chosen = get_provider("kubernetes", context="ctx-b").resolved_settings().storable()
    assert chosen["context"] == "ctx-b"


def test_local_stores_the_root_it_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert get_provider("local").resolved_settings().storable() == {"root": str(tmp_path / "nodeprov")}
