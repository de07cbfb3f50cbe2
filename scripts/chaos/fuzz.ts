/**
 * The bad-input pass: every route of docs/API.md gets malformed JSON, wrong types, huge and negative
 * numbers, unicode and control characters, long strings, missing and duplicated headers, forged,
 * expired and cross-user JWTs and purchase tokens, wrong admin tokens and oversized bodies. Every
 * answer must be a contract 4xx (JSON `{"error":{"code","message"}}`, no stack trace), and the stock
 * and order state must be the same afterwards.
 */
import { request as httpRequest } from "node:http";
import { signPayment } from "../../src/payments/webhook-signature";
import { shopperJwt, signHs256 } from "../../tools/jwt";
import { type Client, errorCode, str } from "./http";

interface Case {
  name: string;
  method: string;
  path: string;
  /** Raw header pairs: a name may repeat. */
  headers: [string, string][];
  body?: string | Buffer;
}

interface Answer {
  status: number;
  text: string;
}

/** node:http so that header pairs (duplicates included) and raw bytes go out as written. */
function send(base: string, c: Case): Promise<Answer> {
  const url = new URL(c.path, base);
  return new Promise((resolve, reject) => {
    const flat = [["host", url.host] as [string, string], ...c.headers].flat();
    if (c.body !== undefined) flat.push("content-length", String(Buffer.byteLength(c.body)));
    const req = httpRequest(
      { host: url.hostname, port: url.port, method: c.method, path: c.path, headers: flat, timeout: 30_000 },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => {
          text += d;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    if (c.body !== undefined) req.write(c.body);
    req.end();
  });
}

const JSON_HEADER: [string, string] = ["content-type", "application/json"];

/** Bodies that are not what any route accepts. */
function badBodies(): [string, string | Buffer][] {
  const long = "x".repeat(5_000);
  return [
    ["malformed JSON", '{"token": '],
    ["not an object", "[1,2,3]"],
    ["null", "null"],
    ["empty", ""],
    ["wrong types", '{"token": 12, "quantity": "two", "totalStock": "many", "id": false, "type": 7}'],
    ["negative", '{"token": "t", "quantity": -5, "totalStock": -1, "amount": -1, "userId": "u"}'],
    ["huge numbers", '{"token": "t", "quantity": 1e308, "totalStock": 99999999999999999999, "shards": 1e9}'],
    ["fractions", '{"token": "t", "quantity": 1.5, "totalStock": 2.5}'],
    ["zero", '{"token": "", "quantity": 0, "totalStock": 0.1}'],
    [
      "unicode and controls",
      `{"token": "\\u0000\\u001f\\ud800 ☃ 𝄞 \\u202e", "quantity": "\\u0007", "name": "\\u0000"}`,
    ],
    ["long strings", `{"token": "${long}", "quantity": "${long}", "id": "${long}"}`],
    ["invalid UTF-8", Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])],
    ["nested deep", `${"[".repeat(5_000)}${"]".repeat(5_000)}`],
    ["prototype keys", '{"__proto__": {"admin": true}, "constructor": {"prototype": 1}, "quantity": {"$gt": 0}}'],
    ["oversized", JSON.stringify({ token: "t", quantity: 1, pad: "y".repeat(20 * 1024) })],
  ];
}

/** SKU ids never configured that the pass names in paths (invariant 11 names what they left). */
export const FUZZ_GHOSTS = ["fuzz-no-such-sku", "-1"];

export interface FuzzResult {
  cases: number;
  byStatus: Map<number, number>;
  failures: string[];
}

export async function fuzz(
  client: Client,
  known: { sku: string; reservationId: string; ownerId: string },
  log: (line: string) => void,
): Promise<FuzzResult> {
  const { sku, reservationId, ownerId } = known;
  const secrets = client.secrets;
  const now = Math.floor(Date.now() / 1000);
  let user = 0;
  const freshUser = () => `fuzz-user-${user++}`;
  const valid = async () => `Bearer ${await shopperJwt(freshUser(), secrets.authSecret)}`;
  const forged = [
    ["no bearer", ""],
    ["not a JWT", "Bearer not-a-jwt"],
    ["wrong secret", `Bearer ${await signHs256({ sub: "mallory", exp: now + 600 }, "wrong-secret")}`],
    ["expired", `Bearer ${await signHs256({ sub: "mallory", exp: now - 600 }, secrets.authSecret)}`],
    ["no exp", `Bearer ${await signHs256({ sub: "mallory" }, secrets.authSecret)}`],
    ["sub not a string", `Bearer ${await signHs256({ sub: 42, exp: now + 600 }, secrets.authSecret)}`],
    ["sub too long", `Bearer ${await signHs256({ sub: "u".repeat(500), exp: now + 600 }, secrets.authSecret)}`],
    [
      "alg none",
      `Bearer ${Buffer.from('{"alg":"none","typ":"JWT"}').toString("base64url")}.${Buffer.from(JSON.stringify({ sub: "mallory", exp: now + 600 })).toString("base64url")}.`,
    ],
    ["basic scheme", "Basic YWRtaW46YWRtaW4="],
    ["latin-1 bytes", "Bearer \u00e9\u00ff\u00a0"],
  ] as const;
  const cases: Case[] = [];
  const add = (name: string, method: string, path: string, headers: [string, string][], body?: string | Buffer) =>
    cases.push(body === undefined ? { name, method, path, headers } : { name, method, path, headers, body });

  // A real purchase token of another user (cross-user), a tampered one, and one for another SKU.
  const owner = `Bearer ${await shopperJwt(ownerId, secrets.authSecret)}`;
  const minted = await client.request("POST", `/api/skus/${sku}/tokens`, { headers: { authorization: owner } });
  const realToken = minted.status === 201 ? (str(minted.json, "token") ?? "x.y") : "eyJmYWtlIjp0cnVlfQ.c2ln";
  const tampered = `${realToken.slice(0, -2)}${realToken.endsWith("A") ? "B" : "A"}A`;

  const shopperRoutes: [string, string][] = [
    ["POST", `/api/skus/${sku}/tokens`],
    ["POST", `/api/skus/${sku}/reservations`],
    ["POST", `/api/skus/${sku}/waitlist`],
    ["GET", `/api/reservations/${reservationId}`],
    ["POST", `/api/reservations/${reservationId}/cancel`],
    ["GET", "/api/me/reservations"],
  ];
  for (const [method, path] of shopperRoutes) {
    for (const [name, auth] of forged)
      add(
        `${method} ${path} JWT ${name}`,
        method,
        path,
        auth ? [["authorization", auth], JSON_HEADER] : [JSON_HEADER],
        '{"quantity":0}',
      );
    add(
      `${method} ${path} duplicated Authorization`,
      method,
      path,
      [["authorization", await valid()], ["authorization", await valid()], JSON_HEADER],
      '{"quantity":0}',
    );
  }
  // Bodies of the routes that read one, with a valid JWT of a fresh user each time.
  for (const path of [`/api/skus/${sku}/reservations`, `/api/skus/${sku}/waitlist`]) {
    for (const [name, body] of badBodies())
      add(`POST ${path} ${name}`, "POST", path, [["authorization", await valid()], JSON_HEADER], body);
  }
  // Purchase tokens: forged, tampered, cross-user, other SKU, expired-looking, absurd quantities.
  const reservations = `/api/skus/${sku}/reservations`;
  const tokenCases: [string, string, unknown][] = [
    ["cross-user token", realToken, 1],
    ["tampered token", tampered, 1],
    ["garbage token", "a.b.c", 1],
    ["token as number", "", 1],
    ["huge quantity", realToken, 2 ** 53],
    ["negative quantity", realToken, -1],
    ["quantity string", realToken, "1"],
  ];
  for (const [name, token, quantity] of tokenCases) {
    add(
      `POST reservations ${name}`,
      "POST",
      reservations,
      [["authorization", await valid()], JSON_HEADER],
      JSON.stringify({ token, quantity }),
    );
  }
  add(
    "POST reservations token for another SKU",
    "POST",
    "/api/skus/fuzz-no-such-sku/reservations",
    [["authorization", owner], JSON_HEADER],
    JSON.stringify({ token: realToken, quantity: 1 }),
  );
  // Cross-user reads and cancels of a real reservation: 404 for anyone but the owner.
  add("GET reservation cross-user", "GET", `/api/reservations/${reservationId}`, [["authorization", await valid()]]);
  add("cancel reservation cross-user", "POST", `/api/reservations/${reservationId}/cancel`, [
    ["authorization", await valid()],
  ]);
  // Odd ids and SKUs in paths (unicode, controls, long, traversal).
  for (const id of [
    "%00",
    "%E2%98%83",
    "..%2F..%2Fadmin",
    "a".repeat(2_000),
    `${sku}.99.${"0".repeat(32)}`,
    "%F0%9D%84%9E",
    "-1",
  ]) {
    add(`GET /api/skus/${id.slice(0, 20)}`, "GET", `/api/skus/${id}`, []);
    add(`POST tokens /${id.slice(0, 20)}`, "POST", `/api/skus/${id}/tokens`, [["authorization", await valid()]]);
    add(`GET reservation ${id.slice(0, 20)}`, "GET", `/api/reservations/${id}`, [["authorization", await valid()]]);
    add(`admin GET sku ${id.slice(0, 20)}`, "GET", `/admin/skus/${id}`, [
      ["authorization", `Bearer ${secrets.adminToken}`],
    ]);
  }
  // Wrong methods and unknown routes.
  add("DELETE sku", "DELETE", `/api/skus/${sku}`, []);
  add("PATCH reservations", "PATCH", reservations, [["authorization", await valid()]]);
  add("unknown route", "GET", "/api/nothing-here", []);

  // Webhooks: signatures missing, malformed, wrong, stale, future, duplicated; valid ones over bad bodies.
  const event = (id: string, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ id, type: "payment.succeeded", reservationId: `${sku}.0.${"f".repeat(32)}`, amount: 1, ...extra });
  const raw = event("evt_fuzz_1");
  const signatures: [string, string | null][] = [
    ["missing", null],
    ["empty", ""],
    ["garbage", "garbage"],
    ["wrong secret", await signPayment(raw, "wrong-secret", now)],
    ["stale", await signPayment(raw, secrets.webhookSecret, now - 301)],
    ["future", await signPayment(raw, secrets.webhookSecret, now + 301)],
    ["non-hex", `t=${now},v1=zz`],
    ["huge t", `t=99999999999999999999,v1=00`],
    ["latin-1", `t=${now},v1=\u00e9\u00ff`],
  ];
  for (const [name, signature] of signatures) {
    add(
      `webhook signature ${name}`,
      "POST",
      "/webhooks/payments",
      signature === null ? [JSON_HEADER] : [["payment-signature", signature], JSON_HEADER],
      raw,
    );
  }
  add(
    "webhook duplicated signature header (one wrong)",
    "POST",
    "/webhooks/payments",
    [["payment-signature", "t=1,v1=00"], ["payment-signature", await signPayment(raw, "nope", now)], JSON_HEADER],
    raw,
  );
  add(
    "webhook body tampered after signing",
    "POST",
    "/webhooks/payments",
    [["payment-signature", await signPayment(raw, secrets.webhookSecret, now)], JSON_HEADER],
    event("evt_fuzz_1", { amount: 2 }),
  );
  const signedBad: [string, string][] = [
    ...badBodies().flatMap(([name, body]): [string, string][] => (typeof body === "string" ? [[name, body]] : [])),
    ["unknown type", event("evt_fuzz_2", { type: "payment.refunded" })],
    ["negative amount", event("evt_fuzz_3", { amount: -1 })],
    ["unknown reservation", event("evt_fuzz_4")],
    ["foreign reservation id", event("evt_fuzz_5", { reservationId: "../../admin" })],
  ];
  for (const [name, body] of signedBad) {
    add(
      `webhook signed ${name}`,
      "POST",
      "/webhooks/payments",
      [["payment-signature", await signPayment(body, secrets.webhookSecret, now)], JSON_HEADER],
      body,
    );
  }

  // Admin: wrong tokens on every route; the right token with invalid bodies and queries.
  const adminRoutes: [string, string][] = [
    ["PUT", `/admin/skus/${sku}`],
    ["GET", `/admin/skus/${sku}`],
    ["GET", "/admin/skus"],
    ["POST", "/admin/reconcile"],
    ["GET", "/admin/reconcile/runs"],
    ["GET", "/admin/dead-letters"],
    ["POST", "/admin/dead-letters/x/replay"],
    ["GET", "/metrics"],
    ["PUT", "/chaos/consumer-faults"],
    ["POST", `/chaos/stock/${sku}/0/abort`],
  ];
  const wrongAdmin = [
    "",
    "Bearer ",
    "Bearer wrong",
    `Bearer ${secrets.adminToken}x`,
    `Bearer ${secrets.adminToken.slice(0, -1)}`,
    `bearer  ${"a".repeat(5_000)}`,
    `Basic ${secrets.adminToken}`,
  ];
  for (const [method, path] of adminRoutes) {
    for (const auth of wrongAdmin)
      add(
        `${method} ${path} admin token "${auth.slice(0, 12)}"`,
        method,
        path,
        auth ? [["authorization", auth], JSON_HEADER] : [JSON_HEADER],
        '{"totalStock":0,"failRate":1}',
      );
  }
  const admin: [string, string][] = [["authorization", `Bearer ${secrets.adminToken}`], JSON_HEADER];
  for (const [name, body] of badBodies()) add(`PUT sku ${name}`, "PUT", `/admin/skus/${sku}`, admin, body);
  const settings: [string, unknown][] = [
    ["shards 65", { totalStock: 1000, shards: 65 }],
    ["holdSeconds 5", { totalStock: 1000, holdSeconds: 5 }],
    ["perUserLimit 0", { totalStock: 1000, perUserLimit: 0 }],
    ["status unknown", { totalStock: 1000, status: "sold" }],
    ["startsAt garbage", { totalStock: 1000, startsAt: "yesterday" }],
    ["name huge", { totalStock: 1000, name: "n".repeat(15_000) }],
  ];
  // Lowering the total below held + sold (409), when something is held or sold.
  const view = await client.admin("GET", `/admin/skus/${sku}`);
  const stock = (view.json as { stock?: { held: number; sold: number } } | null)?.stock;
  if (stock && stock.held + stock.sold > 0)
    settings.push(["totalStock below held+sold", { totalStock: stock.held + stock.sold - 1 }]);
  for (const [name, body] of settings) add(`PUT sku ${name}`, "PUT", `/admin/skus/${sku}`, admin, JSON.stringify(body));
  add("PUT sku invalid id", "PUT", `/admin/skus/${"%E2%98%83".repeat(3)}`, admin, JSON.stringify({ totalStock: 1 }));
  for (const limit of ["0", "51", "-1", "abc", "1e3", "%00"])
    add(`runs limit ${limit}`, "GET", `/admin/reconcile/runs?limit=${limit}`, admin);
  add("replay unknown dead letter", "POST", "/admin/dead-letters/no-such-letter/replay", admin);
  for (const [name, body] of badBodies()) add(`chaos faults ${name}`, "PUT", "/chaos/consumer-faults", admin, body);

  // Missing content type and oversized bodies on every body route.
  for (const [method, path] of [
    ["POST", reservations],
    ["PUT", `/admin/skus/${sku}`],
    ["POST", "/webhooks/payments"],
  ] as const) {
    add(
      `${path} 64 KiB body`,
      method,
      path,
      [["authorization", path.startsWith("/admin") ? `Bearer ${secrets.adminToken}` : await valid()]],
      "z".repeat(64 * 1024),
    );
  }

  log(`fuzz: ${cases.length} bad requests`);
  const result: FuzzResult = { cases: cases.length, byStatus: new Map(), failures: [] };
  let next = 0;
  const worker = async () => {
    for (;;) {
      const c = cases[next++];
      if (!c) return;
      let answer: Answer;
      try {
        answer = await send(client.base, c);
      } catch (err) {
        result.failures.push(`${c.name}: no answer (${String(err)})`);
        continue;
      }
      result.byStatus.set(answer.status, (result.byStatus.get(answer.status) ?? 0) + 1);
      let json: unknown = null;
      try {
        json = JSON.parse(answer.text);
      } catch {
        json = null;
      }
      const code = errorCode(json);
      const stack = /\bat [\w.<>]+ \(|\.ts:\d+|node_modules|Error: /.test(answer.text);
      if (answer.status < 400 || answer.status >= 500 || !code || stack) {
        result.failures.push(`${c.name}: ${answer.status} ${answer.text.slice(0, 160)}`);
      }
    }
  };
  await Promise.all(Array.from({ length: 6 }, worker));
  return result;
}
