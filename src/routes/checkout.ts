import { Hono } from "hono";
import type { AppEnv } from "../http/context";
import { checkout } from "../payments/checkout";
import { ROUTES } from "./contract";
import { register } from "./register";

/** API.md v1.4 "Paying and refunding through Stripe": a Checkout Session for a hold (src/payments/checkout.ts). */
export const checkoutRoutes = new Hono<AppEnv>();

register(checkoutRoutes, ROUTES.checkout, async (c, body) => {
  const answer = await checkout(
    c.env,
    {
      url: c.req.url,
      userId: c.get("userId"),
      reservationId: c.req.param("id"),
      successUrl: body.successUrl,
      cancelUrl: body.cancelUrl,
    },
    Date.now(),
  );
  return c.json({ url: answer.url, sessionId: answer.sessionId }, answer.again ? 200 : 201);
});
