import { and, asc, eq, gte, inArray, lt, notInArray, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import {
  WEBHOOK_EVENT_TYPES,
  type WebhookBatch,
  type WebhookEventType,
  webhookDeliveries,
  webhookEndpoints,
} from "../db/schema";
import { D1_NOW, endpointLags, PARKED } from "./deliveries";
import { newSecret } from "./signature";
import { refusedAddress } from "./webhook-address";

/** The shop's webhook endpoints in D1: what `PUT/GET/DELETE /admin/webhooks/:id` manage. */

export const ENDPOINT_ID = /^[A-Za-z0-9_-]{1,64}$/;

export interface EndpointView {
  id: string;
  url: string;
  events: WebhookEventType[];
  enabled: boolean;
  secret: string;
  createdAt: string;
  updatedAt: string;
  /** Age in seconds of its oldest pending delivery, 0 when none is pending. */
  lagSeconds: number;
  /** API.md v1.4 "Webhook batches": null, one event a message. */
  batch: WebhookBatch | null;
}

export interface EndpointSettings {
  url: string;
  events?: WebhookEventType[] | undefined;
  enabled?: boolean | undefined;
  batch?: WebhookBatch | null | undefined;
}

/**
 * The URL deliveries go to, as the WHATWG parser writes it (what is stored and shown is what is
 * fetched), or why `url` may not receive them. `https://` anywhere but on a private, loopback,
 * link-local, shared, unique-local or unspecified address (API.md v1.4 "Webhook URLs": a signed
 * order must not be aimed at the network behind the Worker, nor at a cloud's metadata service);
 * `http://` only to this machine (`localhost`, `127.0.0.1`) and only where the operator allowed it
 * (the local default), so a deployed Worker never sends signed orders in clear text. No user or
 * password in the URL: it is shown and logged.
 */
export function endpointUrl(url: string, allowHttpLocalhost: boolean): { href: string } | { problem: string } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { problem: "url is not a URL" };
  }
  if (parsed.username || parsed.password) return { problem: "url must not carry a user or password" };
  if (parsed.protocol === "http:") {
    const local = parsed.hostname === "localhost" || parsed.hostname === "127.0.0.1";
    if (!local) return { problem: "url must be https:// (http:// only to localhost or 127.0.0.1)" };
    if (!allowHttpLocalhost) {
      return { problem: "url must be https:// (http://localhost needs WEBHOOK_ALLOW_HTTP_LOCALHOST=true)" };
    }
    return { href: parsed.href };
  }
  if (parsed.protocol !== "https:") return { problem: "url must be https://" };
  const range = refusedAddress(parsed.hostname);
  if (range !== null) {
    return {
      problem: `url must not be a private, loopback, link-local, shared, unique-local or unspecified address (${parsed.hostname} is in ${range}): use the shop's public https:// address`,
    };
  }
  return { href: parsed.href };
}

type EndpointRow = typeof webhookEndpoints.$inferSelect;

function viewOf(row: EndpointRow, lags: Map<string, number>): EndpointView {
  return {
    id: row.id,
    url: row.url,
    events: row.events,
    enabled: row.enabled,
    secret: row.secret,
    createdAt: new Date(row.createdAt).toISOString(),
    updatedAt: new Date(row.updatedAt).toISOString(),
    lagSeconds: lags.get(row.id) ?? 0,
    batch: row.batch ? { maxEvents: row.batch.maxEvents, maxWaitMs: row.batch.maxWaitMs } : null,
  };
}

/**
 * Creates an endpoint (all event types and enabled unless said otherwise, a new secret) or updates
 * one: fields left out keep their value, and the secret is kept. Pending deliveries of event types
 * it no longer subscribes to are parked with the change (one transaction).
 */
export async function putEndpoint(db: D1Database, id: string, settings: EndpointSettings, now: number) {
  const orm = drizzle(db);
  const upsert = orm
    .insert(webhookEndpoints)
    .values({
      id,
      url: settings.url,
      events: settings.events ?? [...WEBHOOK_EVENT_TYPES],
      enabled: settings.enabled ?? true,
      secret: newSecret(),
      createdAt: now,
      updatedAt: now,
      batch: settings.batch ?? null,
    })
    .onConflictDoUpdate({
      target: webhookEndpoints.id,
      set: {
        url: settings.url,
        ...(settings.events ? { events: settings.events } : {}),
        ...(settings.enabled === undefined ? {} : { enabled: settings.enabled }),
        // A change of batch setting leaves the rows as they are: a batch not delivered yet goes again
        // whole if it still fits maxEvents (else cut to it), and alone once the endpoint is unbatched.
        ...(settings.batch === undefined ? {} : { batch: settings.batch }),
        updatedAt: now,
      },
    })
    .returning();
  // Pending deliveries of a type it no longer subscribes to are kept, parked out of every due range (no
  // sender, check or lag reads them), and due now again once the type is subscribed again, in the same
  // transaction: an event type unticked in a hurry loses nothing. One parked past retention is dropped
  // (src/db/retention.ts): the type was not taken back, and the feed no longer has its change either.
  const events = settings.events;
  const pending = and(eq(webhookDeliveries.endpointId, id), eq(webhookDeliveries.status, "pending"));
  const [[row]] = events
    ? await orm.batch([
        upsert,
        orm
          .update(webhookDeliveries)
          .set({ nextAttemptAt: PARKED, parkedAt: sql.raw(D1_NOW) })
          .where(and(pending, notInArray(webhookDeliveries.type, events), lt(webhookDeliveries.nextAttemptAt, PARKED))),
        orm
          .update(webhookDeliveries)
          .set({ nextAttemptAt: sql.raw(D1_NOW), parkedAt: null })
          .where(and(pending, inArray(webhookDeliveries.type, events), gte(webhookDeliveries.nextAttemptAt, PARKED))),
      ])
    : [await upsert];
  if (!row) throw new Error("the endpoint upsert returned no row");
  return viewOf(row, await endpointLags(db, id));
}

export async function getEndpoint(db: D1Database, id: string): Promise<EndpointView | null> {
  const row = await drizzle(db).select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id)).get();
  return row ? viewOf(row, await endpointLags(db, id)) : null;
}

export async function listEndpoints(db: D1Database): Promise<EndpointView[]> {
  const [rows, lags] = await Promise.all([
    drizzle(db).select().from(webhookEndpoints).orderBy(asc(webhookEndpoints.createdAt)),
    endpointLags(db),
  ]);
  return rows.map((row) => viewOf(row, lags));
}

/** Deletes an endpoint and its deliveries (pending ones are dropped); false when there was none. */
export async function deleteEndpoint(db: D1Database, id: string): Promise<boolean> {
  const orm = drizzle(db);
  const [, deleted] = await orm.batch([
    orm.delete(webhookDeliveries).where(eq(webhookDeliveries.endpointId, id)),
    orm.delete(webhookEndpoints).where(eq(webhookEndpoints.id, id)).returning({ id: webhookEndpoints.id }),
  ]);
  return deleted.length > 0;
}
