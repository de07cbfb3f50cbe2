import { Hono } from "hono";
import { DELIVERY_STATUSES } from "../db/schema";
import { cursorOf, feedPage, positionOf } from "../handoff/change-feed";
import { listDeliveries, retryAll, retryNow } from "../handoff/deliveries";
import { wakeSender } from "../handoff/delivery-consumer";
import {
  deleteEndpoint,
  ENDPOINT_ID,
  endpointUrl,
  getEndpoint,
  listEndpoints,
  putEndpoint,
} from "../handoff/endpoints";
import { orderObjectOfRow } from "../handoff/order-object";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { integerQuery } from "../http/query";
import { findOrder, ordersOfUser } from "../orders/order-store";
import { ROUTES } from "./contract";
import { register } from "./register";

/** API.md "Order hand-off": the webhook endpoints, their delivery logs, and the order change feed. */
export const handoff = new Hono<AppEnv>();

/** `limit`: digits only (what /openapi.json documents), 1 to 1000, 100 when left out. */
export const limitOf = (text: string | undefined) => integerQuery(text, "limit", { min: 1, max: 1000, fallback: 100 });

function endpointId(id: string): string {
  if (!ENDPOINT_ID.test(id)) throw new ApiError("NOT_FOUND", "No such webhook endpoint.");
  return id;
}

register(handoff, ROUTES.putWebhook, async (c, body) => {
  const id = c.req.param("id");
  if (!ENDPOINT_ID.test(id))
    throw new ApiError("INVALID_REQUEST", "A webhook endpoint id is 1 to 64 of A-Z a-z 0-9 _ -.");
  const url = endpointUrl(body.url, c.env.WEBHOOK_ALLOW_HTTP_LOCALHOST === "true");
  if ("problem" in url) {
    throw new ApiError("INVALID_REQUEST", `${url.problem}.`, {}, { fields: [{ path: "url", message: url.problem }] });
  }
  const endpoint = await putEndpoint(c.env.DB, id, { ...body, url: url.href }, Date.now());
  // Deliveries left pending while it was disabled are due again.
  if (endpoint.enabled) await wakeSender(c.env);
  return c.json(endpoint);
});

register(handoff, ROUTES.listWebhooks, async (c) => c.json({ webhooks: await listEndpoints(c.env.DB) }));

register(handoff, ROUTES.getWebhook, async (c) => {
  const endpoint = await getEndpoint(c.env.DB, endpointId(c.req.param("id")));
  if (!endpoint) throw new ApiError("NOT_FOUND", "No such webhook endpoint.");
  return c.json(endpoint);
});

register(handoff, ROUTES.deleteWebhook, async (c) => {
  const id = endpointId(c.req.param("id"));
  if (!(await deleteEndpoint(c.env.DB, id))) throw new ApiError("NOT_FOUND", "No such webhook endpoint.");
  return c.json({ id, deleted: true });
});

register(handoff, ROUTES.webhookDeliveries, async (c) => {
  const id = endpointId(c.req.param("id"));
  const status = c.req.query("status");
  if (status !== undefined && !(DELIVERY_STATUSES as readonly string[]).includes(status)) {
    throw new ApiError("INVALID_REQUEST", `status must be one of ${DELIVERY_STATUSES.join(", ")}.`);
  }
  const limit = limitOf(c.req.query("limit"));
  if (!(await getEndpoint(c.env.DB, id))) throw new ApiError("NOT_FOUND", "No such webhook endpoint.");
  const deliveries = await listDeliveries(
    c.env.DB,
    id,
    status as (typeof DELIVERY_STATUSES)[number] | undefined,
    limit,
  );
  return c.json({ deliveries });
});

register(handoff, ROUTES.retryDelivery, async (c) => {
  const id = endpointId(c.req.param("id"));
  const deliveryId = c.req.param("deliveryId");
  const endpoint = await getEndpoint(c.env.DB, id);
  if (!endpoint) throw new ApiError("NOT_FOUND", "No such webhook endpoint.");
  if (!endpoint.enabled) {
    throw new ApiError("INVALID_STATE", "The endpoint is disabled: enable it (PUT with enabled true), then retry.");
  }
  const retried = await retryNow(c.env.DB, id, deliveryId);
  if (retried === "missing") throw new ApiError("NOT_FOUND", "No such delivery of this webhook endpoint.");
  if (retried === "unsubscribed") {
    throw new ApiError(
      "INVALID_STATE",
      "The endpoint no longer subscribes to this delivery's event type: add the type to its events (PUT), then retry.",
    );
  }
  await wakeSender(c.env);
  return c.json({ id: deliveryId, status: "pending" as const }, 202);
});

register(handoff, ROUTES.retryWebhook, async (c) => {
  const id = endpointId(c.req.param("id"));
  const endpoint = await getEndpoint(c.env.DB, id);
  if (!endpoint) throw new ApiError("NOT_FOUND", "No such webhook endpoint.");
  if (!endpoint.enabled) {
    throw new ApiError("INVALID_STATE", "The endpoint is disabled: enable it (PUT with enabled true), then retry.");
  }
  const retried = await retryAll(c.env.DB, id);
  if (retried > 0) await wakeSender(c.env);
  return c.json({ retried }, 202);
});

/** An order as its D1 row has it now (the console's lookup; the feed has every change of it). */
register(handoff, ROUTES.order, async (c) => {
  const row = await findOrder(c.env.DB, c.req.param("id"));
  if (!row) throw new ApiError("RESERVATION_NOT_FOUND", "No order with this reservation id in D1.");
  return c.json(orderObjectOfRow(row));
});

register(handoff, ROUTES.userOrders, async (c) => {
  const rows = await ordersOfUser(c.env.DB, c.req.param("userId"));
  return c.json({ orders: rows.map(orderObjectOfRow) });
});

register(handoff, ROUTES.orderFeed, async (c) => {
  const limit = limitOf(c.req.query("limit"));
  const after = c.req.query("after");
  const position = after === undefined ? 0 : await positionOf(c.env.ADMIN_TOKEN, after);
  if (position === null) throw new ApiError("INVALID_REQUEST", "after is not a cursor this route gave.");
  const page = await feedPage(c.env.DB, position, limit);
  return c.json({ orders: page.orders, next: await cursorOf(c.env.ADMIN_TOKEN, page.last) });
});
