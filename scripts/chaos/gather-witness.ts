/**
 * The gathering tier's own check (issue 44), run with each mid-batch abort of a gatherer: a witness
 * homed on that shard reserves right after the abort is armed, so a batch goes through the gatherer
 * and dies with it after the stock object decided it. Told `503 BUSY`, the witness retries the same
 * token, as a shopper must: the retry must answer the one reservation the lost batch made
 * (`Idempotent-Replayed`) or make it, never a second one (invariant 3 on line); the hold joins the
 * ledger, so invariant 4 reads it back and 1, 2 and 5 count it.
 */
import { homeShard } from "../../durable-objects/shared/shard-name";
import { type Reply, sleep, str } from "./http";
import { count, heldAcked, Scene } from "./shoppers";

export class GatherWitness extends Scene {
  /** Witnesses sent, told 503 first, then answered a replay of the lost batch's hold, then a fresh hold. */
  readonly seen = { sent: 0, busyFirst: 0, replayed: 0, madeOnRetry: 0, noHold: 0 };
  #next = 0;

  /** One witness reservation on `shard` of `sku` (of `shards` shards), retried with its token after a 503. */
  async reserve(sku: string, shard: number, shards: number): Promise<void> {
    let user = "";
    for (let k = 0; ; k++) {
      user = `gw-${this.seed}-${this.#next}-${k}`;
      if (homeShard(user, shards) === shard || k > 10_000) break;
    }
    this.#next++;
    const headers = await this.auth(user);
    const minted = await this.client.mint(sku, headers);
    const token = minted.status === 201 ? str(minted.json, "token") : undefined;
    if (!token) return; // sold out or paused: nothing to witness
    this.seen.sent++;
    const answers: Reply[] = [];
    for (let attempt = 0; attempt < 8; attempt++) {
      const reply = await this.client
        .request("POST", `/api/skus/${sku}/reservations`, { headers, body: { token, quantity: 1 } })
        .catch(() => null);
      count(this.ledger, "gatherer witness reserve", reply);
      if (reply === null || reply.status >= 500) {
        this.ledger.unanswered.add(user);
        await sleep(300 + attempt * 300);
        continue;
      }
      answers.push(reply);
      break;
    }
    const last = answers[0];
    const id = last?.status === 202 ? str(last.json, "reservationId") : undefined;
    const retried = this.ledger.unanswered.has(user);
    if (retried) this.seen.busyFirst++;
    if (!last || !id) {
      this.seen.noHold++;
      return;
    }
    if (retried && last.headers.get("idempotent-replayed") === "true") this.seen.replayed++;
    else if (retried) this.seen.madeOnRetry++;
    // One token, one reservation: a replay once more names the same one.
    const again = await this.client
      .request("POST", `/api/skus/${sku}/reservations`, { headers, body: { token, quantity: 1 } })
      .catch(() => null);
    if (again?.status === 202 && str(again.json, "reservationId") !== id) {
      this.ledger.violations.push({
        invariant: 3,
        message: `gatherer witness ${user}: one token answered reservations ${id} and ${str(again.json, "reservationId")}`,
      });
    }
    this.ledger.acked.set(id, heldAcked(id, sku, user, 1, last.json));
  }

  summary(): string {
    const s = this.seen;
    return `${s.sent} witnesses through aborted gatherers: ${s.busyFirst} told 503 first, of which ${s.replayed} answered on retry with the lost batch's hold (Idempotent-Replayed) and ${s.madeOnRetry} with a hold made by the retry; ${s.noHold} without a hold`;
  }
}
