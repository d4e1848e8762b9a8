// An example control plane on nodeprov's HTTP API: start a run, relay every event of it to
// stdout as one JSON line (where a real control plane would forward them to its own
// clients), then print the run's outcome and the agent's result.
//
//   NODEPROV_URL=http://127.0.0.1:8700 node dist/main.js "fix the tests"
//
// Exit status: 0 when the run ended ok, 3 when it paused, 1 when it failed, 2 when the
// service refused the call (its one-line reason on stderr).
import { parseArgs } from "node:util";

import { ApiError, Nodeprov, type Run, type RunEvent } from "./nodeprov.js";

const USAGE = `usage: node dist/main.js [--provider P] [--model M] [--extra JSON] [--idempotency-key K] PROMPT...

  NODEPROV_URL       the service (default http://127.0.0.1:8700)
  NODEPROV_TOKEN     its bearer token (nodeprov tokens create NAME --scope runs), if it needs one
  --provider P       the node's provider (NODEPROV_PROVIDER, default local)
  --model M          'scripted' (the default: the built-in offline model) or a real model's name
                     (NODEPROV_MODEL)
  --extra JSON       more fields of POST /v1/runs (NODEPROV_EXTRA), e.g.
                     '{"workspace": "repo-42", "options": {"max_turns": 3}}'
  --idempotency-key  the run's Idempotency-Key (default: a new UUID)`;

class UsageError extends Error {}

interface Call {
  url: string;
  token: string | undefined;
  body: Record<string, unknown>;
  idempotencyKey: string | undefined;
}

function parseCall(argv: string[], env: NodeJS.ProcessEnv): Call {
  const { values, positionals } = parseArgsOrFail(argv, env);
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const prompt = positionals.join(" ").trim();
  if (!prompt) throw new UsageError("a prompt is needed");
  let extra: Record<string, unknown> = {};
  if (values.extra) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(values.extra);
    } catch {
      throw new UsageError("--extra is not valid JSON");
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      throw new UsageError("--extra must be a JSON object");
    }
    extra = parsed as Record<string, unknown>;
  }
  return {
    url: env.NODEPROV_URL || "http://127.0.0.1:8700",
    token: env.NODEPROV_TOKEN,
    body: { prompt, provider: values.provider, model: values.model, ...extra },
    idempotencyKey: values["idempotency-key"],
  };
}

function parseArgsOrFail(argv: string[], env: NodeJS.ProcessEnv) {
  try {
    return parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        provider: { type: "string", default: env.NODEPROV_PROVIDER ?? "local" },
        model: { type: "string", default: env.NODEPROV_MODEL ?? "scripted" },
        extra: { type: "string", default: env.NODEPROV_EXTRA ?? "" },
        "idempotency-key": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error)); // an unknown option, say
  }
}

/** The text of the agent's result message, the last one when a run had several drives. */
function resultOf(event: RunEvent): string | undefined {
  const message = event.message as { kind?: string; text?: string } | undefined;
  return event.type === "agent.message" && message?.kind === "result" ? (message.text ?? "") : undefined;
}

function relay(event: RunEvent): void {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

function exitStatus(run: Run): number {
  return run.outcome === "ok" ? 0 : run.outcome === "paused" ? 3 : 1;
}

/** One line for what went wrong: the service's own words when it answered. */
function describe(error: unknown, url: string): string {
  if (error instanceof ApiError || error instanceof UsageError) return error.message;
  if (error instanceof TypeError && error.cause instanceof Error) {
    return `cannot reach ${url}: ${error.cause.message}`; // fetch's network failures
  }
  return error instanceof Error ? error.message : String(error);
}

async function main(): Promise<number> {
  let call: Call | undefined;
  try {
    call = parseCall(process.argv.slice(2), process.env);
    const nodeprov = new Nodeprov(call.url, call.token);
    const started = await nodeprov.startRun(call.body, call.idempotencyKey);
    console.error(`run ${started.id} started; following its events`);
    let result: string | undefined;
    const run = await nodeprov.follow(started.id, {
      onEvent: (event) => {
        relay(event);
        result = resultOf(event) ?? result;
      },
      onNotice: (line) => console.error(line),
    });
    const summary = { run_id: run.id, outcome: run.outcome, result: result ?? null, error: run.error };
    process.stdout.write(`${JSON.stringify(summary)}\n`);
    return exitStatus(run);
  } catch (error) {
    const hint = error instanceof UsageError ? " (--help for usage)" : "";
    console.error(`error: ${describe(error, call?.url ?? "the service")}${hint}`);
    return error instanceof UsageError || (error instanceof ApiError && error.status < 500) ? 2 : 1;
  }
}

process.exitCode = await main();
