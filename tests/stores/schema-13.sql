--
-- PostgreSQL database dump
--

\restrict qJU0xKNt10wh9FwrHksEenac9aA1wWancwgrxr7lqe6t70EPh1PMhJT7vCGTD9j

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
    agent_keeper text,
    agent_grace double precision,
    model text
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
tok-a6e62e86213d	ci	["read", "runs"]	cf4c09464e14e884ffd04de1aa6b5245cdf6a877d3fdfad47db03801f627eb5b	2026-11-28T10:01:01.848548+00:00	\N	default
tok-2c0391a35a80	old	["admin"]	bee5fc0c3dca477335354b7fe2c6e949bdf0b153fda19aa74c60dac57e42bf99	2026-11-28T10:01:01.849550+00:00	2026-11-28T10:01:01.850231+00:00	default
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
token:tok-a6e62e86213d	key-1	run	f	run-b48ebf24e8f9aa4a	me	pending	\N	2026-11-28T10:01:01.850901+00:00
\.


--
-- Data for Name: image_refs; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.image_refs (sha256, run_id) FROM stdin;
c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77	run-b48ebf24e8f9aa4a
\.


--
-- Data for Name: images; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.images (sha256, media_type, size, data, created_at) FROM stdin;
c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77	image/png	70	\\x89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63fccfc0500f000485018084a98c210000000049454e44ae426082	2026-11-28T10:01:01.169467+00:00
\.


--
-- Data for Name: leases; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.leases (id, holder, created_at, heartbeat_ms, expires_ms, released) FROM stdin;
lease-018ac57df4437107	vm pid 7221	2026-11-28T10:01:01.143142+00:00	1795860061144	1795860061848	1
\.


--
-- Data for Name: nodes; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.nodes (id, provider, run_id, state, created_at, updated_at, keep_until_ms) FROM stdin;
np-a47029c75665	local	run-b48ebf24e8f9aa4a	destroyed	2026-11-28T10:01:01.172029+00:00	2026-11-28T10:01:01.262558+00:00	\N
np-4db092b61d42	local	run-80cd38e5b5fd474b	destroyed	2026-11-28T10:01:01.270794+00:00	2026-11-28T10:01:01.359077+00:00	\N
np-88daf2e87027	local	run-948fbca9597d4e42	kept	2026-11-28T10:01:01.366756+00:00	2026-11-28T10:01:01.448787+00:00	1795946461020
np-8bc96e21db34	local	run-1df5ed5a9f57ff47	destroyed	2026-11-28T10:01:01.457215+00:00	2026-11-28T10:01:01.547790+00:00	\N
np-4b3ebb123ea8	local	run-66028ac78bfb9e66	destroyed	2026-11-28T10:01:01.617414+00:00	2026-11-28T10:01:01.679621+00:00	\N
\.


--
-- Data for Name: pool_nodes; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.pool_nodes (id, pool, state, owner, ready_ms, run_id, updated_at) FROM stdin;
np-4b3ebb123ea8	warm	claimed	lease:lease-018ac57df4437107	1795860061563	run-66028ac78bfb9e66	2026-11-28T10:01:01.617414+00:00
np-33830405e53a	warm	ready	lease:lease-018ac57df4437107	1795860061827	\N	2026-11-28T10:01:01.826232+00:00
\.


--
-- Data for Name: pools; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.pools (name, provider, provider_settings, secret_fields, node_config, size, max_age, refill_concurrency, state, holder, error, retry_at_ms, failures, created_at) FROM stdin;
warm	local	{"root": "/tmp/tmpmj4lkzi4/pool"}	[]	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	1	3600	2	active	lease:lease-018ac57df4437107	\N	\N	0	2026-11-28T10:01:01.551481+00:00
\.


--
-- Data for Name: run_events; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.run_events (run_id, seq, kind, at, body) FROM stdin;
run-b48ebf24e8f9aa4a	1	run.started	2026-11-28T10:01:01.171196+00:00	{"type":"run.started","run_id":"run-b48ebf24e8f9aa4a","seq":1,"at":"2026-11-28T10:01:01.171196+00:00","prompt":"look at this","provider":"local","resumed_from":null,"agent":"claude","images":[{"type":"image","sha256":"c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77","media_type":"image/png","size":70}]}
run-b48ebf24e8f9aa4a	2	node.ready	2026-11-28T10:01:01.180195+00:00	{"type":"node.ready","run_id":"run-b48ebf24e8f9aa4a","seq":2,"at":"2026-11-28T10:01:01.180195+00:00","node_id":"np-a47029c75665","reused":false,"transcript_restored":false,"pool":null}
run-b48ebf24e8f9aa4a	3	agent.message	2026-11-28T10:01:01.242797+00:00	{"type":"agent.message","run_id":"run-b48ebf24e8f9aa4a","seq":3,"at":"2026-11-28T10:01:01.242797+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpmj4lkzi4/nodes/np-a47029c75665/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"9ac98ebd-2515-41c4-bc39-905faa814f87","uuid":"4b2530f0-6315-49bb-8bec-9946458c623a"},"subtype":"init","text":"/tmp/tmpmj4lkzi4/nodes/np-a47029c75665/work","session_id":"9ac98ebd-2515-41c4-bc39-905faa814f87","retry":false}}
run-b48ebf24e8f9aa4a	4	agent.message	2026-11-28T10:01:01.246813+00:00	{"type":"agent.message","run_id":"run-b48ebf24e8f9aa4a","seq":4,"at":"2026-11-28T10:01:01.246813+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_037256d1-3dc2-44f5-a691-c8dc455c4900","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"a red dot"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"9ac98ebd-2515-41c4-bc39-905faa814f87","uuid":"96be23bc-aac0-4514-a310-7d713e1097cc"},"text":"a red dot"}}
run-b48ebf24e8f9aa4a	5	agent.message	2026-11-28T10:01:01.250908+00:00	{"type":"agent.message","run_id":"run-b48ebf24e8f9aa4a","seq":5,"at":"2026-11-28T10:01:01.250908+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":false,"duration_ms":0,"duration_api_ms":0,"num_turns":1,"session_id":"9ac98ebd-2515-41c4-bc39-905faa814f87","stop_reason":"end_turn","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"4e814102-2a57-4d3b-84a9-32639ba6d4ec","result":"a red dot"},"is_error":false,"text":"a red dot","session_id":"9ac98ebd-2515-41c4-bc39-905faa814f87","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-b48ebf24e8f9aa4a	6	node.released	2026-11-28T10:01:01.263862+00:00	{"type":"node.released","run_id":"run-b48ebf24e8f9aa4a","seq":6,"at":"2026-11-28T10:01:01.263862+00:00","node_id":"np-a47029c75665","kept":false,"suspended":false}
run-b48ebf24e8f9aa4a	7	run.finished	2026-11-28T10:01:01.265046+00:00	{"type":"run.finished","run_id":"run-b48ebf24e8f9aa4a","seq":7,"at":"2026-11-28T10:01:01.265046+00:00","outcome":"ok","error":null,"agent_session_id":"9ac98ebd-2515-41c4-bc39-905faa814f87"}
run-80cd38e5b5fd474b	1	run.started	2026-11-28T10:01:01.270145+00:00	{"type":"run.started","run_id":"run-80cd38e5b5fd474b","seq":1,"at":"2026-11-28T10:01:01.270145+00:00","prompt":"fail","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-80cd38e5b5fd474b	2	node.ready	2026-11-28T10:01:01.274640+00:00	{"type":"node.ready","run_id":"run-80cd38e5b5fd474b","seq":2,"at":"2026-11-28T10:01:01.274640+00:00","node_id":"np-4db092b61d42","reused":false,"transcript_restored":false,"pool":null}
run-80cd38e5b5fd474b	3	agent.message	2026-11-28T10:01:01.322247+00:00	{"type":"agent.message","run_id":"run-80cd38e5b5fd474b","seq":3,"at":"2026-11-28T10:01:01.322247+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpmj4lkzi4/nodes/np-4db092b61d42/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"18428a3e-2971-489d-89bc-7ba89cff4236","uuid":"eeb63583-1f72-4864-bda4-cdfa6862589f"},"subtype":"init","text":"/tmp/tmpmj4lkzi4/nodes/np-4db092b61d42/work","session_id":"18428a3e-2971-489d-89bc-7ba89cff4236","retry":false}}
run-80cd38e5b5fd474b	4	agent.message	2026-11-28T10:01:01.325443+00:00	{"type":"agent.message","run_id":"run-80cd38e5b5fd474b","seq":4,"at":"2026-11-28T10:01:01.325443+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_2ddedf13-29bc-4b1b-9392-f2f5532fe524","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"18428a3e-2971-489d-89bc-7ba89cff4236","uuid":"86593545-3c4c-4b7d-b58d-492a66ecc40b","error":"unknown","is_api_error_message":true},"text":"API Error: 500"}}
run-80cd38e5b5fd474b	5	agent.message	2026-11-28T10:01:01.325464+00:00	{"type":"agent.message","run_id":"run-80cd38e5b5fd474b","seq":5,"at":"2026-11-28T10:01:01.325464+00:00","message":{"kind":"error","raw":{"type":"assistant","message":{"id":"msg_2ddedf13-29bc-4b1b-9392-f2f5532fe524","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"18428a3e-2971-489d-89bc-7ba89cff4236","uuid":"86593545-3c4c-4b7d-b58d-492a66ecc40b","error":"unknown","is_api_error_message":true},"message":"unknown"}}
run-80cd38e5b5fd474b	6	agent.message	2026-11-28T10:01:01.327706+00:00	{"type":"agent.message","run_id":"run-80cd38e5b5fd474b","seq":6,"at":"2026-11-28T10:01:01.327706+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":true,"duration_ms":0,"duration_api_ms":0,"num_turns":1,"session_id":"18428a3e-2971-489d-89bc-7ba89cff4236","stop_reason":"stop_sequence","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"b19d7fc5-a7a5-4435-8e6b-d7f5a4f3a90e","result":"API Error: 500","api_error_status":null},"is_error":true,"text":"API Error: 500","session_id":"18428a3e-2971-489d-89bc-7ba89cff4236","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-80cd38e5b5fd474b	7	node.released	2026-11-28T10:01:01.360295+00:00	{"type":"node.released","run_id":"run-80cd38e5b5fd474b","seq":7,"at":"2026-11-28T10:01:01.360295+00:00","node_id":"np-4db092b61d42","kept":false,"suspended":false}
run-80cd38e5b5fd474b	8	run.finished	2026-11-28T10:01:01.361284+00:00	{"type":"run.finished","run_id":"run-80cd38e5b5fd474b","seq":8,"at":"2026-11-28T10:01:01.361284+00:00","outcome":"error","error":"API Error: 500","agent_session_id":"18428a3e-2971-489d-89bc-7ba89cff4236"}
run-948fbca9597d4e42	1	run.started	2026-11-28T10:01:01.365498+00:00	{"type":"run.started","run_id":"run-948fbca9597d4e42","seq":1,"at":"2026-11-28T10:01:01.365498+00:00","prompt":"keep","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-948fbca9597d4e42	2	node.ready	2026-11-28T10:01:01.372152+00:00	{"type":"node.ready","run_id":"run-948fbca9597d4e42","seq":2,"at":"2026-11-28T10:01:01.372152+00:00","node_id":"np-88daf2e87027","reused":false,"transcript_restored":false,"pool":null}
run-948fbca9597d4e42	3	agent.message	2026-11-28T10:01:01.417606+00:00	{"type":"agent.message","run_id":"run-948fbca9597d4e42","seq":3,"at":"2026-11-28T10:01:01.417606+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpmj4lkzi4/nodes/np-88daf2e87027/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"bd940d2f-50ca-4e9a-98bc-7be488121122","uuid":"76df97c3-d8d3-4b28-8ac4-ab8644707a6f"},"subtype":"init","text":"/tmp/tmpmj4lkzi4/nodes/np-88daf2e87027/work","session_id":"bd940d2f-50ca-4e9a-98bc-7be488121122","retry":false}}
run-948fbca9597d4e42	4	agent.message	2026-11-28T10:01:01.422101+00:00	{"type":"agent.message","run_id":"run-948fbca9597d4e42","seq":4,"at":"2026-11-28T10:01:01.422101+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_5ebb1a54-f71c-46aa-981f-e57449120f95","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"working"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"bd940d2f-50ca-4e9a-98bc-7be488121122","uuid":"93db7247-8a6f-49bb-a3c7-0cc0e214bb5a"},"text":"working"}}
run-948fbca9597d4e42	5	agent.message	2026-11-28T10:01:01.422159+00:00	{"type":"agent.message","run_id":"run-948fbca9597d4e42","seq":5,"at":"2026-11-28T10:01:01.422159+00:00","message":{"kind":"notice","raw":{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]},"parent_tool_use_id":null,"session_id":"bd940d2f-50ca-4e9a-98bc-7be488121122","uuid":"0926a70a-d4e7-4cca-b98a-87ace8714afb"},"subtype":"user","text":"[Request interrupted by user]","session_id":null,"retry":false}}
run-948fbca9597d4e42	6	node.released	2026-11-28T10:01:01.450988+00:00	{"type":"node.released","run_id":"run-948fbca9597d4e42","seq":6,"at":"2026-11-28T10:01:01.450988+00:00","node_id":"np-88daf2e87027","kept":true,"suspended":false}
run-948fbca9597d4e42	7	run.paused	2026-11-28T10:01:01.451872+00:00	{"type":"run.paused","run_id":"run-948fbca9597d4e42","seq":7,"at":"2026-11-28T10:01:01.451872+00:00","pause_kind":"human","reason":"overnight","token":"tok-2drSb-x3MB9O763OVqr6FQjnUPxLmzWy","node_kept":true}
run-948fbca9597d4e42	8	run.finished	2026-11-28T10:01:01.451933+00:00	{"type":"run.finished","run_id":"run-948fbca9597d4e42","seq":8,"at":"2026-11-28T10:01:01.451933+00:00","outcome":"paused","error":null,"agent_session_id":"bd940d2f-50ca-4e9a-98bc-7be488121122"}
run-1df5ed5a9f57ff47	1	run.started	2026-11-28T10:01:01.456222+00:00	{"type":"run.started","run_id":"run-1df5ed5a9f57ff47","seq":1,"at":"2026-11-28T10:01:01.456222+00:00","prompt":"release","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-1df5ed5a9f57ff47	2	node.ready	2026-11-28T10:01:01.462273+00:00	{"type":"node.ready","run_id":"run-1df5ed5a9f57ff47","seq":2,"at":"2026-11-28T10:01:01.462273+00:00","node_id":"np-8bc96e21db34","reused":false,"transcript_restored":false,"pool":null}
run-1df5ed5a9f57ff47	3	agent.message	2026-11-28T10:01:01.514305+00:00	{"type":"agent.message","run_id":"run-1df5ed5a9f57ff47","seq":3,"at":"2026-11-28T10:01:01.514305+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpmj4lkzi4/nodes/np-8bc96e21db34/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"96f9dffb-16e7-4209-9c08-5bc227fc3aee","uuid":"f67fc006-2de4-4026-a11f-5dc45a173ba5"},"subtype":"init","text":"/tmp/tmpmj4lkzi4/nodes/np-8bc96e21db34/work","session_id":"96f9dffb-16e7-4209-9c08-5bc227fc3aee","retry":false}}
run-1df5ed5a9f57ff47	4	agent.message	2026-11-28T10:01:01.518681+00:00	{"type":"agent.message","run_id":"run-1df5ed5a9f57ff47","seq":4,"at":"2026-11-28T10:01:01.518681+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_e910bfe8-bf7d-49d4-a0df-bd0d29212468","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"working"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"96f9dffb-16e7-4209-9c08-5bc227fc3aee","uuid":"82b289fd-f680-41b8-979c-d71b18ef0a4d"},"text":"working"}}
run-1df5ed5a9f57ff47	5	agent.message	2026-11-28T10:01:01.518759+00:00	{"type":"agent.message","run_id":"run-1df5ed5a9f57ff47","seq":5,"at":"2026-11-28T10:01:01.518759+00:00","message":{"kind":"notice","raw":{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]},"parent_tool_use_id":null,"session_id":"96f9dffb-16e7-4209-9c08-5bc227fc3aee","uuid":"a39cad78-83bc-4a11-8d83-585eb6ed0331"},"subtype":"user","text":"[Request interrupted by user]","session_id":null,"retry":false}}
run-1df5ed5a9f57ff47	6	node.released	2026-11-28T10:01:01.548849+00:00	{"type":"node.released","run_id":"run-1df5ed5a9f57ff47","seq":6,"at":"2026-11-28T10:01:01.548849+00:00","node_id":"np-8bc96e21db34","kept":false,"suspended":false}
run-1df5ed5a9f57ff47	7	run.paused	2026-11-28T10:01:01.549635+00:00	{"type":"run.paused","run_id":"run-1df5ed5a9f57ff47","seq":7,"at":"2026-11-28T10:01:01.549635+00:00","pause_kind":"external","reason":"budget","token":"tok-J4mNJpy-iehN-6-0rmmNoBt9mNE7sgTH","node_kept":false}
run-1df5ed5a9f57ff47	8	run.finished	2026-11-28T10:01:01.549683+00:00	{"type":"run.finished","run_id":"run-1df5ed5a9f57ff47","seq":8,"at":"2026-11-28T10:01:01.549683+00:00","outcome":"paused","error":null,"agent_session_id":"96f9dffb-16e7-4209-9c08-5bc227fc3aee"}
run-66028ac78bfb9e66	1	run.started	2026-11-28T10:01:01.617017+00:00	{"type":"run.started","run_id":"run-66028ac78bfb9e66","seq":1,"at":"2026-11-28T10:01:01.617017+00:00","prompt":"from the pool","provider":"local","resumed_from":null,"agent":"claude","images":[]}
run-66028ac78bfb9e66	2	node.ready	2026-11-28T10:01:01.619686+00:00	{"type":"node.ready","run_id":"run-66028ac78bfb9e66","seq":2,"at":"2026-11-28T10:01:01.619686+00:00","node_id":"np-4b3ebb123ea8","reused":false,"transcript_restored":false,"pool":"warm"}
run-66028ac78bfb9e66	3	agent.message	2026-11-28T10:01:01.664142+00:00	{"type":"agent.message","run_id":"run-66028ac78bfb9e66","seq":3,"at":"2026-11-28T10:01:01.664142+00:00","message":{"kind":"notice","raw":{"type":"system","subtype":"init","cwd":"/tmp/tmpmj4lkzi4/pool/np-4b3ebb123ea8/work","tools":[],"mcp_servers":[],"model":"fake-model","permissionMode":"acceptEdits","session_id":"3ba13836-5486-4779-9af3-be9c43406fe8","uuid":"6e506bee-925e-4ffe-9719-eb1c7f20036c"},"subtype":"init","text":"/tmp/tmpmj4lkzi4/pool/np-4b3ebb123ea8/work","session_id":"3ba13836-5486-4779-9af3-be9c43406fe8","retry":false}}
run-66028ac78bfb9e66	4	agent.message	2026-11-28T10:01:01.666940+00:00	{"type":"agent.message","run_id":"run-66028ac78bfb9e66","seq":4,"at":"2026-11-28T10:01:01.666940+00:00","message":{"kind":"text","raw":{"type":"assistant","message":{"id":"msg_5a5ef4dd-8c18-4262-b97d-54500836d774","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"warm"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"parent_tool_use_id":null,"session_id":"3ba13836-5486-4779-9af3-be9c43406fe8","uuid":"169738e1-0b9d-4172-9aaa-8a5cbdc4cd01"},"text":"warm"}}
run-66028ac78bfb9e66	5	agent.message	2026-11-28T10:01:01.669026+00:00	{"type":"agent.message","run_id":"run-66028ac78bfb9e66","seq":5,"at":"2026-11-28T10:01:01.669026+00:00","message":{"kind":"result","raw":{"type":"result","subtype":"success","is_error":false,"duration_ms":0,"duration_api_ms":0,"num_turns":1,"session_id":"3ba13836-5486-4779-9af3-be9c43406fe8","stop_reason":"end_turn","total_cost_usd":0.0001,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"modelUsage":{"fake-model":{"inputTokens":10,"outputTokens":5,"costUSD":0.0001}},"permission_denials":[],"terminal_reason":"completed","uuid":"a2e700f7-8e57-48f0-81e4-e624d5931945","result":"warm"},"is_error":false,"text":"warm","session_id":"3ba13836-5486-4779-9af3-be9c43406fe8","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"cost_usd":0.0001,"structured":null}}
run-66028ac78bfb9e66	6	node.released	2026-11-28T10:01:01.680525+00:00	{"type":"node.released","run_id":"run-66028ac78bfb9e66","seq":6,"at":"2026-11-28T10:01:01.680525+00:00","node_id":"np-4b3ebb123ea8","kept":false,"suspended":false}
run-66028ac78bfb9e66	7	run.finished	2026-11-28T10:01:01.681416+00:00	{"type":"run.finished","run_id":"run-66028ac78bfb9e66","seq":7,"at":"2026-11-28T10:01:01.681416+00:00","outcome":"ok","error":null,"agent_session_id":"3ba13836-5486-4779-9af3-be9c43406fe8"}
\.


--
-- Data for Name: runs; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.runs (id, session_id, workspace_id, prompt, node_provider, node_settings, agent_options, state, outcome, error, node_id, agent_session_id, project_key, owner, pause_request, created_at, updated_at, node_secret_fields, agent, node_config, prompt_blocks, agent_keeper, agent_grace, model) FROM stdin;
run-b48ebf24e8f9aa4a	ses-ec36668caaa5c465	default	look at this	local	{"root": "/tmp/tmpmj4lkzi4/nodes"}	{"cli_path": "/tmp/tmpmj4lkzi4/fake-agent", "permission": "edit", "ship_cli": true}	finished	ok	\N	np-a47029c75665	9ac98ebd-2515-41c4-bc39-905faa814f87	-tmp-tmpmj4lkzi4-nodes-np-a47029c75665-work	lease:lease-018ac57df4437107	\N	2026-11-28T10:01:01.168436+00:00	2026-11-28T10:01:01.263942+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[{"type": "text", "text": "look at this"}, {"type": "image", "sha256": "c414cd0e204de974f73753c7e28d7638e7b3691bb8b1a2bab6b25bb7fed7ce77", "media_type": "image/png", "size": 70}]	\N	0	\N
run-80cd38e5b5fd474b	ses-ec36668caaa5c465	default	fail	local	{"root": "/tmp/tmpmj4lkzi4/nodes"}	{"cli_path": "/tmp/tmpmj4lkzi4/fake-agent", "permission": "edit", "ship_cli": true}	failed	error	API Error: 500	np-4db092b61d42	18428a3e-2971-489d-89bc-7ba89cff4236	-tmp-tmpmj4lkzi4-nodes-np-4db092b61d42-work	lease:lease-018ac57df4437107	\N	2026-11-28T10:01:01.268255+00:00	2026-11-28T10:01:01.360374+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N	0	\N
run-948fbca9597d4e42	ses-ec36668caaa5c465	default	keep	local	{"root": "/tmp/tmpmj4lkzi4/nodes"}	{"cli_path": "/tmp/tmpmj4lkzi4/fake-agent", "permission": "edit", "ship_cli": true}	paused	paused	\N	np-88daf2e87027	bd940d2f-50ca-4e9a-98bc-7be488121122	-tmp-tmpmj4lkzi4-nodes-np-88daf2e87027-work	lease:lease-018ac57df4437107	\N	2026-11-28T10:01:01.364194+00:00	2026-11-28T10:01:01.451065+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N	0	\N
run-1df5ed5a9f57ff47	ses-ec36668caaa5c465	default	release	local	{"root": "/tmp/tmpmj4lkzi4/nodes"}	{"cli_path": "/tmp/tmpmj4lkzi4/fake-agent", "permission": "edit", "ship_cli": true}	paused	paused	\N	np-8bc96e21db34	96f9dffb-16e7-4209-9c08-5bc227fc3aee	-tmp-tmpmj4lkzi4-nodes-np-8bc96e21db34-work	lease:lease-018ac57df4437107	\N	2026-11-28T10:01:01.454927+00:00	2026-11-28T10:01:01.548920+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N	0	\N
run-66028ac78bfb9e66	ses-ec36668caaa5c465	default	from the pool	local	{"root": "/tmp/tmpmj4lkzi4/pool"}	{"cli_path": "/tmp/tmpmj4lkzi4/fake-agent", "permission": "edit", "ship_cli": false}	finished	ok	\N	np-4b3ebb123ea8	3ba13836-5486-4779-9af3-be9c43406fe8	-tmp-tmpmj4lkzi4-pool-np-4b3ebb123ea8-work	lease:lease-018ac57df4437107	\N	2026-11-28T10:01:01.615492+00:00	2026-11-28T10:01:01.680592+00:00	[]	claude	{"ttl":"P1D","labels":{},"env":{},"workdir":null,"tools":{}}	[]	\N	0	\N
\.


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.schema_migrations (version, applied_at) FROM stdin;
1	2026-11-28T10:01:01.106482+00:00
2	2026-11-28T10:01:01.110947+00:00
3	2026-11-28T10:01:01.111512+00:00
4	2026-11-28T10:01:01.112010+00:00
5	2026-11-28T10:01:01.113059+00:00
6	2026-11-28T10:01:01.114937+00:00
7	2026-11-28T10:01:01.118281+00:00
8	2026-11-28T10:01:01.118724+00:00
9	2026-11-28T10:01:01.122160+00:00
10	2026-11-28T10:01:01.135507+00:00
11	2026-11-28T10:01:01.140758+00:00
12	2026-11-28T10:01:01.141141+00:00
13	2026-11-28T10:01:01.141415+00:00
\.


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.sessions (id, workspace_id, provider, provider_session_id, state, created_at, archived_at) FROM stdin;
ses-ec36668caaa5c465	default	claude	3ba13836-5486-4779-9af3-be9c43406fe8	active	2026-11-28T10:01:01.165103+00:00	\N
\.


--
-- Data for Name: snapshots; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.snapshots (token, run_id, node_id, node_kept, provider, agent_session_id, project_key, state, pause_kind, reason, created_at, used_at, agent) FROM stdin;
tok-O0my64KcU6XXYFuAjj0AkNtSbqqm-R6S	run-80cd38e5b5fd474b	np-4db092b61d42	0	local	18428a3e-2971-489d-89bc-7ba89cff4236	-tmp-tmpmj4lkzi4-nodes-np-4db092b61d42-work	running	system	API Error: 500	2026-11-28T10:01:01.333718+00:00	\N	claude
tok-2drSb-x3MB9O763OVqr6FQjnUPxLmzWy	run-948fbca9597d4e42	np-88daf2e87027	1	local	bd940d2f-50ca-4e9a-98bc-7be488121122	-tmp-tmpmj4lkzi4-nodes-np-88daf2e87027-work	pausing	human	overnight	2026-11-28T10:01:01.429757+00:00	\N	claude
tok-J4mNJpy-iehN-6-0rmmNoBt9mNE7sgTH	run-1df5ed5a9f57ff47	np-8bc96e21db34	0	local	96f9dffb-16e7-4209-9c08-5bc227fc3aee	-tmp-tmpmj4lkzi4-nodes-np-8bc96e21db34-work	pausing	external	budget	2026-11-28T10:01:01.526264+00:00	\N	claude
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
1	-tmp-tmpmj4lkzi4-nodes-np-a47029c75665-work	9ac98ebd-2515-41c4-bc39-905faa814f87		1f8c365b-606e-4c51-a132-60ee172a3dd9	{"type":"user","uuid":"1f8c365b-606e-4c51-a132-60ee172a3dd9","parentUuid":null,"sessionId":"9ac98ebd-2515-41c4-bc39-905faa814f87","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/nodes/np-a47029c75665/work","message":{"role":"user","content":[{"type":"text","text":"look at this"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="}}]}}	1795860061248
2	-tmp-tmpmj4lkzi4-nodes-np-a47029c75665-work	9ac98ebd-2515-41c4-bc39-905faa814f87		96be23bc-aac0-4514-a310-7d713e1097cc	{"type":"assistant","uuid":"96be23bc-aac0-4514-a310-7d713e1097cc","parentUuid":"1f8c365b-606e-4c51-a132-60ee172a3dd9","sessionId":"9ac98ebd-2515-41c4-bc39-905faa814f87","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/nodes/np-a47029c75665/work","message":{"id":"msg_037256d1-3dc2-44f5-a691-c8dc455c4900","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"a red dot"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795860061248
3	-tmp-tmpmj4lkzi4-nodes-np-4db092b61d42-work	18428a3e-2971-489d-89bc-7ba89cff4236		5d2086ae-d4ff-4292-9c1c-1dde60c738d0	{"type":"user","uuid":"5d2086ae-d4ff-4292-9c1c-1dde60c738d0","parentUuid":null,"sessionId":"18428a3e-2971-489d-89bc-7ba89cff4236","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/nodes/np-4db092b61d42/work","message":{"role":"user","content":"fail"}}	1795860061326
4	-tmp-tmpmj4lkzi4-nodes-np-4db092b61d42-work	18428a3e-2971-489d-89bc-7ba89cff4236		86593545-3c4c-4b7d-b58d-492a66ecc40b	{"type":"assistant","uuid":"86593545-3c4c-4b7d-b58d-492a66ecc40b","parentUuid":"5d2086ae-d4ff-4292-9c1c-1dde60c738d0","sessionId":"18428a3e-2971-489d-89bc-7ba89cff4236","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/nodes/np-4db092b61d42/work","message":{"id":"msg_2ddedf13-29bc-4b1b-9392-f2f5532fe524","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"API Error: 500"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795860061326
5	-tmp-tmpmj4lkzi4-nodes-np-88daf2e87027-work	bd940d2f-50ca-4e9a-98bc-7be488121122		781ef2f0-04f2-46f8-9014-0da60c01b47f	{"type":"user","uuid":"781ef2f0-04f2-46f8-9014-0da60c01b47f","parentUuid":null,"sessionId":"bd940d2f-50ca-4e9a-98bc-7be488121122","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/nodes/np-88daf2e87027/work","message":{"role":"user","content":"keep"}}	1795860061425
6	-tmp-tmpmj4lkzi4-nodes-np-88daf2e87027-work	bd940d2f-50ca-4e9a-98bc-7be488121122		93db7247-8a6f-49bb-a3c7-0cc0e214bb5a	{"type":"assistant","uuid":"93db7247-8a6f-49bb-a3c7-0cc0e214bb5a","parentUuid":"781ef2f0-04f2-46f8-9014-0da60c01b47f","sessionId":"bd940d2f-50ca-4e9a-98bc-7be488121122","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/nodes/np-88daf2e87027/work","message":{"id":"msg_5ebb1a54-f71c-46aa-981f-e57449120f95","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"working"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795860061425
7	-tmp-tmpmj4lkzi4-nodes-np-8bc96e21db34-work	96f9dffb-16e7-4209-9c08-5bc227fc3aee		9e3b32ea-caa7-42a3-b6d9-29e54e6a86ca	{"type":"user","uuid":"9e3b32ea-caa7-42a3-b6d9-29e54e6a86ca","parentUuid":null,"sessionId":"96f9dffb-16e7-4209-9c08-5bc227fc3aee","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/nodes/np-8bc96e21db34/work","message":{"role":"user","content":"release"}}	1795860061520
8	-tmp-tmpmj4lkzi4-nodes-np-8bc96e21db34-work	96f9dffb-16e7-4209-9c08-5bc227fc3aee		82b289fd-f680-41b8-979c-d71b18ef0a4d	{"type":"assistant","uuid":"82b289fd-f680-41b8-979c-d71b18ef0a4d","parentUuid":"9e3b32ea-caa7-42a3-b6d9-29e54e6a86ca","sessionId":"96f9dffb-16e7-4209-9c08-5bc227fc3aee","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/nodes/np-8bc96e21db34/work","message":{"id":"msg_e910bfe8-bf7d-49d4-a0df-bd0d29212468","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"working"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795860061520
9	-tmp-tmpmj4lkzi4-pool-np-4b3ebb123ea8-work	3ba13836-5486-4779-9af3-be9c43406fe8		02f66414-fa3d-4e44-9b60-4759dec52080	{"type":"user","uuid":"02f66414-fa3d-4e44-9b60-4759dec52080","parentUuid":null,"sessionId":"3ba13836-5486-4779-9af3-be9c43406fe8","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/pool/np-4b3ebb123ea8/work","message":{"role":"user","content":"from the pool"}}	1795860061668
10	-tmp-tmpmj4lkzi4-pool-np-4b3ebb123ea8-work	3ba13836-5486-4779-9af3-be9c43406fe8		169738e1-0b9d-4172-9aaa-8a5cbdc4cd01	{"type":"assistant","uuid":"169738e1-0b9d-4172-9aaa-8a5cbdc4cd01","parentUuid":"02f66414-fa3d-4e44-9b60-4759dec52080","sessionId":"3ba13836-5486-4779-9af3-be9c43406fe8","timestamp":"2026-11-28T10:01:01.000Z","cwd":"/tmp/tmpmj4lkzi4/pool/np-4b3ebb123ea8/work","message":{"id":"msg_5a5ef4dd-8c18-4262-b97d-54500836d774","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"warm"}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}	1795860061668
\.


--
-- Data for Name: transcript_summaries; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.transcript_summaries (project_key, session_id, mtime, data) FROM stdin;
-tmp-tmpmj4lkzi4-nodes-np-a47029c75665-work	9ac98ebd-2515-41c4-bc39-905faa814f87	1795860061248	{"is_sidechain":false,"created_at":1795860061000,"cwd":"/tmp/tmpmj4lkzi4/nodes/np-a47029c75665/work","first_prompt":"look at this","first_prompt_locked":true}
-tmp-tmpmj4lkzi4-nodes-np-4db092b61d42-work	18428a3e-2971-489d-89bc-7ba89cff4236	1795860061326	{"is_sidechain":false,"created_at":1795860061000,"cwd":"/tmp/tmpmj4lkzi4/nodes/np-4db092b61d42/work","first_prompt":"fail","first_prompt_locked":true}
-tmp-tmpmj4lkzi4-nodes-np-88daf2e87027-work	bd940d2f-50ca-4e9a-98bc-7be488121122	1795860061425	{"is_sidechain":false,"created_at":1795860061000,"cwd":"/tmp/tmpmj4lkzi4/nodes/np-88daf2e87027/work","first_prompt":"keep","first_prompt_locked":true}
-tmp-tmpmj4lkzi4-nodes-np-8bc96e21db34-work	96f9dffb-16e7-4209-9c08-5bc227fc3aee	1795860061520	{"is_sidechain":false,"created_at":1795860061000,"cwd":"/tmp/tmpmj4lkzi4/nodes/np-8bc96e21db34/work","first_prompt":"release","first_prompt_locked":true}
-tmp-tmpmj4lkzi4-pool-np-4b3ebb123ea8-work	3ba13836-5486-4779-9af3-be9c43406fe8	1795860061668	{"is_sidechain":false,"created_at":1795860061000,"cwd":"/tmp/tmpmj4lkzi4/pool/np-4b3ebb123ea8/work","first_prompt":"from the pool","first_prompt_locked":true}
\.


--
-- Data for Name: workspaces; Type: TABLE DATA; Schema: nodeprov_fixture; Owner: -
--

COPY nodeprov_fixture.workspaces (id, created_at) FROM stdin;
default	2026-11-28T10:01:01.165103+00:00
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

\unrestrict qJU0xKNt10wh9FwrHksEenac9aA1wWancwgrxr7lqe6t70EPh1PMhJT7vCGTD9j

