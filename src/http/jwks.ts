import { importJWK, type JWK } from "jose";
import { log } from "../../durable-objects/shared/log";

/**
 * Public keys of an identity provider (a JSON Web Key Set), indexed once so that verifying a
 * shopper JWT costs one map lookup: `index.byKid.get(kid)?.[alg]`, no allocation per request.
 */

/** The algorithms accepted from an identity provider (API.md "Configuration"). */
export const JWKS_ALGORITHMS = ["RS256", "ES256"] as const;
export type JwksAlgorithm = (typeof JWKS_ALGORITHMS)[number];

type KeysByAlg = Partial<Record<JwksAlgorithm, CryptoKey>>;

export interface KeyIndex {
  /** Keys by `kid`, then by algorithm. */
  readonly byKid: ReadonlyMap<string, KeysByAlg>;
  /** For a token without `kid`: the key of an algorithm when the set holds exactly one for it. */
  readonly sole: KeysByAlg;
}

/** The algorithm a JWK may verify, or undefined when it is not a public signing key we accept. */
function algorithmOf(jwk: JWK): JwksAlgorithm | undefined {
  if (jwk.use !== undefined && jwk.use !== "sig") return undefined;
  if (jwk.key_ops !== undefined && !jwk.key_ops.includes("verify")) return undefined;
  if (jwk.d !== undefined) return undefined; // a private key has no business in a published set
  const implied = jwk.kty === "RSA" ? "RS256" : jwk.kty === "EC" && jwk.crv === "P-256" ? "ES256" : undefined;
  // `alg` is optional in a JWK; when present it must agree with the key's type.
  if (jwk.alg !== undefined && jwk.alg !== implied) return undefined;
  return implied;
}

/**
 * Imports every usable key of a JWKS, given as JSON text (anything else in it is skipped, so an IdP publishing an
 * encryption key or an RS512 key beside its RS256 keys still works). Throws when none is usable.
 */
export async function indexKeys(json: string): Promise<KeyIndex> {
  const keys = (JSON.parse(json) as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys)) throw new Error("not a JSON Web Key Set (no `keys` array)");
  const byKid = new Map<string, KeysByAlg>();
  const counts: Partial<Record<JwksAlgorithm, number>> = {};
  const sole: KeysByAlg = {};
  for (const jwk of keys as JWK[]) {
    if (typeof jwk !== "object" || jwk === null) continue;
    const alg = algorithmOf(jwk);
    if (!alg) continue;
    let key: CryptoKey;
    try {
      const imported = await importJWK(jwk, alg);
      if (!(imported instanceof CryptoKey) || imported.type !== "public") continue;
      key = imported;
    } catch {
      continue; // a malformed key is skipped rather than taking the good ones down with it
    }
    if (typeof jwk.kid === "string") {
      const entry = byKid.get(jwk.kid) ?? {};
      entry[alg] = key;
      byKid.set(jwk.kid, entry);
    }
    counts[alg] = (counts[alg] ?? 0) + 1;
    sole[alg] = key;
  }
  for (const alg of JWKS_ALGORITHMS) if (counts[alg] !== 1) delete sole[alg];
  if (counts.RS256 === undefined && counts.ES256 === undefined) {
    throw new Error(`the JWKS holds no usable ${JWKS_ALGORITHMS.join("/")} public key`);
  }
  return { byKid, sole };
}

/** The key for a token's header, or undefined when the set has none for it. */
export function keyFor(index: KeyIndex, alg: JwksAlgorithm, kid: string | undefined): CryptoKey | undefined {
  return kid === undefined ? index.sole[alg] : index.byKid.get(kid)?.[alg];
}

/** Keys are refetched after this long even when every `kid` is known (a revoked key drops out). */
const JWKS_MAX_AGE_MS = 10 * 60_000;
/** At most one fetch from the IdP per this long per isolate, however many unknown `kid`s arrive. */
export const JWKS_REFETCH_FLOOR_MS = 30_000;
/** A fetch of the JWKS that takes longer than this is given up. */
export const JWKS_FETCH_TIMEOUT_MS = 5_000;
/** How often a request waiting for another request's fetch looks whether it is done. */
const WAIT_STEP_MS = 10;
/** Header on the Cache API copy: when the IdP served it (so a cold isolate knows its age). */
const FETCHED_AT = "x-flashgate-jwks-fetched-at";

/** Whether the set may be fetched again now (the caller then calls `refresh`). */
type RemoteVerdict = { key: CryptoKey } | "refresh" | "none";

/**
 * A JWKS behind a URL, kept in isolate memory and in the Cache API (so a new isolate in the same
 * colo does not ask the IdP again). Refetched when older than JWKS_MAX_AGE_MS or when a token
 * names an unknown `kid` (key rotation), never more than once per JWKS_REFETCH_FLOOR_MS.
 *
 * No request ever awaits a promise another request created: on workerd, if that request is
 * cancelled, such a promise never settles and every waiter hangs. A request that needs keys while
 * another fetches them polls for the result instead (and gives up after JWKS_FETCH_TIMEOUT_MS).
 */
export class RemoteKeySet {
  private index: KeyIndex | undefined;
  /** When the IdP served the keys in `index`. */
  private fetchedAt = Number.NEGATIVE_INFINITY;
  /** When this isolate last started a fetch from the IdP. */
  private askedAt = Number.NEGATIVE_INFINITY;
  /** Until when a started fetch counts as in flight (cleared when it settles). */
  private busyUntil = 0;

  constructor(private readonly url: string) {}

  /** The key for this token, or "refresh" when fetching the set again may find it. */
  resolve(alg: JwksAlgorithm, kid: string | undefined, now: number): RemoteVerdict {
    const index = this.index;
    if (!index) return "refresh";
    const mayFetch = now >= Math.max(this.askedAt, this.fetchedAt) + JWKS_REFETCH_FLOOR_MS;
    if (mayFetch && now >= this.fetchedAt + JWKS_MAX_AGE_MS) return "refresh";
    const key = keyFor(index, alg, kid);
    if (key) return { key };
    return mayFetch ? "refresh" : "none";
  }

  /**
   * Brings the set up to date: takes it from the Cache API when this isolate has none yet, else
   * from the IdP (at most once per floor); waits instead when a fetch is already under way.
   * `waitUntil` keeps the fetch going if the request that started it goes away.
   */
  async refresh(waitUntil: (promise: Promise<unknown>) => void): Promise<void> {
    const now = Date.now();
    if (now < this.busyUntil) return this.waitForFetch();
    // Without any keys, a failed fetch is retried sooner (every request is refused meanwhile).
    const floor = this.index ? JWKS_REFETCH_FLOOR_MS : JWKS_FETCH_TIMEOUT_MS;
    if (now < Math.max(this.askedAt, this.fetchedAt) + floor) return;
    this.busyUntil = now + JWKS_FETCH_TIMEOUT_MS;
    const work = this.load(!this.index).finally(() => {
      this.busyUntil = 0;
    });
    waitUntil(work);
    await work;
  }

  private async waitForFetch(): Promise<void> {
    while (Date.now() < this.busyUntil) await new Promise((resolve) => setTimeout(resolve, WAIT_STEP_MS));
  }

  private async load(cold: boolean): Promise<void> {
    const cache = typeof caches === "undefined" ? undefined : caches.default;
    if (cold && cache) {
      try {
        const hit = await cache.match(this.url);
        if (hit) {
          this.install(await indexKeys(await hit.text()), Number(hit.headers.get(FETCHED_AT)) || 0);
          return; // an unknown `kid` then asks the IdP itself, if the cached copy is past the floor
        }
      } catch (err) {
        log("warn", "auth: cached JWKS unreadable", { error: String(err) });
      }
    }
    this.askedAt = Date.now();
    try {
      const response = await fetch(this.url, {
        headers: { accept: "application/jwk-set+json, application/json" },
        signal: AbortSignal.timeout(JWKS_FETCH_TIMEOUT_MS),
      });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const text = await response.text();
      const fetchedAt = Date.now();
      this.install(await indexKeys(text), fetchedAt);
      if (cache) {
        const maxAge = Math.floor(JWKS_MAX_AGE_MS / 1000);
        const copy = new Response(text, {
          headers: {
            "content-type": "application/json",
            "cache-control": `max-age=${maxAge}`,
            [FETCHED_AT]: `${fetchedAt}`,
          },
        });
        await cache.put(this.url, copy).catch((err) => log("warn", "auth: JWKS not cached", { error: String(err) }));
      }
    } catch (err) {
      // The keys held so far stay in use; the floor spaces out the next attempt.
      log("warn", "auth: JWKS fetch failed", { error: String(err) });
    }
  }

  private install(index: KeyIndex, fetchedAt: number): void {
    this.index = index;
    this.fetchedAt = fetchedAt;
  }
}
