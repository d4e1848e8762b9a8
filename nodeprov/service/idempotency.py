"""``Idempotency-Key`` on creating a run or a node: a client that retries (after a timeout, a
dropped connection, a replica that died) gets the same run or node, never a second one.

The key is kept in the store with a digest of the request, the id chosen for what it
creates, and the replica doing the work. A retry of a finished creation gets its answer
again; one that arrives while the first is still at work, on any replica, gets 409 (try
again); one whose first attempt's replica died takes the work over with the same id, so a
node half made by the dead replica is adopted, not made twice. Keys are forgotten after the
service's ``idempotency_ttl``. The same key with another request is refused (422)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..runs.lease import owner_lives
from ..store import IdempotencyRecord, Store
from .auth import Principal
from .problems import ServiceError

__all__ = ["Claim", "claim_key", "fingerprint"]

_MAX_KEY = 255


def fingerprint(kind: str, body: BaseModel) -> str:
    """A digest of what a request asks (its kind and body)."""
    canonical = json.dumps([kind, body.model_dump(mode="json")], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Claim:
    """What a request with a key does: ``record.resource_id`` is the id to create under;
    ``done`` when the first request finished (its answer is ``record.response``)."""

    record: IdempotencyRecord
    done: bool

    @property
    def resource_id(self) -> str:
        return self.record.resource_id

    def response(self) -> Any:
        return json.loads(self.record.response or "null")


async def claim_key(
    store: Store, principal: Principal, key: str, *, kind: str, print_: str, new_id: str, holder: str
) -> Claim:
    """Take ``key`` for a request (see the module).

    Raises:
        ServiceError: 400 for a key that is too long or not printable ASCII; 422 when the key was
            used with another request; 409 while the first request is at work.
        StoreError: the store failed.
    """
    if not key or len(key) > _MAX_KEY or not key.isascii() or not key.isprintable():
        raise ServiceError(
            400, "bad_idempotency_key", f"Idempotency-Key must be 1 to {_MAX_KEY} printable ASCII characters"
        )
    record, made = await store.idempotency.reserve(
        principal.id, key, kind=kind, fingerprint=print_, resource_id=new_id, holder=holder
    )
    if made:
        return Claim(record, done=False)
    if record.kind != kind or record.fingerprint != print_:
        raise ServiceError(
            422, "idempotency_key_reused", "this Idempotency-Key was used with another request"
        )
    if record.state == "done":
        return Claim(record, done=True)
    gone = record.holder != holder and await owner_lives(store, record.holder) is False
    if gone and await store.idempotency.take_over(principal.id, key, holder_was=record.holder, holder=holder):
        return Claim(record, done=False)  # its replica died: the work is ours, under the same id
    raise ServiceError(
        409,
        "in_progress",
        "a request with this Idempotency-Key is still at work; try again",
        {"Retry-After": "1"},
    )
