import { Hono } from "hono";
import { paymentsPage } from "../db/payment-records";
import { cursorOf, positionOf } from "../handoff/change-feed";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { markRefunded, refundThroughStripe } from "../payments/refunds";
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
  const refunded = c.req.query("refunded");
  if (refunded !== undefined && refunded !== "true" && refunded !== "false") {
    throw new ApiError("INVALID_REQUEST", "refunded must be true or false.");
  }
  const page = await paymentsPage(
    c.env.DB,
    outcome as (typeof OUTCOMES)[number] | undefined,
    position,
    limit,
    refunded === undefined ? undefined : refunded === "true",
  );
  return c.json({ payments: page.payments, next: await cursorOf(c.env.ADMIN_TOKEN, page.last, "payments") });
});

/** API.md v1.4: a payment owed back refunded through Stripe. */
register(paymentsAdmin, ROUTES.refundPayment, async (c) =>
  c.json(await refundThroughStripe(c.env, c.req.param("eventId"), Date.now())),
);

/** API.md v1.4: a payment owed back recorded as refunded outside Flashgate. */
register(paymentsAdmin, ROUTES.markRefunded, async (c, body) =>
  c.json(await markRefunded(c.env.DB, c.req.param("eventId"), body.note, Date.now())),
);
