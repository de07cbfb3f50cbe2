// `npm run receiver`: a shop's webhook receiver for the README's walkthrough, on http://127.0.0.1:4000/.
// It checks every delivery with `standardwebhooks` (the scheme's reference library, as
// docs/CONNECTING.md's receiver does) and prints one line per event:
//
//   order.paid     tee-shirt.0.01a2…  alice  paid  2500 eur  (signature ok)
//
// The endpoint's secret: `--secret whsec_…` (or FLASHGATE_WEBHOOK_SECRET); without one it is read from
// the gateway when the first delivery comes (GET /admin/webhooks/<endpoint> with ADMIN_TOKEN from
// .dev.vars), so the receiver can start before the endpoint is registered. Ctrl-C stops it.
import { createServer } from "node:http";
import { text } from "node:stream/consumers";
import { parseArgs } from "node:util";
import { Webhook } from "standardwebhooks";
import { readDevVars } from "../tools/dev-vars";

const HELP = `Usage: npm run receiver -- [options]

A webhook receiver for the walkthrough: verifies each delivery's signature, prints one line per event.

  --port N          where it listens on 127.0.0.1 (default 4000)
  --secret WHSEC    the endpoint's secret (env FLASHGATE_WEBHOOK_SECRET); default: read from the gateway
  --endpoint ID     the webhook endpoint whose secret is read (default shop)
  --gateway URL     the gateway to read it from (default http://127.0.0.1:8787)
  -h, --help        this text`;

const { values } = parseArgs({
  options: {
    port: { type: "string", default: "4000" },
    secret: { type: "string" },
    endpoint: { type: "string", default: "shop" },
    gateway: { type: "string", default: "http://127.0.0.1:8787" },
    help: { type: "boolean", short: "h" },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}

const given = values.secret ?? process.env.FLASHGATE_WEBHOOK_SECRET;
let verifier = given ? new Webhook(given) : undefined;

/** The endpoint's secret as the gateway has it now (null: not registered yet, or unreachable). */
async function secretFromGateway(): Promise<string | null> {
  const token = process.env.ADMIN_TOKEN ?? readDevVars().ADMIN_TOKEN;
  try {
    const res = await fetch(`${values.gateway}/admin/webhooks/${encodeURIComponent(values.endpoint)}`, {
      headers: { authorization: `Bearer ${token ?? ""}` },
    });
    if (!res.ok) return null;
    return ((await res.json()) as { secret?: string }).secret ?? null;
  } catch {
    return null;
  }
}

/** Verifies a delivery; without a given secret, asks the gateway for it (again after a failure: the endpoint may be new). */
async function verify(body: string, headers: Record<string, string>): Promise<unknown> {
  try {
    if (verifier) return verifier.verify(body, headers);
  } catch (err) {
    if (given) throw err;
  }
  const secret = await secretFromGateway();
  if (!secret) throw new Error(`no secret: endpoint ${values.endpoint} not found at ${values.gateway}`);
  verifier = new Webhook(secret);
  return verifier.verify(body, headers);
}

interface Delivery {
  type: string;
  data: Record<string, unknown>;
}

/** A message to an endpoint with a batch setting (API.md v1.4): its events, each with its own id. */
interface Batch {
  type: "batch";
  data: { events: (Delivery & { id: string })[] };
}

/** One line per event: type, reservation, shopper, status, money, and `test` for a test sale's. */
function line(event: Delivery): string {
  const d = event.data;
  const money = typeof d.amount === "number" ? `${d.amount} ${String(d.currency ?? "")}` : "no price";
  const status = event.type.startsWith("payment.") ? `${String(d.outcome)} (${String(d.reason)})` : String(d.status);
  const test = d.test === true ? "  test" : "";
  return `${event.type.padEnd(24)} ${String(d.reservationId)}  ${String(d.userId)}  ${status}  ${money}${test}`;
}

const server = createServer(async (req, res) => {
  const body = await text(req);
  const headers = Object.fromEntries(
    Object.entries(req.headers).map(([name, value]) => [name, Array.isArray(value) ? value.join(",") : (value ?? "")]),
  );
  let message: unknown;
  try {
    message = await verify(body, headers);
  } catch (err) {
    console.log(`refused a delivery (401): ${err instanceof Error ? err.message : String(err)}`);
    res.writeHead(401).end();
    return;
  }
  const batch = (message as Delivery).type === "batch" ? (message as Batch).data.events : null;
  if (batch) {
    console.log(`batch ${headers["webhook-id"]} of ${batch.length} (signature ok):`);
    for (const event of batch) console.log(`  ${line(event)}`);
  } else console.log(`${line(message as Delivery)}  (signature ok)`);
  res.writeHead(204).end();
});
server.on("error", (err) => {
  console.error(`npm run receiver: ${err.message}`);
  process.exit(1);
});
server.listen(Number(values.port), "127.0.0.1", () => {
  const source = given ? "the secret given" : `the secret of endpoint ${values.endpoint} at ${values.gateway}`;
  console.log(`Receiving webhooks on http://127.0.0.1:${values.port}/ (verified with ${source}); Ctrl-C stops it.`);
});
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => process.exit(0));
