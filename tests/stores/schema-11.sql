--
-- PostgreSQL database dump
--

\restrict cUf0SKBmGnAvP5SRGFRPb1S76Vo8c5Khj7yxbKxylW3u2EyhyjJVENvbqCU4diw

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
-- Name: api_owners; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.api_owners (
    kind text NOT NULL,
    id text NOT NULL,
    tenant text NOT NULL,
    provider text,
    created_at text NOT NULL,
    expires_at text
);


--
-- Name: api_tokens; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.api_tokens (
    id text NOT NULL,
    name text NOT NULL,
    scopes text NOT NULL,
    secret_sha256 text NOT NULL,
    created_at text NOT NULL,
    revoked_at text,
    tenant text DEFAULT 'default'::text NOT NULL
);


--
-- Name: audit; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.audit (
    seq bigint NOT NULL,
    at text NOT NULL,
    tenant text NOT NULL,
    token_id text NOT NULL,
    token_name text NOT NULL,
    action text NOT NULL,
    resource text NOT NULL,
    detail text NOT NULL
);


--
-- Name: audit_seq_seq; Type: SEQUENCE; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE nodeprov_fixture.audit ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME nodeprov_fixture.audit_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
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
-- Name: image_refs; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.image_refs (
    sha256 text NOT NULL,
    run_id text NOT NULL
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
-- Name: store_meta; Type: TABLE; Schema: nodeprov_fixture; Owner: -
--

CREATE TABLE nodeprov_fixture.store_meta (
    key text NOT NULL,
    value text NOT NULL
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
-- Data for Name: api_owners; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.api_owners (kind, id, tenant, provider, created_at, expires_at) FROM stdin;
\.


--
-- Data for Name: api_tokens; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.api_tokens (id, name, scopes, secret_sha256, created_at, revoked_at, tenant) FROM stdin;
tok-d979debd2d63	ci	["read", "runs"]	b945a8aa8d081462e0bf0bf0e276fb8d1a591300548f3abdf99b9ba07a6c5073	2026-11-28T01:39:31.161692+00:00	\N	default
tok-347523a59525	old	["admin"]	f01494df0263689746e8b2c7ae90df0fb44517bde3d6e27d614a52ac2796ccff	2026-11-28T01:39:31.162859+00:00	2026-11-28T01:39:31.163475+00:00	default
\.


--
-- Data for Name: audit; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.audit (seq, at, tenant, token_id, token_name, action, resource, detail) FROM stdin;
\.


--
-- Data for Name: idempotency_keys; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.idempotency_keys (scope, key, kind, fingerprint, resource_id, holder, state, response, created_at) FROM stdin;
token:tok-d979debd2d63	key-1	run	f	run-665d0e099a1ee072	me	pending	\N	2026-11-28T01:39:31.164159+00:00
\.


--
-- Data for Name: image_refs; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.image_refs (sha256, run_id) FROM stdin;
c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77	run-665d0e099a1ee072
\.


--
-- Data for Name: images; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.images (sha256, media_type, size, data, created_at) FROM stdin;
c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77	image/png	70	\\x89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63fccfc0500f000485018084a98c210000000049454e44ae426082	2026-11-28T01:39:30.106868+00:00
\.


--
-- Data for Name: leases; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.leases (id, holder, created_at, heartbeat_ms, expires_ms, released) FROM stdin;
lease-b9646d04dac8e75f	vm pid 2561	2026-11-28T01:39:30.055260+00:00	1795829970056	1795829971161	1
\.


--
-- Data for Name: nodes; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.nodes (id, provider, run_id, state, created_at, updated_at, keep_until_ms) FROM stdin;
np-8426d17c415c	local	run-665d0e099a1ee072	destroyed	2026-11-28T01:39:30.121646+00:00	2026-11-28T01:39:30.627323+00:00	\N
np-3d480bcc417c	local	run-1e122a07b9183c17	destroyed	2026-11-28T01:39:30.633378+00:00	2026-11-28T01:39:30.711546+00:00	\N
np-cd0225378155	local	run-3c5c4a7acff0b16b	kept	2026-11-28T01:39:30.718000+00:00	2026-11-28T01:39:30.789061+00:00	1795916370019
np-efa2560f8214	local	run-ce414c47170a8e24	destroyed	2026-11-28T01:39:30.795556+00:00	2026-11-28T01:39:30.871212+00:00	\N
np-07b32114e57d	local	run-2c6cb8408e9de994	destroyed	2026-11-28T01:39:30.938485+00:00	2026-11-28T01:39:30.994880+00:00	\N
\.


--
-- Data for Name: pool_nodes; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.pool_nodes (id, pool, state, owner, ready_ms, run_id, updated_at) FROM stdin;
np-07b32114e57d	warm	claimed	lease:lease-b9646d04dac8e75f	1795829970884	run-2c6cb8408e9de994	2026-11-28T01:39:30.938485+00:00
np-cd4ef8f36848	warm	ready	lease:lease-b9646d04dac8e75f	1795829971151	\N	2026-11-28T01:39:31.150062+00:00
\.


--
-- Data for Name: pools; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.pools (name, provider, provider_settings, secret_fields, node_config, size, max_age, refill_concurrency, state, holder, error, retry_at_ms, failures, created_at) FROM stdin;
warm	local	{"root": "/tmp/tmpoqyh9h93/pool"}	[]	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	1	3600	2	active	lease:lease-b9646d04dac8e75f	\N	\N	0	2026-11-28T01:39:30.874503+00:00
\.


--
-- Data for Name: run_events; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.run_events (run_id, seq, kind, at, body) FROM stdin;
run-665d0e099a1ee072	1	run.started	2026-11-28T01:39:30.116045+00:00	{"type":"run.started","run_id":"run-665d0e099a1ee072","seq":1,"at":"2026-11-28T01:39:30.116045+00:00","prompt":"look at this","provider":"local","resumed_from":null,"agent":"claude","images":[{"type":"image","sha256":"c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77","media_type":"image/png","size":70}]}
run-665d0e099a1ee072	2	node.ready	2026-11-28T01:39:30.328711+00:00	{"type":"node.ready","run_id":"run-665d0e099a1ee072","seq":2,"at":"2026-11-28T01:39:30.328711+00:00","node_id":"np-8426d17c415c","reused":false,"transcript_restored":false,"pool":null}
run-665d0e099a1ee072	3	agent.message	2026-11-28T01:39:30.613263+00:00	{"type":"agent.message","run_id":"run-665d0e099a1ee072","seq":3,"at":"2026-11-28T01:39:30.613263+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpoqyh9h93/nodes/np-8426d17c415c/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"64a443f5-ee8d-4dbc-b971-4b41e66f5ed7","uuid":"50139c09-083e-48c9-90ab-eac2b7573f99"},"subtype":"init","text":"/tmp/tmpoqyh9h93/nodes/np-8426d17c415c/work","session_id":"64a443f5-ee8d-4dbc-b971-4b41e66f5ed7","retry":false}}
run-665d0e099a1ee072	4	agent.message	2026-11-28T01:39:30.619086+00:00	{"type":"agent.message","run_id":"run-665d0e099a1ee072","seq":4,"at":"2026-11-28T01:39:30.619086+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_dfb9fbe8-d78b-4577-b680-28a741c095a9","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"a red dot"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"64a443f5-ee8d-4dbc-b971-4b41e66f5ed7","uuid":"f189a806-9082-4654-a7c7-7f783714b7c4"},"text":"a red dot"}}
run-665d0e099a1ee072	5	agent.message	2026-11-28T01:39:30.619128+00:00	{"type":"agent.message","run_id":"run-665d0e099a1ee072","seq":5,"at":"2026-11-28T01:39:30.619128+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":false,"duration_ms":0,"duration_api_ms":0,"num_turns":1,"session_id":"64a443f5-ee8d-4dbc-b971-4b41e66f5ed7","stop_reason":"end_turn","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"dc058533-dbce-4321-823c-f0be51eaad76","result":"a red dot"},"is_error":false,"text":"a red dot","session_id":"64a443f5-ee8d-4dbc-b971-4b41e66f5ed7","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-665d0e099a1ee072	6	node.released	2026-11-28T01:39:30.628055+00:00	{"type":"node.released","run_id":"run-665d0e099a1ee072","seq":6,"at":"2026-11-28T01:39:30.628055+00:00","node_id":"np-8426d17c415c","kept":false,"suspended":false}
run-665d0e099a1ee072	7	run.finished	2026-11-28T01:39:30.628790+00:00	{"type":"run.finished","run_id":"run-665d0e099a1ee072","seq":7,"at":"2026-11-28T01:39:30.628790+00:00","outcome":"ok","error":null,"agent_session_id":"64a443f5-ee8d-4dbc-b971-4b41e66f5ed7"}
run-1e122a07b9183c17	1	run.started	2026-11-28T01:39:30.632957+00:00	{"type":"run.started","run_id":"run-1e122a07b9183c17","seq":1,"at":"2026-11-28T01:39:30.632957+00:00","prompt":"fail","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-1e122a07b9183c17	2	node.ready	2026-11-28T01:39:30.637257+00:00	{"type":"node.ready","run_id":"run-1e122a07b9183c17","seq":2,"at":"2026-11-28T01:39:30.637257+00:00","node_id":"np-3d480bcc417c","reused":false,"transcript_restored":false,"pool":null}
run-1e122a07b9183c17	3	agent.message	2026-11-28T01:39:30.681551+00:00	{"type":"agent.message","run_id":"run-1e122a07b9183c17","seq":3,"at":"2026-11-28T01:39:30.681551+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpoqyh9h93/nodes/np-3d480bcc417c/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"5979029f-3734-443a-854f-99f8e4702fb7","uuid":"f4f6e823-3377-4b18-a80d-571916c4590a"},"subtype":"init","text":"/tmp/tmpoqyh9h93/nodes/np-3d480bcc417c/work","session_id":"5979029f-3734-443a-854f-99f8e4702fb7","retry":false}}
run-1e122a07b9183c17	4	agent.message	2026-11-28T01:39:30.685200+00:00	{"type":"agent.message","run_id":"run-1e122a07b9183c17","seq":4,"at":"2026-11-28T01:39:30.685200+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_c25da812-5dc1-4225-ae3e-728ad36a0d29","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"5979029f-3734-443a-854f-99f8e4702fb7","uuid":"7caa2dff-1110-4d55-bc98-670b8a6f291f","error":"unknown","is_api_error_message":true},"text":"API Error: 500"}}
run-1e122a07b9183c17	5	agent.message	2026-11-28T01:39:30.685217+00:00	{"type":"agent.message","run_id":"run-1e122a07b9183c17","seq":5,"at":"2026-11-28T01:39:30.685217+00:00","message":{"kind":"error","raw":{"type":"assistant","message":{"id":"msg_c25da812-5dc1-4225-ae3e-728ad36a0d29","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"5979029f-3734-443a-854f-99f8e4702fb7","uuid":"7caa2dff-1110-4d55-bc98-670b8a6f291f","error":"unknown","is_api_error_message":true},"message":"unknown"}}
run-1e122a07b9183c17	6	agent.message	2026-11-28T01:39:30.685239+00:00	{"type":"agent.message","run_id":"run-1e122a07b9183c17","seq":6,"at":"2026-11-28T01:39:30.685239+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":true,"duration_ms":0,"duration_api_ms":0,"num_turns":1,"session_id":"5979029f-3734-443a-854f-99f8e4702fb7","stop_reason":"stop_sequence","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"85824751-c368-442a-b4d5-19f1316975a5","result":"API Error: 500","api_error_status":null},"is_error":true,"text":"API Error: 500","session_id":"5979029f-3734-443a-854f-99f8e4702fb7","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-1e122a07b9183c17	7	node.released	2026-11-28T01:39:30.712805+00:00	{"type":"node.released","run_id":"run-1e122a07b9183c17","seq":7,"at":"2026-11-28T01:39:30.712805+00:00","node_id":"np-3d480bcc417c","kept":false,"suspended":false}
run-1e122a07b9183c17	8	run.finished	2026-11-28T01:39:30.713670+00:00	{"type":"run.finished","run_id":"run-1e122a07b9183c17","seq":8,"at":"2026-11-28T01:39:30.713670+00:00","outcome":"error","error":"API Error: 500","agent_session_id":"5979029f-3734-443a-854f-99f8e4702fb7"}
run-3c5c4a7acff0b16b	1	run.started	2026-11-28T01:39:30.717338+00:00	{"type":"run.started","run_id":"run-3c5c4a7acff0b16b","seq":1,"at":"2026-11-28T01:39:30.717338+00:00","prompt":"keep","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-3c5c4a7acff0b16b	2	node.ready	2026-11-28T01:39:30.721761+00:00	{"type":"node.ready","run_id":"run-3c5c4a7acff0b16b","seq":2,"at":"2026-11-28T01:39:30.721761+00:00","node_id":"np-cd0225378155","reused":false,"transcript_restored":false,"pool":null}
run-3c5c4a7acff0b16b	3	agent.message	2026-11-28T01:39:30.762195+00:00	{"type":"agent.message","run_id":"run-3c5c4a7acff0b16b","seq":3,"at":"2026-11-28T01:39:30.762195+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpoqyh9h93/nodes/np-cd0225378155/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"fd0f760a-c504-4304-a900-77641161342a","uuid":"b599589a-2e78-48c5-b9fb-e301fc4ef8d3"},"subtype":"init","text":"/tmp/tmpoqyh9h93/nodes/np-cd0225378155/work","session_id":"fd0f760a-c504-4304-a900-77641161342a","retry":false}}
run-3c5c4a7acff0b16b	4	agent.message	2026-11-28T01:39:30.764628+00:00	{"type":"agent.message","run_id":"run-3c5c4a7acff0b16b","seq":4,"at":"2026-11-28T01:39:30.764628+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_ad7444d0-1c9a-4df5-b125-b34a231baff6","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"working"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"fd0f760a-c504-4304-a900-77641161342a","uuid":"ae281213-6e5a-4354-abe9-4e50b629a882"},"text":"working"}}
run-3c5c4a7acff0b16b	5	node.released	2026-11-28T01:39:30.790608+00:00	{"type":"node.released","run_id":"run-3c5c4a7acff0b16b","seq":5,"at":"2026-11-28T01:39:30.790608+00:00","node_id":"np-cd0225378155","kept":true,"suspended":false}
run-3c5c4a7acff0b16b	6	run.paused	2026-11-28T01:39:30.791461+00:00	{"type":"run.paused","run_id":"run-3c5c4a7acff0b16b","seq":6,"at":"2026-11-28T01:39:30.791461+00:00","pause_kind":"human","reason":"overnight","token":"tok-Sl-Xzn-JW9N9Ve9efMAU8jDd_cvS7KjS","node_kept":true}
run-3c5c4a7acff0b16b	7	run.finished	2026-11-28T01:39:30.791516+00:00	{"type":"run.finished","run_id":"run-3c5c4a7acff0b16b","seq":7,"at":"2026-11-28T01:39:30.791516+00:00","outcome":"paused","error":null,"agent_session_id":"fd0f760a-c504-4304-a900-77641161342a"}
run-ce414c47170a8e24	1	run.started	2026-11-28T01:39:30.794922+00:00	{"type":"run.started","run_id":"run-ce414c47170a8e24","seq":1,"at":"2026-11-28T01:39:30.794922+00:00","prompt":"release","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-ce414c47170a8e24	2	node.ready	2026-11-28T01:39:30.799788+00:00	{"type":"node.ready","run_id":"run-ce414c47170a8e24","seq":2,"at":"2026-11-28T01:39:30.799788+00:00","node_id":"np-efa2560f8214","reused":false,"transcript_restored":false,"pool":null}
run-ce414c47170a8e24	3	agent.message	2026-11-28T01:39:30.841544+00:00	{"type":"agent.message","run_id":"run-ce414c47170a8e24","seq":3,"at":"2026-11-28T01:39:30.841544+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpoqyh9h93/nodes/np-efa2560f8214/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"aafb0f2b-ccd3-4447-8c85-04f0ed925492","uuid":"29b42270-c747-4972-98c2-dd0160eec354"},"subtype":"init","text":"/tmp/tmpoqyh9h93/nodes/np-efa2560f8214/work","session_id":"aafb0f2b-ccd3-4447-8c85-04f0ed925492","retry":false}}
run-ce414c47170a8e24	4	node.released	2026-11-28T01:39:30.872243+00:00	{"type":"node.released","run_id":"run-ce414c47170a8e24","seq":4,"at":"2026-11-28T01:39:30.872243+00:00","node_id":"np-efa2560f8214","kept":false,"suspended":false}
run-ce414c47170a8e24	5	run.paused	2026-11-28T01:39:30.873014+00:00	{"type":"run.paused","run_id":"run-ce414c47170a8e24","seq":5,"at":"2026-11-28T01:39:30.873014+00:00","pause_kind":"external","reason":"budget","token":"tok-rNcYSYIoGHmiJslU5l6dfj5h5oUSiXR9","node_kept":false}
run-ce414c47170a8e24	6	run.finished	2026-11-28T01:39:30.873064+00:00	{"type":"run.finished","run_id":"run-ce414c47170a8e24","seq":6,"at":"2026-11-28T01:39:30.873064+00:00","outcome":"paused","error":null,"agent_session_id":"aafb0f2b-ccd3-4447-8c85-04f0ed925492"}
run-2c6cb8408e9de994	1	run.started	2026-11-28T01:39:30.938093+00:00	{"type":"run.started","run_id":"run-2c6cb8408e9de994","seq":1,"at":"2026-11-28T01:39:30.938093+00:00","prompt":"from the pool","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-2c6cb8408e9de994	2	node.ready	2026-11-28T01:39:30.940731+00:00	{"type":"node.ready","run_id":"run-2c6cb8408e9de994","seq":2,"at":"2026-11-28T01:39:30.940731+00:00","node_id":"np-07b32114e57d","reused":false,"transcript_restored":false,"pool":"warm"}
run-2c6cb8408e9de994	3	agent.message	2026-11-28T01:39:30.983742+00:00	{"type":"agent.message","run_id":"run-2c6cb8408e9de994","seq":3,"at":"2026-11-28T01:39:30.983742+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpoqyh9h93/pool/np-07b32114e57d/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"a5571e22-5d06-492f-8de8-d8296564b17f","uuid":"f3ca38a2-4454-4522-ae92-90b70cb5ba7f"},"subtype":"init","text":"/tmp/tmpoqyh9h93/pool/np-07b32114e57d/work","session_id":"a5571e22-5d06-492f-8de8-d8296564b17f","retry":false}}
run-2c6cb8408e9de994	4	agent.message	2026-11-28T01:39:30.987606+00:00	{"type":"agent.message","run_id":"run-2c6cb8408e9de994","seq":4,"at":"2026-11-28T01:39:30.987606+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_8b27784c-f126-4a8a-bc7a-3afaa3e8effe","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"warm"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"a5571e22-5d06-492f-8de8-d8296564b17f","uuid":"38e2087f-4a8e-4e5b-8a61-6b970db566ae"},"text":"warm"}}
run-2c6cb8408e9de994	5	agent.message	2026-11-28T01:39:30.987645+00:00	{"type":"agent.message","run_id":"run-2c6cb8408e9de994","seq":5,"at":"2026-11-28T01:39:30.987645+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":false,"duration_ms":0,"duration_api_ms":0,"num_turns":1,"session_id":"a5571e22-5d06-492f-8de8-d8296564b17f","stop_reason":"end_turn","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"34a511cf-f64d-4984-907c-c5d1e45d9934","result":"warm"},"is_error":false,"text":"warm","session_id":"a5571e22-5d06-492f-8de8-d8296564b17f","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-2c6cb8408e9de994	6	node.released	2026-11-28T01:39:30.995895+00:00	{"type":"node.released","run_id":"run-2c6cb8408e9de994","seq":6,"at":"2026-11-28T01:39:30.995895+00:00","node_id":"np-07b32114e57d","kept":false,"suspended":false}
run-2c6cb8408e9de994	7	run.finished	2026-11-28T01:39:30.996677+00:00	{"type":"run.finished","run_id":"run-2c6cb8408e9de994","seq":7,"at":"2026-11-28T01:39:30.996677+00:00","outcome":"ok","error":null,"agent_session_id":"a5571e22-5d06-492f-8de8-d8296564b17f"}
\.


--
-- Data for Name: runs; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.runs (id, session_id, workspace_id, prompt, node_provider, node_settings, agent_options, state, outcome, error, node_id, agent_session_id, project_key, owner, pause_request, created_at, updated_at, node_secret_fields, agent, node_config, prompt_blocks, agent_keeper) FROM stdin;
run-665d0e099a1ee072	ses-6979985e8f5666fc	default	look at this	local	{"root": "/tmp/tmpoqyh9h93/nodes"}	{"cli_path": "/tmp/tmpoqyh9h93/fake-agent"}	finished	ok	\N	np-8426d17c415c	64a443f5-ee8d-4dbc-b971-4b41e66f5ed7	-tmp-tmpoqyh9h93-nodes-np-8426d17c415c-work	lease:lease-b9646d04dac8e75f	\N	2026-11-28T01:39:30.104842+00:00	2026-11-28T01:39:30.628111+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[{"type": "text", "text": "look at this"}, {"type": "image", "sha256": "c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77", "media_type": "image/png", "size": 70}]	\N
run-1e122a07b9183c17	ses-6979985e8f5666fc	default	fail	local	{"root": "/tmp/tmpoqyh9h93/nodes"}	{"cli_path": "/tmp/tmpoqyh9h93/fake-agent"}	failed	error	API Error: 500	np-3d480bcc417c	5979029f-3734-443a-854f-99f8e4702fb7	-tmp-tmpoqyh9h93-nodes-np-3d480bcc417c-work	lease:lease-b9646d04dac8e75f	\N	2026-11-28T01:39:30.631453+00:00	2026-11-28T01:39:30.712869+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N
run-3c5c4a7acff0b16b	ses-6979985e8f5666fc	default	keep	local	{"root": "/tmp/tmpoqyh9h93/nodes"}	{"cli_path": "/tmp/tmpoqyh9h93/fake-agent"}	paused	paused	\N	np-cd0225378155	fd0f760a-c504-4304-a900-77641161342a	-tmp-tmpoqyh9h93-nodes-np-cd0225378155-work	lease:lease-b9646d04dac8e75f	\N	2026-11-28T01:39:30.715971+00:00	2026-11-28T01:39:30.790682+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N
run-ce414c47170a8e24	ses-6979985e8f5666fc	default	release	local	{"root": "/tmp/tmpoqyh9h93/nodes"}	{"cli_path": "/tmp/tmpoqyh9h93/fake-agent"}	paused	paused	\N	np-efa2560f8214	aafb0f2b-ccd3-4447-8c85-04f0ed925492	-tmp-tmpoqyh9h93-nodes-np-efa2560f8214-work	lease:lease-b9646d04dac8e75f	\N	2026-11-28T01:39:30.793720+00:00	2026-11-28T01:39:30.872311+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N
run-2c6cb8408e9de994	ses-6979985e8f5666fc	default	from the pool	local	{"root": "/tmp/tmpoqyh9h93/pool"}	{"cli_path": "/tmp/tmpoqyh9h93/fake-agent"}	finished	ok	\N	np-07b32114e57d	a5571e22-5d06-492f-8de8-d8296564b17f	-tmp-tmpoqyh9h93-pool-np-07b32114e57d-work	lease:lease-b9646d04dac8e75f	\N	2026-11-28T01:39:30.936617+00:00	2026-11-28T01:39:30.995953+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N
\.


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.schema_migrations (version, applied_at) FROM stdin;
1	2026-11-28T01:39:30.020628+00:00
2	2026-11-28T01:39:30.024901+00:00
3	2026-11-28T01:39:30.025376+00:00
4	2026-11-28T01:39:30.025878+00:00
5	2026-11-28T01:39:30.026886+00:00
6	2026-11-28T01:39:30.028492+00:00
7	2026-11-28T01:39:30.032321+00:00
8	2026-11-28T01:39:30.032772+00:00
9	2026-11-28T01:39:30.036703+00:00
10	2026-11-28T01:39:30.048322+00:00
11	2026-11-28T01:39:30.053556+00:00
\.


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.sessions (id, workspace_id, provider, provider_session_id, state, created_at, archived_at) FROM stdin;
ses-6979985e8f5666fc	default	claude	a5571e22-5d06-492f-8de8-d8296564b17f	active	2026-11-28T01:39:30.075364+00:00	\N
\.


--
-- Data for Name: snapshots; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.snapshots (token, run_id, node_id, node_kept, provider, agent_session_id, project_key, state, pause_kind, reason, created_at, used_at, agent) FROM stdin;
tok-F3xBaDeY20duW_1s0F-OO60rlSDk1bil	run-1e122a07b9183c17	np-3d480bcc417c	0	local	5979029f-3734-443a-854f-99f8e4702fb7	-tmp-tmpoqyh9h93-nodes-np-3d480bcc417c-work	running	system	API Error: 500	2026-11-28T01:39:30.690463+00:00	\N	claude
tok-Sl-Xzn-JW9N9Ve9efMAU8jDd_cvS7KjS	run-3c5c4a7acff0b16b	np-cd0225378155	1	local	fd0f760a-c504-4304-a900-77641161342a	-tmp-tmpoqyh9h93-nodes-np-cd0225378155-work	pausing	human	overnight	2026-11-28T01:39:30.771207+00:00	\N	claude
tok-rNcYSYIoGHmiJslU5l6dfj5h5oUSiXR9	run-ce414c47170a8e24	np-efa2560f8214	0	local	aafb0f2b-ccd3-4447-8c85-04f0ed925492	-tmp-tmpoqyh9h93-nodes-np-efa2560f8214-work	pausing	external	budget	2026-11-28T01:39:30.851973+00:00	\N	claude
\.


--
-- Data for Name: store_meta; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.store_meta (key, value) FROM stdin;
\.


--
-- Data for Name: transcript_entries; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.transcript_entries (seq, project_key, session_id, subpath, uuid, entry, written_ms) FROM stdin;
1	-tmp-tmpoqyh9h93-nodes-np-8426d17c415c-work	64a443f5-ee8d-4dbc-b971-4b41e66f5ed7		8c713df4-ff7c-4327-84ea-7288add49107	{"type":"user","uuid":"8c713df4-ff7c-4327-84ea-7288add49107","parentUuid":null,"sessionId":"64a443f5-ee8d-4dbc-b971-4b41e66f5ed7","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/nodes/np-8426d17c415c/work","message":{"role":"user","content":[{"type":"text","text":"look at this"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="}}]}}	1795829970616
2	-tmp-tmpoqyh9h93-nodes-np-8426d17c415c-work	64a443f5-ee8d-4dbc-b971-4b41e66f5ed7		f189a806-9082-4654-a7c7-7f783714b7c4	{"type":"assistant","uuid":"f189a806-9082-4654-a7c7-7f783714b7c4","parentUuid":"8c713df4-ff7c-4327-84ea-7288add49107","sessionId":"64a443f5-ee8d-4dbc-b971-4b41e66f5ed7","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/nodes/np-8426d17c415c/work","message":{"id":"msg_dfb9fbe8-d78b-4577-b680-28a741c095a9","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"a red dot"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795829970616
3	-tmp-tmpoqyh9h93-nodes-np-3d480bcc417c-work	5979029f-3734-443a-854f-99f8e4702fb7		5479db0a-8876-48b5-85af-e3adb10714e5	{"type":"user","uuid":"5479db0a-8876-48b5-85af-e3adb10714e5","parentUuid":null,"sessionId":"5979029f-3734-443a-854f-99f8e4702fb7","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/nodes/np-3d480bcc417c/work","message":{"role":"user","content":"fail"}}	1795829970683
4	-tmp-tmpoqyh9h93-nodes-np-3d480bcc417c-work	5979029f-3734-443a-854f-99f8e4702fb7		7caa2dff-1110-4d55-bc98-670b8a6f291f	{"type":"assistant","uuid":"7caa2dff-1110-4d55-bc98-670b8a6f291f","parentUuid":"5479db0a-8876-48b5-85af-e3adb10714e5","sessionId":"5979029f-3734-443a-854f-99f8e4702fb7","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/nodes/np-3d480bcc417c/work","message":{"id":"msg_c25da812-5dc1-4225-ae3e-728ad36a0d29","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795829970683
5	-tmp-tmpoqyh9h93-nodes-np-cd0225378155-work	fd0f760a-c504-4304-a900-77641161342a		7aaf1f91-8bca-4a4e-8c37-880a4b70b334	{"type":"user","uuid":"7aaf1f91-8bca-4a4e-8c37-880a4b70b334","parentUuid":null,"sessionId":"fd0f760a-c504-4304-a900-77641161342a","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/nodes/np-cd0225378155/work","message":{"role":"user","content":"keep"}}	1795829970768
6	-tmp-tmpoqyh9h93-nodes-np-cd0225378155-work	fd0f760a-c504-4304-a900-77641161342a		ae281213-6e5a-4354-abe9-4e50b629a882	{"type":"assistant","uuid":"ae281213-6e5a-4354-abe9-4e50b629a882","parentUuid":"7aaf1f91-8bca-4a4e-8c37-880a4b70b334","sessionId":"fd0f760a-c504-4304-a900-77641161342a","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/nodes/np-cd0225378155/work","message":{"id":"msg_ad7444d0-1c9a-4df5-b125-b34a231baff6","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"working"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795829970768
7	-tmp-tmpoqyh9h93-nodes-np-efa2560f8214-work	aafb0f2b-ccd3-4447-8c85-04f0ed925492		93052dde-c856-4fdf-9ee7-196d178db144	{"type":"user","uuid":"93052dde-c856-4fdf-9ee7-196d178db144","parentUuid":null,"sessionId":"aafb0f2b-ccd3-4447-8c85-04f0ed925492","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/nodes/np-efa2560f8214/work","message":{"role":"user","content":"release"}}	1795829970847
8	-tmp-tmpoqyh9h93-nodes-np-efa2560f8214-work	aafb0f2b-ccd3-4447-8c85-04f0ed925492		033f6862-d148-438a-b536-34af8ea8e00a	{"type":"assistant","uuid":"033f6862-d148-438a-b536-34af8ea8e00a","parentUuid":"93052dde-c856-4fdf-9ee7-196d178db144","sessionId":"aafb0f2b-ccd3-4447-8c85-04f0ed925492","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/nodes/np-efa2560f8214/work","message":{"id":"msg_388fa720-6b6a-4f83-b0e4-f25d09450abd","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"working"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795829970847
9	-tmp-tmpoqyh9h93-pool-np-07b32114e57d-work	a5571e22-5d06-492f-8de8-d8296564b17f		2fbed655-ccdb-4dee-88a2-09bf25a38a1b	{"type":"user","uuid":"2fbed655-ccdb-4dee-88a2-09bf25a38a1b","parentUuid":null,"sessionId":"a5571e22-5d06-492f-8de8-d8296564b17f","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/pool/np-07b32114e57d/work","message":{"role":"user","content":"from the pool"}}	1795829970985
10	-tmp-tmpoqyh9h93-pool-np-07b32114e57d-work	a5571e22-5d06-492f-8de8-d8296564b17f		38e2087f-4a8e-4e5b-8a61-6b970db566ae	{"type":"assistant","uuid":"38e2087f-4a8e-4e5b-8a61-6b970db566ae","parentUuid":"2fbed655-ccdb-4dee-88a2-09bf25a38a1b","sessionId":"a5571e22-5d06-492f-8de8-d8296564b17f","timestamp":"2026-11-28T01:39:30.000Z","cwd":"/tmp/tmpoqyh9h93/pool/np-07b32114e57d/work","message":{"id":"msg_8b27784c-f126-4a8a-bc7a-3afaa3e8effe","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"warm"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795829970985
\.


--
-- Data for Name: transcript_summaries; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.transcript_summaries (project_key, session_id, mtime, data) FROM stdin;
-tmp-tmpoqyh9h93-nodes-np-8426d17c415c-work	64a443f5-ee8d-4dbc-b971-4b41e66f5ed7	1795829970616	{"is_sidechain":false,"created_at":1795829970000,"cwd":"/tmp/tmpoqyh9h93/nodes/np-8426d17c415c/work","first_prompt":"look at this","first_prompt_locked":true}
-tmp-tmpoqyh9h93-nodes-np-3d480bcc417c-work	5979029f-3734-443a-854f-99f8e4702fb7	1795829970683	{"is_sidechain":false,"created_at":1795829970000,"cwd":"/tmp/tmpoqyh9h93/nodes/np-3d480bcc417c/work","first_prompt":"fail","first_prompt_locked":true}
-tmp-tmpoqyh9h93-nodes-np-cd0225378155-work	fd0f760a-c504-4304-a900-77641161342a	1795829970768	{"is_sidechain":false,"created_at":1795829970000,"cwd":"/tmp/tmpoqyh9h93/nodes/np-cd0225378155/work","first_prompt":"keep","first_prompt_locked":true}
-tmp-tmpoqyh9h93-nodes-np-efa2560f8214-work	aafb0f2b-ccd3-4447-8c85-04f0ed925492	1795829970847	{"is_sidechain":false,"created_at":1795829970000,"cwd":"/tmp/tmpoqyh9h93/nodes/np-efa2560f8214/work","first_prompt":"release","first_prompt_locked":true}
-tmp-tmpoqyh9h93-pool-np-07b32114e57d-work	a5571e22-5d06-492f-8de8-d8296564b17f	1795829970985	{"is_sidechain":false,"created_at":1795829970000,"cwd":"/tmp/tmpoqyh9h93/pool/np-07b32114e57d/work","first_prompt":"from the pool","first_prompt_locked":true}
\.


--
-- Data for Name: workspaces; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.workspaces (id, created_at) FROM stdin;
default	2026-11-28T01:39:30.075364+00:00
\.


--
-- Name: audit_seq_seq; Type: SEQUENCE SET; Schema: nodeprov_fixture; Owner: -
--

SELECT pg_catalog.setval('nodeprov_fixture.audit_seq_seq', 1, false);


--
-- Name: transcript_entries_seq_seq; Type: SEQUENCE SET; Schema: nodeprov_fixture; Owner: -
--

SELECT pg_catalog.setval('nodeprov_fixture.transcript_entries_seq_seq', 10, true);


--
-- Name: api_owners api_owners_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.api_owners
    ADD CONSTRAINT api_owners_pkey PRIMARY KEY (kind, id);


--
-- Name: api_tokens api_tokens_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);


--
-- Name: audit audit_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.audit
    ADD CONSTRAINT audit_pkey PRIMARY KEY (seq);


--
-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, key);


--
-- Name: image_refs image_refs_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.image_refs
    ADD CONSTRAINT image_refs_pkey PRIMARY KEY (sha256, run_id);


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
-- Name: store_meta store_meta_pkey; Type: CONSTRAINT; Schema: nodeprov_fixture; Owner: -
--

ALTER TABLE ONLY nodeprov_fixture.store_meta
    ADD CONSTRAINT store_meta_pkey PRIMARY KEY (key);


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
-- Name: api_owners_expires; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX api_owners_expires ON nodeprov_fixture.api_owners USING btree (expires_at);


--
-- Name: api_owners_tenant; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX api_owners_tenant ON nodeprov_fixture.api_owners USING btree (tenant, kind);


--
-- Name: api_tokens_secret; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE UNIQUE INDEX api_tokens_secret ON nodeprov_fixture.api_tokens USING btree (secret_sha256);


--
-- Name: audit_at; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX audit_at ON nodeprov_fixture.audit USING btree (at);


--
-- Name: audit_tenant; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX audit_tenant ON nodeprov_fixture.audit USING btree (tenant, seq);


--
-- Name: idempotency_keys_created; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX idempotency_keys_created ON nodeprov_fixture.idempotency_keys USING btree (created_at);


--
-- Name: idempotency_keys_holder; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX idempotency_keys_holder ON nodeprov_fixture.idempotency_keys USING btree (holder) WHERE (state = 'pending'::text);


--
-- Name: image_refs_run; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX image_refs_run ON nodeprov_fixture.image_refs USING btree (run_id);


--
-- Name: images_created; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX images_created ON nodeprov_fixture.images USING btree (created_at);


--
-- Name: leases_expires; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX leases_expires ON nodeprov_fixture.leases USING btree (expires_ms);


--
-- Name: nodes_run; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX nodes_run ON nodeprov_fixture.nodes USING btree (run_id);


--
-- Name: nodes_state; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX nodes_state ON nodeprov_fixture.nodes USING btree (state);


--
-- Name: pool_nodes_owner; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX pool_nodes_owner ON nodeprov_fixture.pool_nodes USING btree (owner);


--
-- Name: pool_nodes_pool; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX pool_nodes_pool ON nodeprov_fixture.pool_nodes USING btree (pool, state);


--
-- Name: pool_nodes_run; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX pool_nodes_run ON nodeprov_fixture.pool_nodes USING btree (run_id);


--
-- Name: pool_nodes_state; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX pool_nodes_state ON nodeprov_fixture.pool_nodes USING btree (state, updated_at);


--
-- Name: pools_holder; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX pools_holder ON nodeprov_fixture.pools USING btree (holder);


--
-- Name: runs_agent_session; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX runs_agent_session ON nodeprov_fixture.runs USING btree (project_key, agent_session_id);


--
-- Name: runs_owner; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX runs_owner ON nodeprov_fixture.runs USING btree (owner) WHERE (pause_request IS NOT NULL);


--
-- Name: runs_owner_state; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX runs_owner_state ON nodeprov_fixture.runs USING btree (owner, state);


--
-- Name: runs_session; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX runs_session ON nodeprov_fixture.runs USING btree (session_id);


--
-- Name: runs_state_updated; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX runs_state_updated ON nodeprov_fixture.runs USING btree (state, updated_at);


--
-- Name: sessions_created; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX sessions_created ON nodeprov_fixture.sessions USING btree (created_at);


--
-- Name: sessions_one_active; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE UNIQUE INDEX sessions_one_active ON nodeprov_fixture.sessions USING btree (workspace_id) WHERE (state = 'active'::text);


--
-- Name: sessions_workspace; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX sessions_workspace ON nodeprov_fixture.sessions USING btree (workspace_id);


--
-- Name: snapshots_run; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX snapshots_run ON nodeprov_fixture.snapshots USING btree (run_id);


--
-- Name: transcript_key; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX transcript_key ON nodeprov_fixture.transcript_entries USING btree (project_key, session_id, subpath, seq);


--
-- Name: transcript_uuid; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE UNIQUE INDEX transcript_uuid ON nodeprov_fixture.transcript_entries USING btree (project_key, session_id, subpath, uuid) WHERE (uuid IS NOT NULL);


--
-- Name: workspaces_created; Type: INDEX; Schema: nodeprov_fixture; Owner: -
--

CREATE INDEX workspaces_created ON nodeprov_fixture.workspaces USING btree (created_at);


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

\unrestrict cUf0SKBmGnAvP5SRGFRPb1S76Vo8c5Khj7yxbKxylW3u2EyhyjJVENvbqCU4diw

