import { afterEach, describe, expect, inject, it, vi } from "vitest";
import { issueChallenge, leadingZeroBits } from "../../src/edge/proof-of-work";
import { Scrape } from "../../tools/prometheus";
import { FAULT_SECRETS, STAND_IN_SECRET, TEST_SECRETS } from "../../tools/turnstile-siteverify";
import { type Answer, call, createSku, reserve, stockCallsTo, tokenFor, uniqueSku } from "../support/client";

/**
 * Bot challenges before a purchase token (API.md "Bots"): proof of work and Turnstile, each verified
 * for real (the Worker's own hash and HMAC; Turnstile against the siteverify stand-in of
 * tools/turnstile-siteverify.ts), and "sold out comes first", before the JWT and any challenge.
 */

const { verifyUrl, widgetUrl } = inject("turnstile");
const { controlUrl } = inject("redis");
const TOKEN_SECRET = "test-token-secret";
const BITS = 8;
/** Vars set for one request (wrangler's generated types pin each var to its configured value). */
const vars = (values: Record<string, string>) => values as unknown as Partial<Env>;
const POW = vars({ POW_BITS: String(BITS) });

/** `<challenge>:<nonce>` whose hash begins with at least `bits` and fewer than `below` zero bits. */
async function solve(challenge: string, bits: number, below = 257): Promise<string> {
  for (let nonce = 0; ; nonce++) {
    const zeros = leadingZeroBits(await sha256(`${challenge}:${nonce}`));
    if (zeros >= bits && zeros < below) return `${challenge}:${nonce}`;
  }
}

/** A nonce whose hash does not meet `bits`: a wrong answer to the challenge. */
const unsolved = (challenge: string, bits: number) => solve(challenge, 0, bits);

async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

async function challengeFor(user: string, sku: string, env: Partial<Env> = POW): Promise<string> {
  const answer = await call("GET", `/api/skus/${sku}/challenge`, { user, env });
  expect(answer.status).toBe(200);
  expect(answer.json).toEqual({ challenge: expect.any(String), bits: BITS, expiresAt: expect.any(String) });
  return answer.json.challenge as string;
}

function askToken(user: string, sku: string, env: Partial<Env>, headers: Record<string, string> = {}) {
  return call("POST", `/api/skus/${sku}/tokens`, { user, env, headers });
}

const codeOf = (answer: Answer) => [answer.status, answer.json.error?.code ?? null];

async function widgetAnswer(): Promise<string> {
  const answer = await fetch(widgetUrl, { method: "POST" });
  return ((await answer.json()) as { response: string }).response;
}

async function challengeCount(kind: string, result: string): Promise<number> {
  const answer = await call("GET", "/metrics", { admin: true });
  return new Scrape((answer.json as { text: string }).text).value("flashgate_challenges_total", { kind, result });
}

describe("proof of work", () => {
  afterEach(() => vi.useRealTimers()); // a failure while the clock stands still must not stop it for the next test
  it("mints a token only for a solved challenge of this user and SKU; a failure reaches no stock object but the display read", async () => {
    const sku = uniqueSku("pow");
    const other = uniqueSku("pow-other");
    await createSku(sku, { totalStock: 5 });
    await createSku(other, { totalStock: 5 });
    // A scrape asks every stock object for its gauges: counted before the calls are.
    const missing = await challengeCount("pow", "missing");
    const calls = stockCallsTo(sku);
    // The clock stands still until the refusals are counted: the display is remembered a second per
    // isolate (not configurable), and a loaded machine can take longer than that between two requests,
    // which would read it again. Every refusal below is then held to that one display read.
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() });

    expect(codeOf(await askToken("ann0", sku, POW))).toEqual([403, "CHALLENGE_REQUIRED"]);
    // A refusal, like issuing a challenge, reads the SKU's display (sold out comes first, in a fresh
    // isolate too; an archived SKU has none: 404), at most once a second per isolate: the same read.
    expect(stockCallsTo(sku) - calls).toBeLessThanOrEqual(1);
    const challenge = await challengeFor("ann0", sku);
    const issued = stockCallsTo(sku);
    expect(issued - calls).toBeLessThanOrEqual(1);
    await challengeFor("ann0", sku);
    expect(stockCallsTo(sku)).toBe(issued);
    const wrong = await unsolved(challenge, BITS);
    expect(codeOf(await askToken("ann0", sku, POW, { "Proof-Of-Work": wrong }))).toEqual([403, "CHALLENGE_FAILED"]);
    const solved = await solve(challenge, BITS);
    // Another user's or another SKU's solved challenge, one expired, one altered: refused.
    expect(codeOf(await askToken("bob0", sku, POW, { "Proof-Of-Work": solved }))).toEqual([403, "CHALLENGE_FAILED"]);
    expect(codeOf(await askToken("ann0", other, POW, { "Proof-Of-Work": solved }))).toEqual([403, "CHALLENGE_FAILED"]);
    const stale = await issueChallenge(TOKEN_SECRET, "ann0", sku, BITS, Date.now() - 11 * 60_000);
    const staleSolved = await solve(stale.challenge, BITS);
    expect(codeOf(await askToken("ann0", sku, POW, { "Proof-Of-Work": staleSolved }))).toEqual([
      403,
      "CHALLENGE_FAILED",
    ]);
    const forged = await issueChallenge("not-the-secret", "ann0", sku, BITS, Date.now());
    const forgedSolved = await solve(forged.challenge, BITS);
    expect(codeOf(await askToken("ann0", sku, POW, { "Proof-Of-Work": forgedSolved }))).toEqual([
      403,
      "CHALLENGE_FAILED",
    ]);
    // A challenge made for fewer bits than are asked now is refused, even solved.
    const easy = await issueChallenge(TOKEN_SECRET, "ann0", sku, 1, Date.now());
    const easySolved = await solve(easy.challenge, 1, BITS);
    expect(codeOf(await askToken("ann0", sku, POW, { "Proof-Of-Work": easySolved }))).toEqual([
      403,
      "CHALLENGE_FAILED",
    ]);
    expect(stockCallsTo(sku)).toBe(issued);
    vi.useRealTimers();

    const minted = await askToken("ann0", sku, POW, { "Proof-Of-Work": solved });
    expect(minted.status).toBe(201);
    expect((await reserve("ann0", sku, 1, minted.json.token)).status).toBe(202);
    expect(await challengeCount("pow", "missing")).toBe(missing + 1);
  });

  it("offers no challenge while it is off, and none for a SKU that does not exist", async () => {
    const sku = uniqueSku("pow-off");
    await createSku(sku, { totalStock: 1 });
    expect(codeOf(await call("GET", `/api/skus/${sku}/challenge`, { user: "ann1" }))).toEqual([404, "NOT_FOUND"]);
    expect(codeOf(await call("GET", `/api/skus/${sku}/challenge`))).toEqual([401, "UNAUTHENTICATED"]);
    expect(codeOf(await call("GET", "/api/skus/never-made/challenge", { user: "ann1", env: POW }))).toEqual([
      404,
      "SKU_NOT_FOUND",
    ]);
    expect((await askToken("ann1", sku, {})).status).toBe(201);
  });
});

describe("Turnstile", () => {
  const turnstile = (secret: string, extra: Record<string, string> = {}) =>
    vars({ TURNSTILE_SECRET_KEY: secret, TURNSTILE_VERIFY_URL: verifyUrl, ...extra });

  it("a widget answer is one shopper's: spent for anyone else, and a made-up answer is refused", async () => {
    const sku = uniqueSku("ts");
    await createSku(sku, { totalStock: 5 });
    const env = turnstile(STAND_IN_SECRET);
    const calls = stockCallsTo(sku);
    expect(codeOf(await askToken("ann2", sku, env))).toEqual([403, "CHALLENGE_REQUIRED"]);
    expect(codeOf(await askToken("ann2", sku, env, { "CF-Turnstile-Response": "made-up" }))).toEqual([
      403,
      "CHALLENGE_FAILED",
    ]);
    // Refused at the edge: at most the SKU's display is read (once a second per isolate), to see it is not sold out.
    expect(stockCallsTo(sku) - calls).toBeLessThanOrEqual(1);
    const answer = await widgetAnswer();
    expect((await askToken("ann2", sku, env, { "CF-Turnstile-Response": answer })).status).toBe(201);
    // The same shopper again repeats the verification (its key is theirs and the answer's), as a
    // proof of work mints until it expires; the per-user limit bounds what the tokens buy.
    expect((await askToken("ann2", sku, env, { "CF-Turnstile-Response": answer })).status).toBe(201);
    expect(codeOf(await askToken("bob2", sku, env, { "CF-Turnstile-Response": answer }))).toEqual([
      403,
      "CHALLENGE_FAILED",
    ]);
  });

  it("follows Cloudflare's test secrets, and the hostnames it is told to accept", async () => {
    const sku = uniqueSku("ts-test");
    await createSku(sku, { totalStock: 5 });
    const any = { "CF-Turnstile-Response": "XXXX.DUMMY.TOKEN.XXXX" };
    expect((await askToken("ann3", sku, turnstile(TEST_SECRETS.passes), any)).status).toBe(201);
    expect(codeOf(await askToken("ann3", sku, turnstile(TEST_SECRETS.fails), any))).toEqual([403, "CHALLENGE_FAILED"]);
    expect(codeOf(await askToken("ann3", sku, turnstile(TEST_SECRETS.spent), any))).toEqual([403, "CHALLENGE_FAILED"]);
    const elsewhere = turnstile(TEST_SECRETS.passes, { TURNSTILE_HOSTNAMES: "shop.example" });
    expect(codeOf(await askToken("ann3", sku, elsewhere, any))).toEqual([403, "CHALLENGE_FAILED"]);
    const here = turnstile(STAND_IN_SECRET, { TURNSTILE_HOSTNAMES: "shop.example, flashgate.test" });
    expect((await askToken("ann3", sku, here, { "CF-Turnstile-Response": await widgetAnswer() })).status).toBe(201);
  });

  it("answers 503 BUSY and mints nothing when siteverify errs, answers HTML, or does not answer in time", async () => {
    const sku = uniqueSku("ts-down");
    await createSku(sku, { totalStock: 5 });
    const unavailable = await challengeCount("turnstile", "unavailable");
    const calls = stockCallsTo(sku);
    const header = { "CF-Turnstile-Response": "XXXX.DUMMY.TOKEN.XXXX" };
    for (const env of [
      turnstile(FAULT_SECRETS.error),
      turnstile(FAULT_SECRETS.html),
      // A verify URL that never answers: only the Worker's own timeout ends the wait.
      turnstile(TEST_SECRETS.passes, { TURNSTILE_VERIFY_URL: `${controlUrl}/hang` }),
    ]) {
      const answer = await askToken("ann4", sku, env, header);
      expect([...codeOf(answer), answer.headers.get("Retry-After")]).toEqual([503, "BUSY", "1"]);
    }
    expect(stockCallsTo(sku)).toBe(calls);
    expect(await challengeCount("turnstile", "unavailable")).toBe(unavailable + 3);
  });

  it("a retry after a verify the Worker gave up on is the same verification, not a second use of the answer", async () => {
    const sku = uniqueSku("ts-retry");
    await createSku(sku, { totalStock: 5 });
    // siteverify spends the answer at once but answers only after the Worker's 3 s timeout.
    const env = turnstile(FAULT_SECRETS.slowFirst);
    const answer = { "CF-Turnstile-Response": await widgetAnswer() };
    expect(codeOf(await askToken("ann6", sku, env, answer))).toEqual([503, "BUSY"]);
    // The shopper retries, as the 503 tells them: the same answer, so the same idempotency key.
    expect((await askToken("ann6", sku, env, answer)).status).toBe(201);
    // The key is the user's: another user presenting the same answer spends it a second time.
    expect(codeOf(await askToken("bob6", sku, turnstile(STAND_IN_SECRET), answer))).toEqual([403, "CHALLENGE_FAILED"]);
  });

  it("with proof of work on too, both must be passed", async () => {
    const sku = uniqueSku("both");
    await createSku(sku, { totalStock: 5 });
    const env = { ...POW, ...turnstile(TEST_SECRETS.passes) };
    const pow = await solve(await challengeFor("ann5", sku, env), BITS);
    const widget = { "CF-Turnstile-Response": "XXXX.DUMMY.TOKEN.XXXX" };
    expect(codeOf(await askToken("ann5", sku, env, { "Proof-Of-Work": pow }))).toEqual([403, "CHALLENGE_REQUIRED"]);
    expect(codeOf(await askToken("ann5", sku, env, widget))).toEqual([403, "CHALLENGE_REQUIRED"]);
    expect((await askToken("ann5", sku, env, { ...widget, "Proof-Of-Work": pow })).status).toBe(201);
  });
});

describe("sold out comes first", () => {
  it("answers a sold-out SKU's token and reservation requests before the JWT; a held token still replays", async () => {
    const sku = uniqueSku("first");
    const open = uniqueSku("first-open");
    await createSku(sku, { totalStock: 1 });
    await createSku(open, { totalStock: 1 });
    const token = await tokenFor("ann6", sku);
    const held = await reserve("ann6", sku, 1, token);
    expect(held.status).toBe(202); // its answer shows the SKU sold out: this isolate learns it
    const fresh = await tokenFor("bob6", open);

    expect(codeOf(await call("POST", `/api/skus/${sku}/tokens`))).toEqual([409, "SOLD_OUT"]);
    expect(codeOf(await call("POST", `/api/skus/${open}/tokens`))).toEqual([401, "UNAUTHENTICATED"]);
    // Before any challenge too.
    expect(codeOf(await askToken("cat6", sku, POW))).toEqual([409, "SOLD_OUT"]);
    const body = { token: "not-a-token", quantity: 1 };
    expect(codeOf(await call("POST", `/api/skus/${sku}/reservations`, { body }))).toEqual([409, "SOLD_OUT"]);
    expect(codeOf(await call("POST", `/api/skus/${open}/reservations`, { body }))).toEqual([401, "UNAUTHENTICATED"]);
    expect(
      codeOf(await call("POST", `/api/skus/${open}/reservations`, { body: { token: fresh, quantity: 1 } })),
    ).toEqual([401, "UNAUTHENTICATED"]);
    // A storm's answers, side by side: each the whole contract body, with its own request id.
    const storm = await Promise.all([1, 2, 3].map(() => call("POST", `/api/skus/${sku}/reservations`, { body })));
    for (const answer of storm) {
      expect([answer.status, answer.headers.get("Content-Type"), answer.json]).toEqual([
        409,
        "application/json",
        { error: { code: "SOLD_OUT", message: "Sold out." } },
      ]);
    }
    expect(new Set(storm.map((answer) => answer.headers.get("X-Request-Id"))).size).toBe(3);
    // The token that holds the reservation goes the full way, and gets it back.
    const replay = await reserve("ann6", sku, 1, token);
    expect([replay.status, replay.headers.get("Idempotent-Replayed"), replay.json.reservationId]).toEqual([
      202,
      "true",
      held.json.reservationId,
    ]);
  });
});
