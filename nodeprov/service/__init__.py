"""``nodeprov serve``: the library as an HTTP service, for control planes in any language.

FastAPI on uvicorn, versioned under ``/v1``: providers and agents; nodes (provision, list,
get, destroy, files streamed in and out, exec with its output streamed back); runs (start,
list, get, pause, resume) and their events as server-sent events that a reconnecting client
replays from ``Last-Event-ID``; sessions and workspaces; ``/healthz``, ``/readyz`` and
``/metrics``. Bearer tokens from the store (:mod:`.auth`), ``Idempotency-Key`` on creation
(:mod:`.idempotency`), one JSON error body (:mod:`.problems`). Replicas on one PostgreSQL
store act as one service: each drives the runs it started, any follows, pauses or resumes
any run, and a survivor reconciles a replica that died.

Needs the ``serve`` extra (``pip install 'nodeprov[serve]'``).
"""

from .app import CONFIG_VARIABLE, create_app
from .config import ServiceConfig
from .server import serve

__all__ = ["CONFIG_VARIABLE", "ServiceConfig", "create_app", "serve"]
