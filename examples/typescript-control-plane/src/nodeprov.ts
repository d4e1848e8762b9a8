// A small client of the nodeprov HTTP API (`nodeprov serve`): start a run, read it, and
// follow its events with a real EventSource (reconnecting with Last-Event-ID, as the
// service expects, so no event is missed or repeated).
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { EventSource, type EventSourceFetchInit } from "eventsource";

/** One of a run's events, as `GET /v1/runs/{id}/events` sends it (`run.started`,
 * `node.ready`, `agent.message`, `node.released`, `run.finished`, ...). */
export interface RunEvent {
  type: string;
  run_id: string;
  seq: number;
  at: string;
  [field: string]: unknown;
}

/** A run, as `GET /v1/runs/{id}` answers (the fields this program reads). */
export interface Run {
  id: string;
  state: string;
  outcome: string | null;
  error: string | null;
  [field: string]: unknown;
}

/** The states in which a run is still being driven: more events may come. */
const LIVE_STATES = new Set(["starting", "running", "pausing", "finishing"]);

export function isLive(run: Run): boolean {
  return LIVE_STATES.has(run.state);
}

/** A call the service refused or failed, with its `{"error", "message"}` body. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(`${status} ${code}: ${message}`);
    this.name = "ApiError";
  }

  /** The error a non-2xx response stands for, from its JSON body when it has one. */
  static async from(response: Response): Promise<ApiError> {
    let code = "http_error";
    let message = response.statusText || `HTTP ${response.status}`;
    try {
      const body: unknown = await response.json();
      if (typeof body === "object" && body !== null) {
        const { error, message: said } = body as Record<string, unknown>;
        if (typeof error === "string") code = error;
        if (typeof said === "string") message = said;
      }
    } catch {
      // not JSON (a proxy's page, say): the status line says enough
    }
    return new ApiError(response.status, code, message);
  }
}

export interface FollowOptions {
  /** Called with every event, in order, each once. */
  onEvent: (event: RunEvent) => void;
  /** Told when the stream is cut off or interrupted; the EventSource reconnects by itself. */
  onNotice?: (line: string) => void;
  /** Give up after this many failed reconnects in a row. */
  maxReconnects?: number;
}

const START_ATTEMPTS = 4;

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

export class Nodeprov {
  readonly #baseUrl: string;
  readonly #token: string | undefined;

  constructor(baseUrl: string, token?: string) {
    this.#baseUrl = baseUrl.replace(/\/+$/, "");
    this.#token = token || undefined;
  }

  /** Start a run (the body of `POST /v1/runs`). The Idempotency-Key makes a retry safe:
   * the service answers it with the run the first attempt made, never a second run, so a
   * lost connection or a replica that is stopping (503) is simply tried again. */
  async startRun(body: Record<string, unknown>, idempotencyKey: string = randomUUID()): Promise<Run> {
    for (let attempt = 1; ; attempt++) {
      let response: Response;
      try {
        response = await this.#fetch("/v1/runs", {
          method: "POST",
          headers: { "Content-Type": "application/json", "Idempotency-Key": idempotencyKey },
          body: JSON.stringify(body),
        });
      } catch (error) {
        if (attempt >= START_ATTEMPTS) throw error;
        await sleep(500 * attempt);
        continue;
      }
      // 409: the first attempt with this key is still at work.
      if ((response.status === 503 || response.status === 409) && attempt < START_ATTEMPTS) {
        await sleep(1000 * Number(response.headers.get("Retry-After") ?? attempt));
        continue;
      }
      return (await this.#json(response)) as Run;
    }
  }

  async getRun(runId: string): Promise<Run> {
    return (await this.#json(await this.#fetch(`/v1/runs/${encodeURIComponent(runId)}`))) as Run;
  }

  /** Follow the run's events until a `run.finished` after which the run is no longer live
   * (a run that is resumed meanwhile goes on with the next drive's events), then close
   * the EventSource. Resolves with the run as it ended. */
  follow(runId: string, options: FollowOptions): Promise<Run> {
    const url = `${this.#baseUrl}/v1/runs/${encodeURIComponent(runId)}/events`;
    const maxReconnects = options.maxReconnects ?? 10;
    return new Promise<Run>((resolve, reject) => {
      let refused: ApiError | undefined;
      let failures = 0;
      let done = false;
      let endAnnounced = false; // the service ends the stream after a run.finished or a cutoff

      const source = new EventSource(url, {
        // EventSource has no headers option: the bearer token goes through its fetch.
        fetch: async (input: string | URL, init: EventSourceFetchInit) => {
          const response = await fetch(input, { ...init, headers: { ...init.headers, ...this.#auth() } });
          if (response.status >= 400) refused = await ApiError.from(response.clone());
          return response;
        },
      });
      const finish = (outcome: { run: Run } | { error: unknown }): void => {
        if (done) return;
        done = true;
        source.close();
        if ("run" in outcome) resolve(outcome.run);
        else reject(outcome.error);
      };
      // The run is over when it is no longer live: a paused run too (its resume is a new
      // drive, followed again from the last event seen).
      const finishIfOver = async (): Promise<boolean> => {
        const run = await this.getRun(runId);
        if (!isLive(run)) finish({ run });
        return !isLive(run);
      };

      source.onmessage = (message) => {
        if (done) return;
        failures = 0;
        const event = parseJson(String(message.data)) as RunEvent | undefined;
        if (event === undefined) {
          finish({ error: new Error(`event stream: an event that is not JSON: ${String(message.data)}`) });
          return;
        }
        options.onEvent(event);
        if (event.type === "run.finished") {
          endAnnounced = true;
          // Still live: it was resumed already, and the next drive's events follow.
          finishIfOver().catch((error: unknown) => finish({ error }));
        }
      };
      // A client that fell behind is cut off; the EventSource reconnects after the last
      // event it got.
      source.addEventListener("cutoff", (message) => {
        endAnnounced = true;
        const { reason } = (parseJson(String(message.data)) ?? {}) as { reason?: string };
        options.onNotice?.(`event stream cut off (${reason ?? "no reason given"}); reconnecting`);
      });
      source.onerror = (error) => {
        if (done) return;
        if (source.readyState === EventSource.CLOSED) {
          // 204: nothing after our last event and nobody drives the run; else a refusal.
          if (error.code === 204) {
            finishIfOver()
              .then((over) => {
                if (!over) finish({ error: new Error(`the events of ${runId} ended, the run still live`) });
              })
              .catch((reason: unknown) => finish({ error: reason }));
          } else {
            finish({ error: refused ?? new Error(`event stream: ${error.message ?? "failed"}`) });
          }
        } else if (endAnnounced) {
          endAnnounced = false; // the announced end: the EventSource reconnects by itself
        } else if (++failures > maxReconnects) {
          finish({ error: new Error(`event stream: ${error.message ?? "failed"}, ${failures} times in a row`) });
        } else {
          options.onNotice?.(`event stream interrupted (${error.message ?? "connection lost"}); reconnecting`);
        }
      };
    });
  }

  #auth(): Record<string, string> {
    return this.#token ? { Authorization: `Bearer ${this.#token}` } : {};
  }

  #fetch(path: string, init: RequestInit = {}): Promise<Response> {
    return fetch(`${this.#baseUrl}${path}`, {
      ...init,
      headers: { Accept: "application/json", ...(init.headers as Record<string, string>), ...this.#auth() },
    });
  }

  async #json(response: Response): Promise<unknown> {
    if (!response.ok) throw await ApiError.from(response);
    return response.json();
  }
}
