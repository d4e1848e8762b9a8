"""The store's schema, as numbered migrations applied once each, in order, under a lock."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from ..errors import StoreError
from ._db import Database, Transaction

_SERIAL = {
    "sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "postgres": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
}

_BLOB = {"sqlite": "BLOB", "postgres": "BYTEA"}

# Each migration is a list of statements ({serial} is the dialect's auto-increment key, {blob}
# its type of binary data) and of functions that run statements of their own. A migration,
# once released, is never changed: what changes comes as a new one.
Step = str | Callable[[Transaction], Awaitable[None]]
MIGRATIONS: list[list[Step]] = [
    [
        """CREATE TABLE workspaces (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL)""",
        # One active agent session per workspace; switching agent provider archives it.
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            workspace_id TEXT NOT NULL REFERENCES workspaces(id),
            provider TEXT NOT NULL,
            provider_session_id TEXT,
            state TEXT NOT NULL,
            created_at TEXT NOT NULL,
            archived_at TEXT)""",
        "CREATE UNIQUE INDEX sessions_one_active ON sessions(workspace_id) WHERE state = 'active'",
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            workspace_id TEXT NOT NULL REFERENCES workspaces(id),
            prompt TEXT NOT NULL,
            node_provider TEXT NOT NULL,
            node_settings TEXT NOT NULL,
            agent_options TEXT NOT NULL,
            state TEXT NOT NULL,
            outcome TEXT,
            error TEXT,
            node_id TEXT,
            agent_session_id TEXT,
            project_key TEXT,
            owner TEXT NOT NULL,
            pause_request TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL)""",
        # Written before a provider creates anything, so a crash mid-provision is found.
        """CREATE TABLE nodes (
            id TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            run_id TEXT NOT NULL REFERENCES runs(id),
            state TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL)""",
        """CREATE TABLE snapshots (
            token TEXT PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(id),
            node_id TEXT,
            node_kept INTEGER NOT NULL,
            provider TEXT NOT NULL,
            agent_session_id TEXT,
            project_key TEXT,
            state TEXT NOT NULL,
            pause_kind TEXT NOT NULL,
            reason TEXT NOT NULL,
            created_at TEXT NOT NULL,
            used_at TEXT)""",
        # Transcripts mirrored off the node (the SDK's SessionStore protocol).
        """CREATE TABLE transcript_entries (
            seq {serial},
            project_key TEXT NOT NULL,
            session_id TEXT NOT NULL,
            subpath TEXT NOT NULL,
            uuid TEXT,
            entry TEXT NOT NULL,
            written_ms BIGINT NOT NULL)""",
        "CREATE INDEX transcript_key ON transcript_entries(project_key, session_id, subpath, seq)",
        """CREATE UNIQUE INDEX transcript_uuid ON transcript_entries(project_key, session_id, subpath, uuid)
            WHERE uuid IS NOT NULL""",
        """CREATE TABLE transcript_summaries (
            project_key TEXT NOT NULL,
            session_id TEXT NOT NULL,
            mtime BIGINT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (project_key, session_id))""",
    ],
    [
        # A control plane's claim on its runs and nodes (owner 'lease:ID'); times are the
        # database's clock in epoch milliseconds.
        """CREATE TABLE leases (
            id TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            created_at TEXT NOT NULL,
            heartbeat_ms BIGINT NOT NULL,
            expires_ms BIGINT NOT NULL,
            released INTEGER NOT NULL)""",
        # Durable run events, so any process can follow a run from any point.
        """CREATE TABLE run_events (
            run_id TEXT NOT NULL REFERENCES runs(id),
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            at TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (run_id, seq))""",
        "CREATE INDEX runs_owner ON runs(owner) WHERE pause_request IS NOT NULL",
        "CREATE INDEX runs_state ON runs(state)",
        "CREATE INDEX nodes_state ON nodes(state)",
    ],
    [
        # Provider settings are stored without their secrets; these are the names of the
        # secret settings a run was started with, asked for again on resume.
        "ALTER TABLE runs ADD COLUMN node_secret_fields TEXT NOT NULL DEFAULT '[]'",
    ],
    [
        # The agent that runs a run (nodeprov.agents), and the one a snapshot resumes.
        "ALTER TABLE runs ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude'",
        "ALTER TABLE snapshots ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude'",
    ],
    [
        # A kept node's own lifetime (the database's clock, epoch ms): past it, reconcile
        # destroys the node and the run resumes on a fresh one.
        "ALTER TABLE nodes ADD COLUMN keep_until_ms BIGINT",
        # What the run's nodes are made from (NodeConfig, JSON, less what is per node), so a
        # resume on a fresh node gets the same lifetime, labels and environment.
        "ALTER TABLE runs ADD COLUMN node_config TEXT NOT NULL DEFAULT '{{}}'",  # {{}}: format() escapes
        "CREATE INDEX nodes_run ON nodes(run_id)",
    ],
    [
        # Prompts' images, once each, by content hash: records and events name them by hash.
        """CREATE TABLE images (
            sha256 TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            size BIGINT NOT NULL,
            data {blob} NOT NULL,
            created_at TEXT NOT NULL)""",
        # A prompt of blocks (JSON: text blocks, and images by reference); '[]': the text alone.
        "ALTER TABLE runs ADD COLUMN prompt_blocks TEXT NOT NULL DEFAULT '[]'",
    ],
    [
        # Bearer tokens of the HTTP API: the secret's SHA-256 (hex) alone, never the secret;
        # scopes as a sorted JSON list.
        """CREATE TABLE api_tokens (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            scopes TEXT NOT NULL,
            secret_sha256 TEXT NOT NULL,
            created_at TEXT NOT NULL,
            revoked_at TEXT)""",
        "CREATE UNIQUE INDEX api_tokens_secret ON api_tokens(secret_sha256)",
        # The HTTP API's Idempotency-Keys, per caller (scope): the first request's resource
        # and, once done, its answer; purged by age.
        """CREATE TABLE idempotency_keys (
            scope TEXT NOT NULL,
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            resource_id TEXT NOT NULL,
            holder TEXT NOT NULL,
            state TEXT NOT NULL,
            response TEXT,
            created_at TEXT NOT NULL,
            PRIMARY KEY (scope, key))""",
        "CREATE INDEX idempotency_keys_created ON idempotency_keys(created_at)",
    ],
    [
        # Where the run's agent runs kept on its node (its keeper's directory), while it does:
        # a control plane taking the run over re-attaches there.
        "ALTER TABLE runs ADD COLUMN agent_keeper TEXT",
    ],
    [
        # Warm pools (nodeprov.store.pools): a named node template kept at a size by one
        # holder at a time; its nodes until a run claims one (then a run's node in nodes).
        """CREATE TABLE pools (
            name TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            provider_settings TEXT NOT NULL,
            secret_fields TEXT NOT NULL,
            node_config TEXT NOT NULL,
            size INTEGER NOT NULL,
            max_age DOUBLE PRECISION NOT NULL,
            refill_concurrency INTEGER NOT NULL,
            state TEXT NOT NULL,
            holder TEXT,
            error TEXT,
            retry_at_ms BIGINT,
            failures INTEGER NOT NULL,
            created_at TEXT NOT NULL)""",
        """CREATE TABLE pool_nodes (
            id TEXT PRIMARY KEY,
            pool TEXT NOT NULL REFERENCES pools(name),
            state TEXT NOT NULL,
            owner TEXT NOT NULL,
            ready_ms BIGINT,
            run_id TEXT,
            updated_at TEXT NOT NULL)""",
        "CREATE INDEX pool_nodes_pool ON pool_nodes(pool, state)",
        "CREATE INDEX pool_nodes_run ON pool_nodes(run_id)",
    ],
]


async def _image_refs(tx: Transaction) -> None:
    """Fill ``image_refs`` from the runs' prompts and the images their resumes were given
    (``run.started`` events), so that retention deletes no image a run still names."""
    refs: set[tuple[str, str]] = set()
    for run_id, blocks in await tx.fetchall("SELECT id, prompt_blocks FROM runs WHERE prompt_blocks != '[]'"):
        refs.update((block["sha256"], run_id) for block in json.loads(blocks) if block.get("type") == "image")
    started = "SELECT run_id, body FROM run_events WHERE kind = 'run.started' AND body LIKE ?"
    for run_id, body in await tx.fetchall(started, ("%sha256%",)):
        refs.update((image["sha256"], run_id) for image in json.loads(body).get("images") or ())
    for sha256, run_id in sorted(refs):
        await tx.execute(
            "INSERT INTO image_refs (sha256, run_id) VALUES (?, ?) ON CONFLICT DO NOTHING", (sha256, run_id)
        )


MIGRATIONS.append(
    [
        # What retention and the hot paths look up (tests/test_store_plans.py): dead leases by
        # expiry, runs by owner, by state and age, by session; snapshots by run; pool nodes by
        # provisioner and by state; pools by holder; sessions, workspaces and images by age.
        "CREATE INDEX leases_expires ON leases(expires_ms)",
        "CREATE INDEX runs_owner_state ON runs(owner, state)",
        "DROP INDEX runs_state",
        "CREATE INDEX runs_state_updated ON runs(state, updated_at)",
        "CREATE INDEX runs_agent_session ON runs(project_key, agent_session_id)",
        "CREATE INDEX snapshots_run ON snapshots(run_id)",
        "CREATE INDEX pool_nodes_owner ON pool_nodes(owner)",
        "CREATE INDEX pool_nodes_state ON pool_nodes(state, updated_at)",
        "CREATE INDEX pools_holder ON pools(holder)",
        "CREATE INDEX sessions_created ON sessions(created_at)",
        "CREATE INDEX workspaces_created ON workspaces(created_at)",
        "CREATE INDEX images_created ON images(created_at)",
        "CREATE INDEX sessions_workspace ON sessions(workspace_id)",
        "CREATE INDEX runs_session ON runs(session_id)",
        "CREATE INDEX idempotency_keys_holder ON idempotency_keys(holder) WHERE state = 'pending'",
        # Which runs name which image (their prompt, their resumes' messages): an image no
        # run names is retention's to delete.
        """CREATE TABLE image_refs (
            sha256 TEXT NOT NULL,
            run_id TEXT NOT NULL,
            PRIMARY KEY (sha256, run_id))""",
        "CREATE INDEX image_refs_run ON image_refs(run_id)",
        _image_refs,
        # Facts about the store itself (when it was last pruned, say), by key.
        "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ]
)

MIGRATIONS.append(
    [
        # Tenants (a team, a project) own what the HTTP API makes for them: the tokens that
        # act for them, and (api_owners) their runs and nodes, a row each, written before
        # the thing is made. What has no row (the library's, the CLI's) is "default"'s. A
        # node's row goes with it, or past its lifetime; a run's with the run (retention).
        "ALTER TABLE api_tokens ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'",
        """CREATE TABLE api_owners (
            kind TEXT NOT NULL,
            id TEXT NOT NULL,
            tenant TEXT NOT NULL,
            provider TEXT,
            created_at TEXT NOT NULL,
            expires_at TEXT,
            PRIMARY KEY (kind, id))""",
        "CREATE INDEX api_owners_tenant ON api_owners(tenant, kind)",
        "CREATE INDEX api_owners_expires ON api_owners(expires_at)",
        # Who did what through the HTTP API, and when: kept as long as runs are.
        """CREATE TABLE audit (
            seq {serial},
            at TEXT NOT NULL,
            tenant TEXT NOT NULL,
            token_id TEXT NOT NULL,
            token_name TEXT NOT NULL,
            action TEXT NOT NULL,
            resource TEXT NOT NULL,
            detail TEXT NOT NULL)""",
        "CREATE INDEX audit_tenant ON audit(tenant, seq)",
        "CREATE INDEX audit_at ON audit(at)",
    ]
)

MIGRATIONS.append(
    [
        # The seconds a run's agent is kept with nobody attached (0: not kept), its own: a
        # control plane that takes the run over or resumes it keeps it so. NULL: stored before.
        "ALTER TABLE runs ADD COLUMN agent_grace DOUBLE PRECISION",
    ]
)

MIGRATIONS.append(
    [
        # The model the run asked for ('scripted': its agent's offline one; NULL: its agent's
        # default), which a resume that names none runs on again, through every face.
        "ALTER TABLE runs ADD COLUMN model TEXT",
    ]
)

MIGRATIONS.append(
    [
        # One index for every reader of transcript entries (each goes by project, session and
        # subpath; a load sorts its session's entries by seq) and for the appends' check of
        # what is stored: a second index, on seq, doubled the cost of each entry appended
        # (22.8 to 11.6 µs of SQLite's CPU per entry, 100 sessions appending at once).
        "DROP INDEX transcript_key",
        "DROP INDEX transcript_uuid",
        "CREATE UNIQUE INDEX transcript_entry ON transcript_entries(project_key, session_id, subpath, uuid)",
    ]
)

MIGRATIONS.append(
    [
        # Checkpoints of runs (nodeprov.checkpoints): the workspace's manifest and packs in
        # an object store, named here (retention keeps what a row names), with the agent's
        # session then. A row is written once the objects are stored: never half a checkpoint.
        """CREATE TABLE checkpoints (
            id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            turn INTEGER NOT NULL,
            reason TEXT NOT NULL,
            created_at TEXT NOT NULL,
            objects TEXT NOT NULL,
            manifest TEXT NOT NULL,
            packs TEXT NOT NULL,
            files BIGINT NOT NULL,
            size BIGINT NOT NULL,
            stored BIGINT NOT NULL,
            changed TEXT NOT NULL,
            parent TEXT,
            agent_session_id TEXT,
            project_key TEXT,
            UNIQUE (run_id, seq))""",
        "CREATE INDEX checkpoints_objects ON checkpoints(objects)",
        # The objects of checkpoints kept in the store itself (``store:``), by name.
        """CREATE TABLE checkpoint_objects (
            name TEXT PRIMARY KEY,
            data {blob} NOT NULL,
            created_at TEXT NOT NULL)""",
        "CREATE INDEX checkpoint_objects_created ON checkpoint_objects(created_at)",
    ]
)

MIGRATIONS.append(
    [
        # Where the agent's session stood at a checkpoint (its last transcript entry's seq):
        # where a fork from the checkpoint cuts the session.
        "ALTER TABLE checkpoints ADD COLUMN session_seq BIGINT",
        # A checkpoint asked of a run by another process (the checkpoint's id to be), for the
        # control plane that drives it.
        "ALTER TABLE runs ADD COLUMN checkpoint_request TEXT",
        # When the run checkpoints (pause, turn or off), which its resumes keep.
        "ALTER TABLE runs ADD COLUMN checkpoint TEXT NOT NULL DEFAULT 'pause'",
    ]
)

MIGRATIONS.append(
    [
        # A fork's lineage: the run it was forked from and the checkpoint it started from
        # (plain text, no foreign key: retention may delete the original first).
        "ALTER TABLE runs ADD COLUMN forked_from TEXT",
        "ALTER TABLE runs ADD COLUMN forked_at TEXT",
    ]
)

MIGRATIONS.append(
    [
        # Where the agent's session stood at a checkpoint, as the number of entries of each of
        # its files (JSON, by subpath): an agent's state files only grow, so a fork takes
        # that many, whatever replaced the archived copy since. It supersedes session_seq (a
        # position, which such a replacement renumbers), left unused.
        "ALTER TABLE checkpoints ADD COLUMN session_counts TEXT",
    ]
)

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema this code writes: a store of a later one is refused."""


async def migrate(db: Database) -> int:
    """Apply what is missing, in one transaction; safe when several processes start at once.
    Returns the version.

    Raises:
        StoreError: the store was written by a newer nodeprov (its schema is later than
            :data:`SCHEMA_VERSION`), or the database failed.
    """

    async def upgrade(tx: Transaction) -> None:
        if db.dialect == "postgres":
            await tx.execute("SELECT pg_advisory_xact_lock(7453001)")  # one migrator at a time
        await tx.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)"
        )
        done = {row[0] for row in await tx.fetchall("SELECT version FROM schema_migrations")}
        if done and max(done) > SCHEMA_VERSION:
            raise StoreError(
                f"the store at {db.where} has schema {max(done)}, newer than this nodeprov's"
                f" ({SCHEMA_VERSION}): upgrade nodeprov to use it"
            )
        for version, steps in enumerate(MIGRATIONS, start=1):
            if version in done:
                continue
            for step in steps:
                if isinstance(step, str):
                    await tx.execute(step.format(serial=_SERIAL[db.dialect], blob=_BLOB[db.dialect]))
                else:
                    await step(tx)
            await tx.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                (version, datetime.now(UTC).isoformat()),
            )

    await db.transact(upgrade)
    return SCHEMA_VERSION


async def schema_version(db: Database) -> int:
    """The schema version the store is at."""
    row = await db.fetchone("SELECT MAX(version) FROM schema_migrations")
    return int(row[0]) if row and row[0] is not None else 0
