import { type Context, Hono, type ExecutionContext as HonoExecutionContext } from "hono";
import { sign } from "hono/jwt";
import { z } from "zod";
import { readJson } from "../http/body";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";
import { signPayment } from "../payments/webhook-signature";
import { locateReservation, stockShard } from "../stock/stock-client";

/**
 * Dev-only helpers for the demo storefront (public/index.html). They exist only when the var
 * `DEV_TOOLS` is exactly "true", which `.dev.vars.example` sets for `npm run dev` and which
 * wrangler.toml never sets: anywhere else every `/dev/*` path answers `404 NOT_FOUND`, for
 * every method, exactly like a path that does not exist.
 *
 * Secrets stay on the server: the page gets a shopper JWT (what a login would give it), never
 * AUTH_SECRET, and asks for a payment that the server signs with PAYMENT_WEBHOOK_SECRET.
 */

/** How a route of the app is dispatched from here (the real webhook route, with its middleware). */
export type Dispatch = (
  request: Request,
  env: Env,
  ctx: HonoExecutionContext | undefined,
) => Response | Promise<Response>;

const DEV_JWT_SECONDS = 3600;

const DevJwtRequest = z.object({
  userId: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9_.@-]+$/, "letters, digits and _ . @ - only"),
});

const DevPayRequest = z.object({
  reservationId: z.string().min(1).max(255),
  outcome: z.enum(["succeeded", "failed"]).default("succeeded"),
  /** Minor units; left out, what the reservation costs (quantity × the SKU's price, 0 without one). */
  amount: z.int().min(0).max(100_000_000).optional(),
});

/** What a reservation costs, or 0 for an unknown one or a SKU without a price (amounts unchecked). */
async function amountDue(env: Env, reservationId: string): Promise<number> {
  const where = locateReservation(reservationId);
  if (!where) return 0;
  const stub = stockShard(env, where.sku, where.shard);
  const [reservation, state] = await Promise.all([stub.reservation(reservationId), stub.state()]);
  return reservation && state?.price != null ? reservation.quantity * state.price : 0;
}

/** The request's ExecutionContext; Hono throws when there is none (`app.request` in tests). */
function executionContextOf(c: Context<AppEnv>): HonoExecutionContext | undefined {
  try {
    return c.executionCtx;
  } catch {
    return undefined;
  }
}

export function devRoutes(dispatch: Dispatch) {
  const dev = new Hono<AppEnv>();

  dev.use("/dev/*", async (c, next) => {
    if (c.env.DEV_TOOLS !== "true") throw new ApiError("NOT_FOUND");
    await next();
  });

  /** A shopper JWT for any user id, signed with AUTH_SECRET: the demo's stand-in for a login. */
  dev.post("/dev/jwt", async (c) => {
    const { userId } = await readJson(c, DevJwtRequest);
    const now = Math.floor(Date.now() / 1000);
    const exp = now + DEV_JWT_SECONDS;
    const token = await sign({ sub: userId, iat: now, exp }, c.env.AUTH_SECRET, "HS256");
    return c.json({ userId, token, expiresAt: new Date(exp * 1000).toISOString() });
  });

  /**
   * A simulated payment provider: builds a payment event, signs it like the provider would, and
   * posts it to the real `POST /webhooks/payments` route. The webhook's answer is relayed as is.
   */
  dev.post("/dev/pay", async (c) => {
    const body = await readJson(c, DevPayRequest);
    const event = {
      id: `evt_dev_${crypto.randomUUID()}`,
      type: body.outcome === "succeeded" ? "payment.succeeded" : "payment.failed",
      reservationId: body.reservationId,
      amount: body.amount ?? (await amountDue(c.env, body.reservationId)),
    };
    const raw = JSON.stringify(event);
    const signature = await signPayment(raw, c.env.PAYMENT_WEBHOOK_SECRET, Math.floor(Date.now() / 1000));
    const webhook = new URL("/webhooks/payments", c.req.url);
    const answer = await dispatch(
      new Request(webhook, {
        method: "POST",
        headers: { "content-type": "application/json", "payment-signature": signature },
        body: raw,
      }),
      c.env,
      executionContextOf(c),
    );
    return new Response(answer.body, {
      status: answer.status,
      headers: { "content-type": "application/json", "payment-event-id": event.id },
    });
  });

  return dev;
}
