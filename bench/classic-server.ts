// The classic baseline (scenario 5), bench only: the seeds' design in TypeScript. A Hono app on
// @hono/node-server checks the shopper's JWT and the purchase token like the Worker does, then
// reserves with lua/reserve.lua by EVALSHA through one node-redis client. No rate limit, no
// outbox: it does strictly less than Flashgate per request.
// Run as a child process: node --import tsx bench/classic-server.ts <port> <redisUrl>
import { randomUUID } from "node:crypto";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { verify } from "hono/jwt";
import { createClient } from "redis";
import { verifyPurchaseToken } from "../src/edge/purchase-token";
import { ApiError, type ErrorCode, errorResponse } from "../src/http/errors";
import { ReservationRequest } from "../src/http/schemas";
import { SECRETS } from "../tools/dev-vars";
import { loadScripts, runScript, shardKeys } from "../tools/lua";

const [portArg, redisUrl] = process.argv.slice(2);
const redis = createClient({ url: redisUrl ?? "" });
await redis.connect();
await loadScripts(redis);

type Answer = { ok: true; value: { reservation: { id: string } } } | { ok: false; code: string };
const app = new Hono();

app.post("/api/skus/:sku/reservations", async (c) => {
  const sku = c.req.param("sku");
  const auth = /^Bearer (\S+)$/.exec(c.req.header("authorization") ?? "")?.[1];
  if (!auth) throw new ApiError("UNAUTHENTICATED");
  const jwt = await verify(auth, SECRETS.AUTH_SECRET, "HS256").catch(() => null);
  const userId = typeof jwt?.sub === "string" ? jwt.sub : null;
  if (!userId) throw new ApiError("UNAUTHENTICATED");
  const parsed = ReservationRequest.safeParse(await c.req.json().catch(() => null));
  if (!parsed.success) throw new ApiError("INVALID_REQUEST");
  const now = Date.now();
  const claims = await verifyPurchaseToken(parsed.data.token, { sku, userId }, SECRETS.TOKEN_SECRET, now);
  const id = `${sku}.${claims.shard}.${randomUUID().replaceAll("-", "")}`;
  const raw = await runScript(redis, "reserve", shardKeys(sku, claims.shard), [
    now,
    id,
    userId,
    claims.nonce,
    parsed.data.quantity,
  ]);
  const answer = JSON.parse(String(raw)) as Answer;
  if (!answer.ok) throw new ApiError(answer.code as ErrorCode);
  return c.json({ reservationId: answer.value.reservation.id }, 202);
});
app.onError(errorResponse);

serve({ fetch: app.fetch, port: Number(portArg), hostname: "127.0.0.1" }, () => {
  process.stdout.write("ready\n");
});
