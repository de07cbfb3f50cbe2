/**
 * The early-access scene of the chaos run (API.md "Early access"), on the `early` SKU (2 shards, tiers
 * `members` by the JWT claim `tier: gold` and `codes` by access code, both before the public start):
 * early buyers by claim (a string and an array holding the value), code holders, code sharers (one
 * code presented by several users at once) and shoppers no tier admits, before and after each tier
 * opens. Every 201 is judged when its request was sent, and every token is used to reserve, so the
 * holds are checked like any other (invariants 1-5). Invariant 13: no code admits two users, and no
 * token before a tier opens for someone it does not admit.
 */
import type { AccessTier } from "../../durable-objects/engine/types";
import { signHs256 } from "../../tools/jwt";
import { errorCode, type Reply, sleep, str } from "./http";
import { call, reserveRecorded, Scene } from "./shoppers";

/** How many users present each shared code at once. */
const SHARERS = 6;
/** How many codes are shared that way. */
const SHARED_CODES = 4;

type Tier = Pick<AccessTier, "name" | "startsAt">;

export class EarlyScene extends Scene {
  /** What was checked, for the summary. */
  readonly checked = { early201: 0, refusedBefore: 0, codesShared: 0, sharers: 0, codeWinners: 0, holds: 0 };
  readonly #jwts = new Map<string, string>();

  /** A shopper's JWT, with `tier` set for members (a string, or an array holding "gold"). */
  async #auth(userId: string, tier?: string | string[]): Promise<Record<string, string>> {
    let jwt = this.#jwts.get(userId);
    if (!jwt) {
      const now = Math.floor(Date.now() / 1000);
      jwt = await signHs256(
        { sub: userId, iat: now, exp: now + 3600, ...(tier === undefined ? {} : { tier }) },
        this.client.secrets.authSecret,
      );
      this.#jwts.set(userId, jwt);
      this.ledger.users.set(userId, jwt);
    }
    return { authorization: `Bearer ${jwt}` };
  }

  /**
   * Asks a token (with `code` when given) and judges it: `admittedFrom` is when this user may first
   * get one (the opening of a tier that admits them, else the public start).
   * A 201 sent before that is a violation. Reserves with a token got, one unit.
   */
  async #try(sku: string, user: string, admittedFrom: number, code?: string): Promise<Reply | null> {
    const headers = { ...(await this.#auth(user)), ...(code ? { "Access-Code": code } : {}) };
    const sent = Date.now();
    const reply = await call(this.ledger, `early token${code ? " with a code" : ""}`, () =>
      this.client.mint(sku, headers),
    );
    const answered = Date.now();
    if (reply?.status === 201) {
      this.checked.early201++;
      // Judged when the whole exchange came before the opening: one sent before it and answered after
      // (sent again after a restart cut it, say) may have been decided once the tier had opened.
      if (answered < admittedFrom)
        this.fail(
          13,
          `${sku}: ${user} got a purchase token answered at ${new Date(answered).toISOString()}, before any tier that admits them opened (${new Date(admittedFrom).toISOString()})`,
        );
      const token = str(reply.json, "token");
      if (token) await this.#reserve(sku, user, token);
    } else if (reply && sent < admittedFrom) {
      this.checked.refusedBefore++;
    }
    return reply;
  }

  async #reserve(sku: string, user: string, token: string): Promise<void> {
    const headers = await this.#auth(user);
    const body = { token, quantity: 1 };
    const { acked } = await reserveRecorded(this.ledger, this.client, "early reserve", sku, user, headers, body);
    if (acked) this.checked.holds++;
  }

  async #codes(sku: string, tier: string, count: number): Promise<string[]> {
    const reply = await this.client.admin("POST", `/admin/skus/${sku}/access-codes`, { tier, count });
    const codes = (reply.json as { codes?: string[] } | null)?.codes;
    if (reply.status !== 201 || !codes)
      throw new Error(`access codes for ${sku} answered ${reply.status}: ${reply.text}`);
    return codes;
  }

  async #until(at: number): Promise<void> {
    if (at > Date.now()) await sleep(at - Date.now());
  }

  /** The whole scene: before the members' hour, during it, once the codes' tier opened. */
  async run(sku: string): Promise<void> {
    const view = await this.client.admin("GET", `/admin/skus/${sku}`);
    const tiers = ((view.json as { access?: { name: string; startsAt: string }[] } | null)?.access ?? []).map(
      (t): Tier => ({ name: t.name, startsAt: Date.parse(t.startsAt) }),
    );
    const members = tiers.find((t) => t.name === "members");
    const coded = tiers.find((t) => t.name === "codes");
    if (!members || !coded) throw new Error(`${sku} has no members and codes tiers: ${view.text}`);
    const p = `early-${this.seed}`;
    const opensToAll = Date.parse(str(view.json, "startsAt") ?? "") || Number.POSITIVE_INFINITY;
    const codes = await this.#codes(sku, "codes", SHARED_CODES + 1);
    const [soloCode, ...shared] = codes as [string, ...string[]];
    await this.#auth(`${p}-m0`, "gold");
    await this.#auth(`${p}-m1`, ["silver", "gold"]);
    await this.#auth(`${p}-s0`, "silver");

    // Before any tier: nobody is admitted, members and code holders included.
    const before = await Promise.all([
      this.#try(sku, `${p}-m0`, members.startsAt),
      this.#try(sku, `${p}-x0`, opensToAll),
      this.#try(sku, `${p}-c0`, coded.startsAt, soloCode),
    ]);
    this.faults.count(`early access before the members' tier: ${before.map((r) => show(r)).join(", ")}`);

    // The members' tier is open, the codes' not yet: a claim admits, a code of the later tier does not.
    await this.#until(members.startsAt + 500);
    const during = await Promise.all([
      this.#try(sku, `${p}-m0`, members.startsAt),
      this.#try(sku, `${p}-m1`, members.startsAt),
      this.#try(sku, `${p}-s0`, opensToAll),
      this.#try(sku, `${p}-x1`, opensToAll),
      this.#try(sku, `${p}-c0`, coded.startsAt, soloCode),
    ]);
    this.faults.count(`early access in the members' tier: ${during.map((r) => show(r)).join(", ")}`);

    // The codes' tier is open: each shared code presented by several users at once; one keeps it.
    await this.#until(coded.startsAt + 500);
    await this.#try(sku, `${p}-c0`, coded.startsAt, soloCode);
    const winners = new Map<string, Set<string>>();
    await Promise.all(
      shared.map(async (code, k) => {
        this.checked.codesShared++;
        const users = Array.from({ length: SHARERS }, (_, i) => `${p}-share${k}-${i}`);
        this.checked.sharers += users.length;
        const replies = await Promise.all(users.map((user) => this.#try(sku, user, coded.startsAt, code)));
        const admitted = new Set(users.filter((_, i) => replies[i]?.status === 201));
        // After the public start a token needs no code: a code is judged only on tries before it.
        if (Date.now() < opensToAll) winners.set(code, admitted);
        else this.faults.count("early code sharers answered after the public start (not judged)");
        for (const reply of replies) this.faults.count(`early code sharers answered ${show(reply)}`);
      }),
    );
    // A taken code presented later by someone else, and by its holder again.
    const [firstShared] = shared;
    const holder = firstShared ? [...(winners.get(firstShared) ?? [])][0] : undefined;
    if (firstShared) {
      const late = await this.#try(sku, `${p}-late`, opensToAll, firstShared);
      // After the public start a token needs no code: only one answered before it counts as the code's
      // (one sent before it and answered after may have been decided once the sale was open to all).
      if (late?.status === 201 && Date.now() < opensToAll) winners.get(firstShared)?.add(`${p}-late`);
      this.faults.count(`early taken code by another user answered ${show(late)}`);
      if (holder) {
        const again = await this.#try(sku, holder, coded.startsAt, firstShared);
        this.faults.count(`early taken code by its holder again answered ${show(again)}`);
      }
    }
    for (const [code, users] of winners) {
      if (users.size > 1)
        this.fail(13, `${sku}: one access code admitted ${users.size} users: ${[...users].join(", ")}`);
      if (users.size === 1) this.checked.codeWinners++;
      else if (users.size === 0) this.faults.count(`early shared code admitted nobody (${code.slice(0, 4)}…)`);
    }
    this.faults.log(
      `early scene ${sku}: ${this.checked.early201} tokens to admitted shoppers, ${this.checked.refusedBefore} refused before their tier, ${this.checked.codeWinners}/${this.checked.codesShared} shared codes taken by exactly one of ${SHARERS}`,
    );
  }

  summary13(): string {
    const c = this.checked;
    return `${c.early201} early tokens each sent after a tier admitting its user opened, ${c.refusedBefore} asked before refused, ${c.codesShared} codes each presented by ${SHARERS} users at once: ${c.codeWinners} taken by exactly one, none by two; ${c.holds} early holds`;
  }
}

const show = (reply: Reply | null) =>
  `${reply?.status ?? 0}${errorCode(reply?.json) ? ` ${errorCode(reply?.json)}` : ""}`;
