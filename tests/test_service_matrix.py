"""The authorization matrix of ``nodeprov serve`` (a real process), generated from its OpenAPI
document: every operation x every caller (no token; team-a's ``read``, ``runs`` and ``nodes``
tokens; an ``admin``) x the thing it names (team-a's own, team-b's, none that exists), each
with the status it must get. ``RULES`` says, per operation, the scope it needs and what it
names; an operation of the document without a rule fails the test, so does a rule without an
operation.

Expected: no token, 401; a scope that does not allow it, 403 (before anything is looked up:
a refusal never confirms an id); team-b's or a missing thing, 404; team-a's own, anything
but 401, 403 and 404 (the request got in: 2xx, or 409/422 for a run in the wrong state). An
admin reaches team-b's as its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeprov.store import Store
from tests.serving import Served, fake_run, serving
from tests.test_service_tenants import until_state

pytestmark = pytest.mark.anyio

PUBLIC = {("GET", "/healthz"), ("GET", "/readyz")}
CALLERS = ("none", "read", "runs", "nodes", "admin")
SCOPES_OF = {"read": {"read"}, "runs": {"read", "runs"}, "nodes": {"read", "nodes"}, "admin": {"*"}}


@dataclass(frozen=True)
class Rule:
    """An operation's ``scope``, and the kind of thing its path names (``None``: nothing a
    tenant owns); ``body``/``query``: what a request sends; ``spends``: it uses its thing up
    (each allowed caller gets a fresh one)."""

    scope: str
    names: str | None = None
    body: Any = None
    query: str = ""
    spends: bool = False


RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/metrics"): Rule("admin"),
    ("GET", "/v1/audit"): Rule("admin"),
    ("GET", "/v1/agents"): Rule("read"),
    ("GET", "/v1/agents/{name}"): Rule("read", "agent"),
    ("GET", "/v1/providers"): Rule("read"),
    ("GET", "/v1/providers/{name}"): Rule("read", "provider"),
    ("POST", "/v1/nodes"): Rule("nodes", body={"provider": "local"}),
    ("GET", "/v1/nodes"): Rule("read"),
    ("GET", "/v1/nodes/{node_id}"): Rule("read", "node"),
    ("DELETE", "/v1/nodes/{node_id}"): Rule("nodes", "node", spends=True),
    ("GET", "/v1/nodes/{node_id}/files"): Rule("nodes", "node", query="?path=f.txt"),
    ("PUT", "/v1/nodes/{node_id}/files"): Rule("nodes", "node", query="?path=g.txt"),
    ("POST", "/v1/nodes/{node_id}/exec"): Rule("nodes", "node", body={"command": ["true"]}),
    ("POST", "/v1/runs"): Rule("runs", body="run"),
    ("GET", "/v1/runs"): Rule("read"),
    ("GET", "/v1/runs/{run_id}"): Rule("read", "run"),
    ("POST", "/v1/runs/{run_id}/pause"): Rule("runs", "run", body={"wait": 0}),
    ("POST", "/v1/runs/{run_id}/resume"): Rule("runs", "run", body={"message": "again"}),
    ("GET", "/v1/runs/{run_id}/events"): Rule("read", "run", query="?follow=false"),
    ("GET", "/v1/runs/{run_id}/checkpoints"): Rule("read", "run"),
    ("POST", "/v1/runs/{run_id}/checkpoints"): Rule("runs", "run"),
    ("GET", "/v1/runs/{run_id}/diff"): Rule("read", "run", query="?from=ck-a&to=ck-b"),
    ("POST", "/v1/runs/{run_id}/fork"): Rule("runs", "run", body={"message": "again"}),
    ("POST", "/v1/runs/{run_id}/rewind"): Rule("runs", "run", body={"checkpoint": "ck-a"}),
    ("POST", "/v1/pools"): Rule("nodes", body="pool"),
    ("GET", "/v1/pools"): Rule("read"),
    ("GET", "/v1/pools/{name}"): Rule("read", "pool"),
    ("DELETE", "/v1/pools/{name}"): Rule("nodes", "pool", query="?wait=0", spends=True),
    ("GET", "/v1/sessions"): Rule("read"),
    ("GET", "/v1/workspaces"): Rule("read"),
    ("GET", "/v1/workspaces/{workspace}"): Rule("read", "workspace"),
}


class Things:
    """Team-a's and team-b's things, made through the API with each team's token."""

    def __init__(self, served: Served, tmp_path: Path, secrets: dict[str, str]) -> None:
        self.served, self.tmp_path, self.secrets = served, tmp_path, secrets
        self.made: dict[tuple[str, str], str] = {}
        self.count = 0

    async def make(self, kind: str, team: str) -> str:
        """A new thing of ``kind`` of ``team``'s: its id (or name, as that team knows it)."""
        async with self.served.client(self.secrets[f"{team}-all"]) as client:
            if kind == "node":
                made = await client.post("/v1/nodes", json={"provider": "local"})
                assert made.status_code == 201, made.text
                return str(made.json()["node_id"])
            if kind == "pool":
                self.count += 1
                name = f"{team}pool{self.count}"
                made = await client.post("/v1/pools", json={"name": name, "provider": "local", "size": 0})
                assert made.status_code == 201, made.text
                return name
            assert kind in ("run", "workspace")
            made = await client.post("/v1/runs", json=fake_run(self.tmp_path, [], workspace=f"{team}ws"))
            assert made.status_code == 201, made.text
            run_id = str(made.json()["id"])
            await until_state(self.served, self.secrets[f"{team}-all"], run_id, "finished")
            return run_id if kind == "run" else f"{team}ws"

    async def get(self, kind: str, team: str, *, fresh: bool) -> str:
        if fresh:  # to be used up: never the one the other cases share
            return await self.make(kind, team)
        if (kind, team) not in self.made:
            self.made[kind, team] = await self.make(kind, team)
        return self.made[kind, team]


def expected(rule: Rule, caller: str, owner: str) -> Callable[[int], bool]:
    if caller == "none":
        return lambda status: status == 401
    if rule.scope not in SCOPES_OF[caller] and "*" not in SCOPES_OF[caller]:
        return lambda status: status == 403
    if owner == "missing" or (owner == "team-b" and caller != "admin"):
        return lambda status: status == 404
    return lambda status: status not in (401, 403, 404)


async def path_of(things: Things, rule: Rule, template: str, caller: str, owner: str) -> str:
    """``template`` with its parameter naming ``owner``'s thing, as ``caller`` names it."""
    if rule.names is None:
        return template
    fixed = {"agent": "claude", "provider": "local"}
    if rule.names in fixed:
        value = fixed[rule.names] if owner != "missing" else "no-such-one"
    elif owner == "missing":
        missing = {"node": "np-0000000000000000", "run": "run_missing", "pool": "nopool"}
        value = missing.get(rule.names, "nows")
    else:
        team = "a" if owner == "team-a" else "b"
        allowed = rule.scope in SCOPES_OF.get(caller, set()) or caller == "admin"
        value = await things.get(rule.names, team, fresh=rule.spends and allowed and caller != "none")
        if caller == "admin":  # an admin names a tenant's pools and workspaces in full
            value = {"pool": f"{owner}.{value}", "workspace": f"{owner}:{value}"}.get(rule.names, value)
    start = template.index("{")
    return template[:start] + value + template[template.index("}") + 1 :]


async def test_every_operation_x_scope_x_owner_gets_its_status(tmp_path: Path) -> None:
    async with serving(tmp_path) as served:
        async with await Store.open(served.store) as store:
            secrets = {
                scope: (await store.tokens.create(scope, [scope], "team-a"))[1]
                for scope in ("read", "runs", "nodes")
            }
            secrets["admin"] = (await store.tokens.create("ops", ["admin"]))[1]
            for team in ("a", "b"):
                secrets[f"{team}-all"] = (
                    await store.tokens.create(team, ["read", "runs", "nodes"], f"team-{team}")
                )[1]
        async with served.client(secrets["admin"]) as admin:
            document = (await admin.get("/openapi.json")).json()
        operations = {
            (method.upper(), path) for path, item in document["paths"].items() for method in item
        } - PUBLIC
        assert operations - RULES.keys() == set(), "operations without a rule: add them to RULES"
        assert RULES.keys() - operations == set(), "rules of operations the service no longer has"

        things = Things(served, tmp_path, secrets)
        for team in ("a", "b"):  # the file the downloads read
            node = await things.get("node", team, fresh=False)
            async with served.client(secrets[f"{team}-all"]) as client:
                written = await client.put(f"/v1/nodes/{node}/files?path=f.txt", content=b"x")
                assert written.status_code == 201

        wrong: list[str] = []
        cases = 0
        for (method, template), rule in sorted(RULES.items()):
            owners = (
                ("team-a", "missing")  # an agent or provider: there or not, nobody's
                if rule.names in ("agent", "provider")
                else ("team-a", "team-b", "missing")
                if rule.names
                else ("n/a",)
            )
            for caller in CALLERS:
                for owner in owners:
                    path = await path_of(things, rule, template, caller, owner) + rule.query
                    status = await _send(served, secrets.get(caller), method, path, _body(rule, tmp_path))
                    cases += 1
                    if not expected(rule, caller, owner)(status):
                        wrong.append(f"{method} {template} as {caller} on {owner}'s: {status}")
        print(f"{len(RULES)} operations, {cases} cases")
        assert wrong == [], "\n".join(wrong)


def _body(rule: Rule, tmp_path: Path) -> Any:
    if rule.body == "run":
        return fake_run(tmp_path, [])
    if rule.body == "pool":
        return {"name": "matrixpool", "provider": "local", "size": 0}
    return rule.body


async def _send(served: Served, secret: str | None, method: str, path: str, body: Any) -> int:
    async with served.client(secret) as client:
        if method == "PUT":
            return (await client.put(path, content=b"written")).status_code
        return (await client.request(method, path, json=body)).status_code
