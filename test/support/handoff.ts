import { expect, inject } from "vitest";
import { CONTRACT_SCHEMAS } from "../../src/routes/contract-schemas";
import type { Behaviour, Received } from "../../tools/webhook-receiver";
import { call, uniqueSku } from "./client";

/** The test receiver (tools/webhook-receiver.ts), which checks every request with `standardwebhooks`. */
export const receiver = inject("receiver");
/** Endpoints a test made; {@link forgetEndpoints} deletes them after it. */
export const endpoints: string[] = [];

export async function forgetEndpoints() {
  for (const id of endpoints.splice(0)) await call("DELETE", `/admin/webhooks/${id}`, { admin: true });
}

export interface Log {
  received: Received[];
  count: number;
  /** Events of verified requests answered 2xx: one a single event, each of a batch. */
  events: number;
  verified: number;
  unverified: number;
  /** Per verified order delivery: its receipt minus the order's updatedAt, in ms. */
  lagsMs: number[];
}

/** An endpoint at the receiver, subscribed as asked, the receiver told its secret and behaviour. */
export async function endpoint(behaviour: Omit<Behaviour, "secret"> = {}, body: Record<string, unknown> = {}) {
  const id = uniqueSku("hook");
  const url = `${receiver.url}/hooks/${id}`;
  const answer = await call("PUT", `/admin/webhooks/${id}`, { admin: true, body: { url, ...body } });
  expect(answer.status, JSON.stringify(answer.json)).toBe(200);
  endpoints.push(id);
  await configure(id, { ...behaviour, secret: answer.json.secret });
  return { id, secret: answer.json.secret as string, url };
}

export async function configure(id: string, behaviour: Behaviour) {
  const res = await fetch(`${receiver.url}/control/${id}`, { method: "PUT", body: JSON.stringify(behaviour) });
  expect(res.status).toBe(200);
}

export async function logOf(id: string): Promise<Log> {
  return (await fetch(`${receiver.url}/control/${id}`)).json();
}

/** The answer parses with its contract schema (what /openapi.json documents). */
export function conforms(schema: keyof typeof CONTRACT_SCHEMAS, value: unknown) {
  const parsed = CONTRACT_SCHEMAS[schema].safeParse(value);
  expect(parsed.success ? [] : parsed.error.issues).toEqual([]);
}

export async function deliveries(id: string, query = "") {
  const answer = await call("GET", `/admin/webhooks/${id}/deliveries${query}`, { admin: true });
  expect(answer.status).toBe(200);
  conforms("WebhookDeliveryList", answer.json);
  return answer.json.deliveries as {
    id: string;
    status: string;
    attempts: number;
    lastStatusCode: number | null;
    lastResponse: string | null;
    lastError: string | null;
    type: string;
    reservationId: string;
    createdAt: string;
    /** API.md v1.4 "Webhook batches": the batch message that last carried it. */
    batchId: string | null;
  }[];
}
