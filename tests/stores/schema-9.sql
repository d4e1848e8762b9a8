--
-- PostgreSQL database dump
--

\restrict vHoLO15SxAZuseHclxsdM2RZL75NtAa9x7z7V7OwO9jujQphnvRddxbU0ncAG6H

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: nodeprov_fixture; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA nodeprov_fixture;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: api_tokens; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.api_tokens (
    id text NOT NULL,
    name text NOT NULL,
    scopes text NOT NULL,
    secret_sha256 text NOT NULL,
    created_at text NOT NULL,
    revoked_at text
);


--
-- Name: idempotency_keys; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.idempotency_keys (
    scope text NOT NULL,
    key text NOT NULL,
    kind text NOT NULL,
    fingerprint text NOT NULL,
    resource_id text NOT NULL,
    holder text NOT NULL,
    state text NOT NULL,
    response text,
    created_at text NOT NULL
);


--
-- Name: images; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.images (
    sha256 text NOT NULL,
    media_type text NOT NULL,
    size bigint NOT NULL,
    data bytea NOT NULL,
    created_at text NOT NULL
);


--
-- Name: leases; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.leases (
    id text NOT NULL,
    holder text NOT NULL,
    created_at text NOT NULL,
    heartbeat_ms bigint NOT NULL,
    expires_ms bigint NOT NULL,
    released integer NOT NULL
);


--
-- Name: nodes; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.nodes (
    id text NOT NULL,
    provider text NOT NULL,
    run_id text NOT NULL,
    state text NOT NULL,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    keep_until_ms bigint
);


--
-- Name: pool_nodes; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.pool_nodes (
    id text NOT NULL,
    pool text NOT NULL,
    state text NOT NULL,
    owner text NOT NULL,
    ready_ms bigint,
    run_id text,
    updated_at text NOT NULL
);


--
-- Name: pools; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.pools (
    name text NOT NULL,
    provider text NOT NULL,
    provider_settings text NOT NULL,
    secret_fields text NOT NULL,
    node_config text NOT NULL,
    size integer NOT NULL,
    max_age double precision NOT NULL,
    refill_concurrency integer NOT NULL,
    state text NOT NULL,
    holder text,
    error text,
    retry_at_ms bigint,
    failures integer NOT NULL,
    created_at text NOT NULL
);


--
-- Name: run_events; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.run_events (
    run_id text NOT NULL,
    seq integer NOT NULL,
    kind text NOT NULL,
    at text NOT NULL,
    body text NOT NULL
);


--
-- Name: runs; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.runs (
    id text NOT NULL,
    session_id text NOT NULL,
    workspace_id text NOT NULL,
    prompt text NOT NULL,
    node_provider text NOT NULL,
    node_settings text NOT NULL,
    agent_options text NOT NULL,
    state text NOT NULL,
    outcome text,
    error text,
    node_id text,
    agent_session_id text,
    project_key text,
    owner text NOT NULL,
    pause_request text,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    node_secret_fields text DEFAULT '[]'::text NOT NULL,
    agent text DEFAULT 'claude'::text NOT NULL,
    node_config text DEFAULT '{}'::text NOT NULL,
    prompt_blocks text DEFAULT '[]'::text NOT NULL,
    agent_keeper text
);


--
-- Name: schema_migrations; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.schema_migrations (
    version integer NOT NULL,
    applied_at text
);


--
-- Name: sessions; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.sessions (
    id text NOT NULL,
    workspace_id text NOT NULL,
    provider text NOT NULL,
    provider_session_id text,
    state text NOT NULL,
    created_at text NOT NULL,
    archived_at text
);


--
-- Name: snapshots; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.snapshots (
    token text NOT NULL,
    run_id text NOT NULL,
    node_id text,
    node_kept integer NOT NULL,
    provider text NOT NULL,
    agent_session_id text,
    project_key text,
    state text NOT NULL,
    pause_kind text NOT NULL,
    reason text NOT NULL,
    created_at text NOT NULL,
    used_at text,
    agent text DEFAULT 'claude'::text NOT NULL
);


--
-- Name: transcript_entries; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.transcript_entries (
    seq bigint NOT NULL,
    project_key text NOT NULL,
    session_id text NOT NULL,
    subpath text NOT NULL,
    uuid text,
    entry text NOT NULL,
    written_ms bigint NOT NULL
);


--
-- Name: transcript_entries_seq_seq; Type: SEQUENCE; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE nodeprov_fixture.transcript_entries ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME nodeprov_fixture.transcript_entries_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: transcript_summaries; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.transcript_summaries (
    project_key text NOT NULL,
    session_id text NOT NULL,
    mtime bigint NOT NULL,
    data text NOT NULL
);


--
-- Name: workspaces; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.workspaces (
    id text NOT NULL,
    created_at text NOT NULL
);


--
-- Data for Name: api_tokens; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.api_tokens (id, name, scopes, secret_sha256, created_at, revoked_at) FROM stdin;
tok-65b7f4093b22	ci	["read", "runs"]	d475b7b0d0d91fdf74ba40cfe358f92c6f8c28420d80d2282da04f0353832d0e	2026-11-27T17:50:06.804473+00:00	\N
tok-e1e8a498249f	old	["admin"]	9320bf19cd1dfb8a9ef84e7f30038aa8436bc0419c64fac4af53198b21db467c	2026-11-27T17:50:06.810296+00:00	2026-11-27T17:50:06.814037+00:00
\.


--
-- Data for Name: idempotency_keys; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.idempotency_keys (scope, key, kind, fingerprint, resource_id, holder, state, response, created_at) FROM stdin;
token:tok-65b7f4093b22	key-1	run	f	run-a7af3b07ad8534c8	me	pending	\N	2026-11-27T17:50:06.817943+00:00
\.


--
-- Data for Name: images; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.images (sha256, media_type, size, data, created_at) FROM stdin;
c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77	image/png	70	\\x89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63fccfc0500f000485018084a98c210000000049454e44ae426082	2026-11-27T17:50:05.201901+00:00
\.


--
-- Data for Name: leases; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.leases (id, holder, created_at, heartbeat_ms, expires_ms, released) FROM stdin;
lease-fcd01a5f13d7e4d9	vm pid 23383	2026-11-27T17:50:05.117679+00:00	1795801805118	1795801806804	1
\.


--
-- Data for Name: nodes; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.nodes (id, provider, run_id, state, created_at, updated_at, keep_until_ms) FROM stdin;
np-d5ce3abf74fc	local	run-a7af3b07ad8534c8	destroyed	2026-11-27T17:50:05.212525+00:00	2026-11-27T17:50:05.916362+00:00	\N
np-63d440da4c86	local	run-5e7f2e364862fbc3	destroyed	2026-11-27T17:50:05.939618+00:00	2026-11-27T17:50:06.090333+00:00	\N
np-a1ddc5db86ec	local	run-6309eb6f9980535f	kept	2026-11-27T17:50:06.105772+00:00	2026-11-27T17:50:06.281483+00:00	1795888206037
np-d3eb4c1f5c98	local	run-7d53b33aea83e790	destroyed	2026-11-27T17:50:06.294859+00:00	2026-11-27T17:50:06.470409+00:00	\N
np-78c02e1da59d	local	run-9cce77e219977514	destroyed	2026-11-27T17:50:06.555559+00:00	2026-11-27T17:50:06.682749+00:00	\N
\.


--
-- Data for Name: pool_nodes; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.pool_nodes (id, pool, state, owner, ready_ms, run_id, updated_at) FROM stdin;
np-78c02e1da59d	warm	claimed	lease:lease-fcd01a5f13d7e4d9	1795801806498	run-9cce77e219977514	2026-11-27T17:50:06.555559+00:00
np-2b2d446dbbb0	warm	ready	lease:lease-fcd01a5f13d7e4d9	1795801806768	\N	2026-11-27T17:50:06.767115+00:00
\.


--
-- Data for Name: pools; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.pools (name, provider, provider_settings, secret_fields, node_config, size, max_age, refill_concurrency, state, holder, error, retry_at_ms, failures, created_at) FROM stdin;
warm	local	{"root": "/tmp/tmp_cqmxq51/pool"}	[]	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	1	3600	2	active	lease:lease-fcd01a5f13d7e4d9	\N	\N	0	2026-11-27T17:50:06.483490+00:00
\.


--
-- Data for Name: run_events; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.run_events (run_id, seq, kind, at, body) FROM stdin;
run-a7af3b07ad8534c8	1	run.started	2026-11-27T17:50:05.210950+00:00	{"type":"run.started","run_id":"run-a7af3b07ad8534c8","seq":1,"at":"2026-11-27T17:50:05.210950+00:00","prompt":"look at this","provider":"local","resumed_from":null,"agent":"claude","images":[{"type":"image","sha256":"c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77","media_type":"image/png","size":70}]}
run-a7af3b07ad8534c8	2	node.ready	2026-11-27T17:50:05.317758+00:00	{"type":"node.ready","run_id":"run-a7af3b07ad8534c8","seq":2,"at":"2026-11-27T17:50:05.317758+00:00","node_id":"np-d5ce3abf74fc","reused":false,"transcript_restored":false,"pool":null}
run-a7af3b07ad8534c8	3	agent.message	2026-11-27T17:50:05.888582+00:00	{"type":"agent.message","run_id":"run-a7af3b07ad8534c8","seq":3,"at":"2026-11-27T17:50:05.888582+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmp_cqmxq51/nodes/np-d5ce3abf74fc/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"709679f6-8247-47b6-a21d-caed2ff68d34","uuid":"5552ad5c-80c4-4407-ad00-b58d49f7dd27"},"subtype":"init","text":"/tmp/tmp_cqmxq51/nodes/np-d5ce3abf74fc/work","session_id":"709679f6-8247-47b6-a21d-caed2ff68d34","retry":false}}
run-a7af3b07ad8534c8	4	agent.message	2026-11-27T17:50:05.893141+00:00	{"type":"agent.message","run_id":"run-a7af3b07ad8534c8","seq":4,"at":"2026-11-27T17:50:05.893141+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_2f48b5be-500a-4e8a-bbcc-6cfe98f79024","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"a red dot"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"709679f6-8247-47b6-a21d-caed2ff68d34","uuid":"c3307af8-6cfc-4e57-921c-d13d793b879a"},"text":"a red dot"}}
run-a7af3b07ad8534c8	5	agent.message	2026-11-27T17:50:05.897455+00:00	{"type":"agent.message","run_id":"run-a7af3b07ad8534c8","seq":5,"at":"2026-11-27T17:50:05.897455+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":false,"duration_ms":2,"duration_api_ms":2,"num_turns":1,"session_id":"709679f6-8247-47b6-a21d-caed2ff68d34","stop_reason":"end_turn","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"7172f645-1f2d-4f59-a007-282c6821b23b","result":"a red dot"},"is_error":false,"text":"a red dot","session_id":"709679f6-8247-47b6-a21d-caed2ff68d34","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-a7af3b07ad8534c8	6	node.released	2026-11-27T17:50:05.918098+00:00	{"type":"node.released","run_id":"run-a7af3b07ad8534c8","seq":6,"at":"2026-11-27T17:50:05.918098+00:00","node_id":"np-d5ce3abf74fc","kept":false,"suspended":false}
run-a7af3b07ad8534c8	7	run.finished	2026-11-27T17:50:05.922050+00:00	{"type":"run.finished","run_id":"run-a7af3b07ad8534c8","seq":7,"at":"2026-11-27T17:50:05.922050+00:00","outcome":"ok","error":null,"agent_session_id":"709679f6-8247-47b6-a21d-caed2ff68d34"}
run-5e7f2e364862fbc3	1	run.started	2026-11-27T17:50:05.938947+00:00	{"type":"run.started","run_id":"run-5e7f2e364862fbc3","seq":1,"at":"2026-11-27T17:50:05.938947+00:00","prompt":"fail","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-5e7f2e364862fbc3	2	node.ready	2026-11-27T17:50:05.954207+00:00	{"type":"node.ready","run_id":"run-5e7f2e364862fbc3","seq":2,"at":"2026-11-27T17:50:05.954207+00:00","node_id":"np-63d440da4c86","reused":false,"transcript_restored":false,"pool":null}
run-5e7f2e364862fbc3	3	agent.message	2026-11-27T17:50:06.030282+00:00	{"type":"agent.message","run_id":"run-5e7f2e364862fbc3","seq":3,"at":"2026-11-27T17:50:06.030282+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmp_cqmxq51/nodes/np-63d440da4c86/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"0dc57d10-6378-44f4-b99b-02744ce81093","uuid":"64e116b4-d086-446e-8979-38409859445a"},"subtype":"init","text":"/tmp/tmp_cqmxq51/nodes/np-63d440da4c86/work","session_id":"0dc57d10-6378-44f4-b99b-02744ce81093","retry":false}}
run-5e7f2e364862fbc3	4	agent.message	2026-11-27T17:50:06.034535+00:00	{"type":"agent.message","run_id":"run-5e7f2e364862fbc3","seq":4,"at":"2026-11-27T17:50:06.034535+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_e6905518-ff1d-42c6-8569-9a3e736fa10d","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"0dc57d10-6378-44f4-b99b-02744ce81093","uuid":"d4671041-e8ba-43c5-a142-46fb5f271291","error":"unknown","is_api_error_message":true},"text":"API Error: 500"}}
run-5e7f2e364862fbc3	5	agent.message	2026-11-27T17:50:06.034560+00:00	{"type":"agent.message","run_id":"run-5e7f2e364862fbc3","seq":5,"at":"2026-11-27T17:50:06.034560+00:00","message":{"kind":"error","raw":{"type":"assistant","message":{"id":"msg_e6905518-ff1d-42c6-8569-9a3e736fa10d","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"0dc57d10-6378-44f4-b99b-02744ce81093","uuid":"d4671041-e8ba-43c5-a142-46fb5f271291","error":"unknown","is_api_error_message":true},"message":"unknown"}}
run-5e7f2e364862fbc3	6	agent.message	2026-11-27T17:50:06.036907+00:00	{"type":"agent.message","run_id":"run-5e7f2e364862fbc3","seq":6,"at":"2026-11-27T17:50:06.036907+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":true,"duration_ms":2,"duration_api_ms":2,"num_turns":1,"session_id":"0dc57d10-6378-44f4-b99b-02744ce81093","stop_reason":"stop_sequence","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"c59d269b-7bd6-43bb-a100-1668513f9f20","result":"API Error: 500","api_error_status":null},"is_error":true,"text":"API Error: 500","session_id":"0dc57d10-6378-44f4-b99b-02744ce81093","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-5e7f2e364862fbc3	7	node.released	2026-11-27T17:50:06.092652+00:00	{"type":"node.released","run_id":"run-5e7f2e364862fbc3","seq":7,"at":"2026-11-27T17:50:06.092652+00:00","node_id":"np-63d440da4c86","kept":false,"suspended":false}
run-5e7f2e364862fbc3	8	run.finished	2026-11-27T17:50:06.098252+00:00	{"type":"run.finished","run_id":"run-5e7f2e364862fbc3","seq":8,"at":"2026-11-27T17:50:06.098252+00:00","outcome":"error","error":"API Error: 500","agent_session_id":"0dc57d10-6378-44f4-b99b-02744ce81093"}
run-6309eb6f9980535f	1	run.started	2026-11-27T17:50:06.103117+00:00	{"type":"run.started","run_id":"run-6309eb6f9980535f","seq":1,"at":"2026-11-27T17:50:06.103117+00:00","prompt":"keep","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-6309eb6f9980535f	2	node.ready	2026-11-27T17:50:06.120055+00:00	{"type":"node.ready","run_id":"run-6309eb6f9980535f","seq":2,"at":"2026-11-27T17:50:06.120055+00:00","node_id":"np-a1ddc5db86ec","reused":false,"transcript_restored":false,"pool":null}
run-6309eb6f9980535f	3	agent.message	2026-11-27T17:50:06.228303+00:00	{"type":"agent.message","run_id":"run-6309eb6f9980535f","seq":3,"at":"2026-11-27T17:50:06.228303+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmp_cqmxq51/nodes/np-a1ddc5db86ec/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"1f613b74-ba0b-49c3-8f00-ee6023012a8c","uuid":"6bb3b188-e0d5-4c6a-b8cc-e668eaa10fb0"},"subtype":"init","text":"/tmp/tmp_cqmxq51/nodes/np-a1ddc5db86ec/work","session_id":"1f613b74-ba0b-49c3-8f00-ee6023012a8c","retry":false}}
run-6309eb6f9980535f	4	node.released	2026-11-27T17:50:06.283361+00:00	{"type":"node.released","run_id":"run-6309eb6f9980535f","seq":4,"at":"2026-11-27T17:50:06.283361+00:00","node_id":"np-a1ddc5db86ec","kept":true,"suspended":false}
run-6309eb6f9980535f	5	run.paused	2026-11-27T17:50:06.286077+00:00	{"type":"run.paused","run_id":"run-6309eb6f9980535f","seq":5,"at":"2026-11-27T17:50:06.286077+00:00","pause_kind":"human","reason":"overnight","token":"tok-Ql-E-xFHttStugszpZnqUT-1c7Ch57J5","node_kept":true}
run-6309eb6f9980535f	6	run.finished	2026-11-27T17:50:06.286153+00:00	{"type":"run.finished","run_id":"run-6309eb6f9980535f","seq":6,"at":"2026-11-27T17:50:06.286153+00:00","outcome":"paused","error":null,"agent_session_id":"1f613b74-ba0b-49c3-8f00-ee6023012a8c"}
run-7d53b33aea83e790	1	run.started	2026-11-27T17:50:06.293477+00:00	{"type":"run.started","run_id":"run-7d53b33aea83e790","seq":1,"at":"2026-11-27T17:50:06.293477+00:00","prompt":"release","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-7d53b33aea83e790	2	node.ready	2026-11-27T17:50:06.300869+00:00	{"type":"node.ready","run_id":"run-7d53b33aea83e790","seq":2,"at":"2026-11-27T17:50:06.300869+00:00","node_id":"np-d3eb4c1f5c98","reused":false,"transcript_restored":false,"pool":null}
run-7d53b33aea83e790	3	agent.message	2026-11-27T17:50:06.375382+00:00	{"type":"agent.message","run_id":"run-7d53b33aea83e790","seq":3,"at":"2026-11-27T17:50:06.375382+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmp_cqmxq51/nodes/np-d3eb4c1f5c98/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"845661a3-4a79-4e17-ad43-401fc35af198","uuid":"5d4b5040-5022-4851-b3cd-5944b84cf727"},"subtype":"init","text":"/tmp/tmp_cqmxq51/nodes/np-d3eb4c1f5c98/work","session_id":"845661a3-4a79-4e17-ad43-401fc35af198","retry":false}}
run-7d53b33aea83e790	4	node.released	2026-11-27T17:50:06.476002+00:00	{"type":"node.released","run_id":"run-7d53b33aea83e790","seq":4,"at":"2026-11-27T17:50:06.476002+00:00","node_id":"np-d3eb4c1f5c98","kept":false,"suspended":false}
run-7d53b33aea83e790	5	run.paused	2026-11-27T17:50:06.477132+00:00	{"type":"run.paused","run_id":"run-7d53b33aea83e790","seq":5,"at":"2026-11-27T17:50:06.477132+00:00","pause_kind":"external","reason":"budget","token":"tok-iIjqZXPG_iAy6pMvj-taV5gmdFeMt-Wi","node_kept":false}
run-7d53b33aea83e790	6	run.finished	2026-11-27T17:50:06.477210+00:00	{"type":"run.finished","run_id":"run-7d53b33aea83e790","seq":6,"at":"2026-11-27T17:50:06.477210+00:00","outcome":"paused","error":null,"agent_session_id":"845661a3-4a79-4e17-ad43-401fc35af198"}
run-9cce77e219977514	1	run.started	2026-11-27T17:50:06.554432+00:00	{"type":"run.started","run_id":"run-9cce77e219977514","seq":1,"at":"2026-11-27T17:50:06.554432+00:00","prompt":"from the pool","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-9cce77e219977514	2	node.ready	2026-11-27T17:50:06.561997+00:00	{"type":"node.ready","run_id":"run-9cce77e219977514","seq":2,"at":"2026-11-27T17:50:06.561997+00:00","node_id":"np-78c02e1da59d","reused":false,"transcript_restored":false,"pool":"warm"}
run-9cce77e219977514	3	agent.message	2026-11-27T17:50:06.638763+00:00	{"type":"agent.message","run_id":"run-9cce77e219977514","seq":3,"at":"2026-11-27T17:50:06.638763+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmp_cqmxq51/pool/np-78c02e1da59d/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"0f8a00aa-3387-402d-92ca-c4d6250256f2","uuid":"a205cbd6-5e88-4603-9ac5-276d70b3ff99"},"subtype":"init","text":"/tmp/tmp_cqmxq51/pool/np-78c02e1da59d/work","session_id":"0f8a00aa-3387-402d-92ca-c4d6250256f2","retry":false}}
run-9cce77e219977514	4	agent.message	2026-11-27T17:50:06.641522+00:00	{"type":"agent.message","run_id":"run-9cce77e219977514","seq":4,"at":"2026-11-27T17:50:06.641522+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_b791f83a-7f26-4166-ac5f-1cf6a163da3c","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"warm"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"0f8a00aa-3387-402d-92ca-c4d6250256f2","uuid":"34303ca0-e5d1-49cd-a999-51bf735f5de2"},"text":"warm"}}
run-9cce77e219977514	5	agent.message	2026-11-27T17:50:06.643299+00:00	{"type":"agent.message","run_id":"run-9cce77e219977514","seq":5,"at":"2026-11-27T17:50:06.643299+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":false,"duration_ms":2,"duration_api_ms":2,"num_turns":1,"session_id":"0f8a00aa-3387-402d-92ca-c4d6250256f2","stop_reason":"end_turn","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"8985f73d-9240-46c4-acdf-0707aa27fb08","result":"warm"},"is_error":false,"text":"warm","session_id":"0f8a00aa-3387-402d-92ca-c4d6250256f2","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-9cce77e219977514	6	node.released	2026-11-27T17:50:06.686019+00:00	{"type":"node.released","run_id":"run-9cce77e219977514","seq":6,"at":"2026-11-27T17:50:06.686019+00:00","node_id":"np-78c02e1da59d","kept":false,"suspended":false}
run-9cce77e219977514	7	run.finished	2026-11-27T17:50:06.687673+00:00	{"type":"run.finished","run_id":"run-9cce77e219977514","seq":7,"at":"2026-11-27T17:50:06.687673+00:00","outcome":"ok","error":null,"agent_session_id":"0f8a00aa-3387-402d-92ca-c4d6250256f2"}
\.


--
-- Data for Name: runs; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.runs (id, session_id, workspace_id, prompt, node_provider, node_settings, agent_options, state, outcome, error, node_id, agent_session_id, project_key, owner, pause_request, created_at, updated_at, node_secret_fields, agent, node_config, prompt_blocks, agent_keeper) FROM stdin;
run-a7af3b07ad8534c8	ses-a76847d202f5eb25	default	look at this	local	{"root": "/tmp/tmp_cqmxq51/nodes"}	{"cli_path": "/tmp/tmp_cqmxq51/fake-agent"}	finished	ok	\N	np-d5ce3abf74fc	709679f6-8247-47b6-a21d-caed2ff68d34	-tmp-tmp-cqmxq51-nodes-np-d5ce3abf74fc-work	lease:lease-fcd01a5f13d7e4d9	\N	2026-11-27T17:50:05.173709+00:00	2026-11-27T17:50:05.918185+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[{"type": "text", "text": "look at this"}, {"type": "image", "sha256": "c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77", "media_type": "image/png", "size": 70}]	\N
run-6309eb6f9980535f	ses-a76847d202f5eb25	default	keep	local	{"root": "/tmp/tmp_cqmxq51/nodes"}	{"cli_path": "/tmp/tmp_cqmxq51/fake-agent"}	paused	paused	\N	np-a1ddc5db86ec	1f613b74-ba0b-49c3-8f00-ee6023012a8c	-tmp-tmp-cqmxq51-nodes-np-a1ddc5db86ec-work	lease:lease-fcd01a5f13d7e4d9	\N	2026-11-27T17:50:06.101244+00:00	2026-11-27T17:50:06.283462+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N
run-5e7f2e364862fbc3	ses-a76847d202f5eb25	default	fail	local	{"root": "/tmp/tmp_cqmxq51/nodes"}	{"cli_path": "/tmp/tmp_cqmxq51/fake-agent"}	failed	error	API Error: 500	np-63d440da4c86	0dc57d10-6378-44f4-b99b-02744ce81093	-tmp-tmp-cqmxq51-nodes-np-63d440da4c86-work	lease:lease-fcd01a5f13d7e4d9	\N	2026-11-27T17:50:05.932240+00:00	2026-11-27T17:50:06.092791+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N
run-9cce77e219977514	ses-a76847d202f5eb25	default	from the pool	local	{"root": "/tmp/tmp_cqmxq51/pool"}	{"cli_path": "/tmp/tmp_cqmxq51/fake-agent"}	finished	ok	\N	np-78c02e1da59d	0f8a00aa-3387-402d-92ca-c4d6250256f2	-tmp-tmp-cqmxq51-pool-np-78c02e1da59d-work	lease:lease-fcd01a5f13d7e4d9	\N	2026-11-27T17:50:06.552568+00:00	2026-11-27T17:50:06.686134+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N
run-7d53b33aea83e790	ses-a76847d202f5eb25	default	release	local	{"root": "/tmp/tmp_cqmxq51/nodes"}	{"cli_path": "/tmp/tmp_cqmxq51/fake-agent"}	paused	paused	\N	np-d3eb4c1f5c98	845661a3-4a79-4e17-ad43-401fc35af198	-tmp-tmp-cqmxq51-nodes-np-d3eb4c1f5c98-work	lease:lease-fcd01a5f13d7e4d9	\N	2026-11-27T17:50:06.291800+00:00	2026-11-27T17:50:06.476152+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N
\.


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.schema_migrations (version, applied_at) FROM stdin;
1	2026-11-27T17:50:05.046220+00:00
2	2026-11-27T17:50:05.070657+00:00
3	2026-11-27T17:50:05.071328+00:00
4	2026-11-27T17:50:05.071836+00:00
5	2026-11-27T17:50:05.073971+00:00
6	2026-11-27T17:50:05.077962+00:00
7	2026-11-27T17:50:05.094079+00:00
8	2026-11-27T17:50:05.094689+00:00
9	2026-11-27T17:50:05.115078+00:00
\.


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.sessions (id, workspace_id, provider, provider_session_id, state, created_at, archived_at) FROM stdin;
ses-a76847d202f5eb25	default	claude	0f8a00aa-3387-402d-92ca-c4d6250256f2	active	2026-11-27T17:50:05.166350+00:00	\N
\.


--
-- Data for Name: snapshots; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.snapshots (token, run_id, node_id, node_kept, provider, agent_session_id, project_key, state, pause_kind, reason, created_at, used_at, agent) FROM stdin;
tok-gP-97n3tWRkQI93rJych8qrykRVMGvfH	run-5e7f2e364862fbc3	np-63d440da4c86	0	local	0dc57d10-6378-44f4-b99b-02744ce81093	-tmp-tmp-cqmxq51-nodes-np-63d440da4c86-work	running	system	API Error: 500	2026-11-27T17:50:06.044135+00:00	\N	claude
tok-Ql-E-xFHttStugszpZnqUT-1c7Ch57J5	run-6309eb6f9980535f	np-a1ddc5db86ec	1	local	1f613b74-ba0b-49c3-8f00-ee6023012a8c	-tmp-tmp-cqmxq51-nodes-np-a1ddc5db86ec-work	pausing	human	overnight	2026-11-27T17:50:06.244908+00:00	\N	claude
tok-iIjqZXPG_iAy6pMvj-taV5gmdFeMt-Wi	run-7d53b33aea83e790	np-d3eb4c1f5c98	0	local	845661a3-4a79-4e17-ad43-401fc35af198	-tmp-tmp-cqmxq51-nodes-np-d3eb4c1f5c98-work	pausing	external	budget	2026-11-27T17:50:06.389887+00:00	\N	claude
\.


--
-- Data for Name: transcript_entries; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.transcript_entries (seq, project_key, session_id, subpath, uuid, entry, written_ms) FROM stdin;
1	-tmp-tmp-cqmxq51-nodes-np-d5ce3abf74fc-work	709679f6-8247-47b6-a21d-caed2ff68d34		a3db7885-69a2-4a45-b6b3-5f9c6b4cdc17	{"type":"user","uuid":"a3db7885-69a2-4a45-b6b3-5f9c6b4cdc17","parentUuid":null,"sessionId":"709679f6-8247-47b6-a21d-caed2ff68d34","timestamp":"2026-11-27T17:50:05.000Z","cwd":"/tmp/tmp_cqmxq51/nodes/np-d5ce3abf74fc/work","message":{"role":"user","content":[{"type":"text","text":"look at this"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="}}]}}	1795801805892
2	-tmp-tmp-cqmxq51-nodes-np-d5ce3abf74fc-work	709679f6-8247-47b6-a21d-caed2ff68d34		c3307af8-6cfc-4e57-921c-d13d793b879a	{"type":"assistant","uuid":"c3307af8-6cfc-4e57-921c-d13d793b879a","parentUuid":"a3db7885-69a2-4a45-b6b3-5f9c6b4cdc17","sessionId":"709679f6-8247-47b6-a21d-caed2ff68d34","timestamp":"2026-11-27T17:50:05.000Z","cwd":"/tmp/tmp_cqmxq51/nodes/np-d5ce3abf74fc/work","message":{"id":"msg_2f48b5be-500a-4e8a-bbcc-6cfe98f79024","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"a red dot"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795801805892
3	-tmp-tmp-cqmxq51-nodes-np-63d440da4c86-work	0dc57d10-6378-44f4-b99b-02744ce81093		84636a15-4dbd-4b68-9ba0-f498edaf14b3	{"type":"user","uuid":"84636a15-4dbd-4b68-9ba0-f498edaf14b3","parentUuid":null,"sessionId":"0dc57d10-6378-44f4-b99b-02744ce81093","timestamp":"2026-11-27T17:50:06.000Z","cwd":"/tmp/tmp_cqmxq51/nodes/np-63d440da4c86/work","message":{"role":"user","content":"fail"}}	1795801806033
4	-tmp-tmp-cqmxq51-nodes-np-63d440da4c86-work	0dc57d10-6378-44f4-b99b-02744ce81093		d4671041-e8ba-43c5-a142-46fb5f271291	{"type":"assistant","uuid":"d4671041-e8ba-43c5-a142-46fb5f271291","parentUuid":"84636a15-4dbd-4b68-9ba0-f498edaf14b3","sessionId":"0dc57d10-6378-44f4-b99b-02744ce81093","timestamp":"2026-11-27T17:50:06.000Z","cwd":"/tmp/tmp_cqmxq51/nodes/np-63d440da4c86/work","message":{"id":"msg_e6905518-ff1d-42c6-8569-9a3e736fa10d","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795801806033
5	-tmp-tmp-cqmxq51-nodes-np-a1ddc5db86ec-work	1f613b74-ba0b-49c3-8f00-ee6023012a8c		aea10b41-a584-483b-970c-8cfa3e237e83	{"type":"user","uuid":"aea10b41-a584-483b-970c-8cfa3e237e83","parentUuid":null,"sessionId":"1f613b74-ba0b-49c3-8f00-ee6023012a8c","timestamp":"2026-11-27T17:50:06.000Z","cwd":"/tmp/tmp_cqmxq51/nodes/np-a1ddc5db86ec/work","message":{"role":"user","content":"keep"}}	1795801806239
6	-tmp-tmp-cqmxq51-nodes-np-a1ddc5db86ec-work	1f613b74-ba0b-49c3-8f00-ee6023012a8c		6a3cf591-220f-49bc-b021-0bc1c704c0cc	{"type":"assistant","uuid":"6a3cf591-220f-49bc-b021-0bc1c704c0cc","parentUuid":"aea10b41-a584-483b-970c-8cfa3e237e83","sessionId":"1f613b74-ba0b-49c3-8f00-ee6023012a8c","timestamp":"2026-11-27T17:50:06.000Z","cwd":"/tmp/tmp_cqmxq51/nodes/np-a1ddc5db86ec/work","message":{"id":"msg_276a2f63-a0f1-495e-8c03-1965b1393a40","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"working"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795801806239
7	-tmp-tmp-cqmxq51-nodes-np-d3eb4c1f5c98-work	845661a3-4a79-4e17-ad43-401fc35af198		2386e497-551d-4f1e-872e-24e7f643d935	{"type":"user","uuid":"2386e497-551d-4f1e-872e-24e7f643d935","parentUuid":null,"sessionId":"845661a3-4a79-4e17-ad43-401fc35af198","timestamp":"2026-11-27T17:50:06.000Z","cwd":"/tmp/tmp_cqmxq51/nodes/np-d3eb4c1f5c98/work","message":{"role":"user","content":"release"}}	1795801806384
8	-tmp-tmp-cqmxq51-pool-np-78c02e1da59d-work	0f8a00aa-3387-402d-92ca-c4d6250256f2		867e9b16-3f1e-459f-84a0-51e8e1bca0a6	{"type":"user","uuid":"867e9b16-3f1e-459f-84a0-51e8e1bca0a6","parentUuid":null,"sessionId":"0f8a00aa-3387-402d-92ca-c4d6250256f2","timestamp":"2026-11-27T17:50:06.000Z","cwd":"/tmp/tmp_cqmxq51/pool/np-78c02e1da59d/work","message":{"role":"user","content":"from the pool"}}	1795801806642
9	-tmp-tmp-cqmxq51-pool-np-78c02e1da59d-work	0f8a00aa-3387-402d-92ca-c4d6250256f2		34303ca0-e5d1-49cd-a999-51bf735f5de2	{"type":"assistant","uuid":"34303ca0-e5d1-49cd-a999-51bf735f5de2","parentUuid":"867e9b16-3f1e-459f-84a0-51e8e1bca0a6","sessionId":"0f8a00aa-3387-402d-92ca-c4d6250256f2","timestamp":"2026-11-27T17:50:06.000Z","cwd":"/tmp/tmp_cqmxq51/pool/np-78c02e1da59d/work","message":{"id":"msg_b791f83a-7f26-4166-ac5f-1cf6a163da3c","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"warm"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795801806642
\.


--
-- Data for Name: transcript_summaries; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.transcript_summaries (project_key, session_id, mtime, data) FROM stdin;
-tmp-tmp-cqmxq51-nodes-np-d5ce3abf74fc-work	709679f6-8247-47b6-a21d-caed2ff68d34	1795801805892	{"is_sidechain":false,"created_at":1795801805000,"cwd":"/tmp/tmp_cqmxq51/nodes/np-d5ce3abf74fc/work","first_prompt":"look at this","first_prompt_locked":true}
-tmp-tmp-cqmxq51-nodes-np-63d440da4c86-work	0dc57d10-6378-44f4-b99b-02744ce81093	1795801806033	{"is_sidechain":false,"created_at":1795801806000,"cwd":"/tmp/tmp_cqmxq51/nodes/np-63d440da4c86/work","first_prompt":"fail","first_prompt_locked":true}
-tmp-tmp-cqmxq51-nodes-np-a1ddc5db86ec-work	1f613b74-ba0b-49c3-8f00-ee6023012a8c	1795801806239	{"is_sidechain":false,"created_at":1795801806000,"cwd":"/tmp/tmp_cqmxq51/nodes/np-a1ddc5db86ec/work","first_prompt":"keep","first_prompt_locked":true}
-tmp-tmp-cqmxq51-nodes-np-d3eb4c1f5c98-work	845661a3-4a79-4e17-ad43-401fc35af198	1795801806384	{"is_sidechain":false,"created_at":1795801806000,"cwd":"/tmp/tmp_cqmxq51/nodes/np-d3eb4c1f5c98/work","first_prompt":"release","first_prompt_locked":true}
-tmp-tmp-cqmxq51-pool-np-78c02e1da59d-work	0f8a00aa-3387-402d-92ca-c4d6250256f2	1795801806642	{"is_sidechain":false,"created_at":1795801806000,"cwd":"/tmp/tmp_cqmxq51/pool/np-78c02e1da59d/work","first_prompt":"from the pool","first_prompt_locked":true}
\.


--
-- Data for Name: workspaces; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.workspaces (id, created_at) FROM stdin;
default	2026-11-27T17:50:05.164805+00:00
\.


--
-- Name: transcript_entries_seq_seq; Type: SEQUENCE SET; Schema: nodeprov_fixture; Owner: -
--

SELECT pg_catalog.setval('nodeprov_fixture.transcript_entries_seq_seq', 9, true);


--
-- Name: api_tokens api_tokens_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);


--
-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, key);


--
-- Name: images images_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.images
    ADD CONSTRAINT images_pkey PRIMARY KEY (sha256);


--
-- Name: leases leases_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (id);


--
-- Name: nodes nodes_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (id);


--
-- Name: pool_nodes pool_nodes_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.pool_nodes
    ADD CONSTRAINT pool_nodes_pkey PRIMARY KEY (id);


--
-- Name: pools pools_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.pools
    ADD CONSTRAINT pools_pkey PRIMARY KEY (name);


--
-- Name: run_events run_events_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.run_events
    ADD CONSTRAINT run_events_pkey PRIMARY KEY (run_id, seq);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: sessions sessions_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (id);


--
-- Name: snapshots snapshots_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.snapshots
    ADD CONSTRAINT snapshots_pkey PRIMARY KEY (token);


--
-- Name: transcript_entries transcript_entries_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.transcript_entries
    ADD CONSTRAINT transcript_entries_pkey PRIMARY KEY (seq);


--
-- Name: transcript_summaries transcript_summaries_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.transcript_summaries
    ADD CONSTRAINT transcript_summaries_pkey PRIMARY KEY (project_key, session_id);


--
-- Name: workspaces workspaces_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.workspaces
    ADD CONSTRAINT workspaces_pkey PRIMARY KEY (id);


--
-- Name: api_tokens_secret; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE UNIQUE INDEX api_tokens_secret ON nodeprov_fixture.api_tokens USING btree (secret_sha256);


--
-- Name: idempotency_keys_created; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX idempotency_keys_created ON nodeprov_fixture.idempotency_keys USING btree (created_at);


--
-- Name: nodes_run; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX nodes_run ON nodeprov_fixture.nodes USING btree (run_id);


--
-- Name: nodes_state; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX nodes_state ON nodeprov_fixture.nodes USING btree (state);


--
-- Name: pool_nodes_pool; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX pool_nodes_pool ON nodeprov_fixture.pool_nodes USING btree (pool, state);


--
-- Name: pool_nodes_run; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX pool_nodes_run ON nodeprov_fixture.pool_nodes USING btree (run_id);


--
-- Name: runs_owner; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX runs_owner ON nodeprov_fixture.runs USING btree (owner) WHERE (pause_request IS NOT NULL);


--
-- Name: runs_state; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX runs_state ON nodeprov_fixture.runs USING btree (state);


--
-- Name: sessions_one_active; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE UNIQUE INDEX sessions_one_active ON nodeprov_fixture.sessions USING btree (workspace_id) WHERE (state = 'active'::text);


--
-- Name: transcript_key; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX transcript_key ON nodeprov_fixture.transcript_entries USING btree (project_key, session_id, subpath, seq);


--
-- Name: transcript_uuid; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE UNIQUE INDEX transcript_uuid ON nodeprov_fixture.transcript_entries USING btree (project_key, session_id, subpath, uuid) WHERE (uuid IS NOT NULL);


--
-- Name: nodes nodes_run_id_fkey; Type: FK CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.nodes
    ADD CONSTRAINT nodes_run_id_fkey FOREIGN KEY (run_id) REFERENCES nodeprov_fixture.runs(id);


--
-- Name: pool_nodes pool_nodes_pool_fkey; Type: FK CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.pool_nodes
    ADD CONSTRAINT pool_nodes_pool_fkey FOREIGN KEY (pool) REFERENCES nodeprov_fixture.pools(name);


--
-- Name: run_events run_events_run_id_fkey; Type: FK CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.run_events
    ADD CONSTRAINT run_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES nodeprov_fixture.runs(id);


--
-- Name: runs runs_session_id_fkey; Type: FK CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.runs
    ADD CONSTRAINT runs_session_id_fkey FOREIGN KEY (session_id) REFERENCES nodeprov_fixture.sessions(id);


--
-- Name: runs runs_workspace_id_fkey; Type: FK CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.runs
    ADD CONSTRAINT runs_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES nodeprov_fixture.workspaces(id);


--
-- Name: sessions sessions_workspace_id_fkey; Type: FK CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.sessions
    ADD CONSTRAINT sessions_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES nodeprov_fixture.workspaces(id);


--
-- Name: snapshots snapshots_run_id_fkey; Type: FK CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.snapshots
    ADD CONSTRAINT snapshots_run_id_fkey FOREIGN KEY (run_id) REFERENCES nodeprov_fixture.runs(id);


--
-- PostgreSQL database dump complete
--

\unrestrict vHoLO15SxAZuseHclxsdM2RZL75NtAa9x7z7V7OwO9jujQphnvRddxbU0ncAG6H

