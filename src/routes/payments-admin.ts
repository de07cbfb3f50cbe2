import { Hono } from "hono";
import { cursorOf, positionOf } from "../handoff/change-feed";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { paymentsPage } from "../payments/payment-records";
import { ROUTES } from "./contract";
import { limitOf } from "./handoff";
import { register } from "./register";

/** API.md "Payments owed back": every payment that took effect or was flagged, paged like the order feed. */
export const paymentsAdmin = new Hono<AppEnv>();

const OUTCOMES = ["applied", "refund_required"] as const;

register(paymentsAdmin, ROUTES.payments, async (c) => {
  const outcome = c.req.query("outcome");
  if (outcome !== undefined && !(OUTCOMES as readonly string[]).includes(outcome)) {
    throw new ApiError("INVALID_REQUEST", `outcome must be one of ${OUTCOMES.join(", ")}.`);
  }
  const limit = limitOf(c.req.query("limit"));
  const after = c.req.query("after");
  const position = after === undefined ? 0 : await positionOf(c.env.ADMIN_TOKEN, after, "payments");
  if (position === null) throw new ApiError("INVALID_REQUEST", "after is not a cursor this route gave.");
  const page = await paymentsPage(c.env.DB, outcome as (typeof OUTCOMES)[number] | undefined, position, limit);
  return c.json({ payments: page.payments, next: await cursorOf(c.env.ADMIN_TOKEN, page.last, "payments") });
});
