import { describe, expect, it } from "vitest";
import { signPayment } from "../../src/payments/webhook-signature";
import { Scrape } from "../../tools/prometheus";
import { call, createSku, reserve, stockOf, uniqueSku } from "../support/client";
import { pay } from "../support/payments";
import { checkoutSession, paymentIntent, STRIPE_SECRET, sendStripe, stripeEvent } from "../support/stripe";

/** `POST /webhooks/stripe` (API.md v1.1), driven by events signed with the official `stripe` package. */

const IGNORED = { received: true, ignored: true };

async function ignoredCount(): Promise<number> {
  const answer = await call("GET", "/metrics", { admin: true });
  return new Scrape((answer.json as { text: string }).text).value("flashgate_payments_total", { outcome: "ignored" });
}

describe("Stripe webhook", () => {
  it("checkout.session.completed pays through client_reference_id, with the money checked", async () => {
    const sku = uniqueSku("stripe-co");
    await createSku(sku, { totalStock: 5, perUserLimit: 2, price: 1250, currency: "usd" });
    const held = await reserve("sia", sku, 2);
    const id = held.json.reservationId as string;

    const short = await sendStripe(stripeEvent("checkout.session.completed", checkoutSession(id, 1250)));
    expect([short.status, short.json]).toEqual([
      200,
      {
        received: true,
        reservationStatus: "held",
        outcome: "refund_required",
        expected: { amount: 2500, currency: "usd" },
      },
    ]);
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 2, sold: 0 });

    const intent = "pi_test_checkout_one";
    const completed = stripeEvent("checkout.session.completed", checkoutSession(id, 2500, { paymentIntent: intent }));
    const paid = await sendStripe(completed);
    expect([paid.status, paid.json]).toEqual([200, { received: true, reservationStatus: "paid", outcome: "applied" }]);
    // Stripe retries the same event: same answer, no second effect.
    expect((await sendStripe(completed)).json).toEqual(paid.json);
    // The same money announced again by payment_intent.succeeded is not a second payment.
    const sameMoney = await sendStripe(
      stripeEvent("payment_intent.succeeded", paymentIntent(id, 2500, { id: intent })),
    );
    expect(sameMoney.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 0, sold: 2 });
    // Other money for the paid reservation is a refund.
    const again = await sendStripe(stripeEvent("payment_intent.succeeded", paymentIntent(id, 2500)));
    expect(again.json).toEqual({ received: true, reservationStatus: "paid", outcome: "refund_required" });
    expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.payments).toEqual({ refund_required: 2 });
  });

  it("metadata.reservationId works for sessions; payment_intent.succeeded pays; wrong currency is refused", async () => {
    const sku = uniqueSku("stripe-pi");
    await createSku(sku, { totalStock: 5, price: 900, currency: "eur" });
    const a = await reserve("tom", sku, 1);
    const viaMetadata = checkoutSession(null, 900, {
      currency: "eur",
      metadata: { reservationId: a.json.reservationId },
    });
    expect((await sendStripe(stripeEvent("checkout.session.completed", viaMetadata))).json.outcome).toBe("applied");

    const b = await reserve("uma", sku, 1);
    const usd = await sendStripe(stripeEvent("payment_intent.succeeded", paymentIntent(b.json.reservationId, 900)));
    expect(usd.json).toEqual({
      received: true,
      reservationStatus: "held",
      outcome: "refund_required",
      expected: { amount: 900, currency: "eur" },
    });
    const eur = paymentIntent(b.json.reservationId, 900, { currency: "eur" });
    expect((await sendStripe(stripeEvent("payment_intent.succeeded", eur))).json).toEqual({
      received: true,
      reservationStatus: "paid",
      outcome: "applied",
    });
    expect(await stockOf(sku)).toEqual({ total: 5, available: 3, held: 0, sold: 2 });
  });

  it("payment_intent.payment_failed releases the hold", async () => {
    const sku = uniqueSku("stripe-fail");
    await createSku(sku, { totalStock: 2, price: 100 });
    const held = await reserve("vic", sku, 1);
    const failed = paymentIntent(held.json.reservationId, 100, { status: "requires_payment_method" });
    const answer = await sendStripe(stripeEvent("payment_intent.payment_failed", failed));
    expect(answer.json).toEqual({ received: true, reservationStatus: "cancelled", outcome: "applied" });
    expect(await stockOf(sku)).toEqual({ total: 2, available: 2, held: 0, sold: 0 });
  });

  it("delayed payment methods: an unpaid completed session is ignored, async_payment_succeeded pays once", async () => {
    const sku = uniqueSku("stripe-async");
    await createSku(sku, { totalStock: 3, perUserLimit: 2, price: 400, currency: "eur" });
    const id = (await reserve("ada", sku, 2)).json.reservationId as string;
    const intent = `pi_test_async_${crypto.randomUUID().slice(0, 8)}`;
    const session = (paymentStatus: string) =>
      checkoutSession(id, 800, { currency: "eur", paymentStatus, paymentIntent: intent });

    const unpaid = await sendStripe(stripeEvent("checkout.session.completed", session("unpaid")));
    expect([unpaid.status, unpaid.json]).toEqual([200, IGNORED]);
    expect(await stockOf(sku)).toEqual({ total: 3, available: 1, held: 2, sold: 0 });

    const succeeded = stripeEvent("checkout.session.async_payment_succeeded", session("paid"));
    const paid = await sendStripe(succeeded);
    expect([paid.status, paid.json]).toEqual([200, { received: true, reservationStatus: "paid", outcome: "applied" }]);
    expect((await sendStripe(succeeded)).json).toEqual(paid.json); // Stripe's retry
    // The same money announced by the PaymentIntent is the same payment, not a second one.
    const sameMoney = paymentIntent(id, 800, { id: intent, currency: "eur" });
    expect((await sendStripe(stripeEvent("payment_intent.succeeded", sameMoney))).json).toEqual(paid.json);
    expect(await stockOf(sku)).toEqual({ total: 3, available: 1, held: 0, sold: 2 });
    expect((await call("GET", `/admin/skus/${sku}`, { admin: true })).json.payments).toEqual({ refund_required: 0 });

    // Its money is checked like a completed session's.
    const other = (await reserve("ben", sku, 1)).json.reservationId as string;
    const short = checkoutSession(other, 100, { currency: "eur" });
    expect((await sendStripe(stripeEvent("checkout.session.async_payment_succeeded", short))).json).toEqual({
      received: true,
      reservationStatus: "held",
      outcome: "refund_required",
      expected: { amount: 400, currency: "eur" },
    });
  });

  it("checkout.session.async_payment_failed releases the hold", async () => {
    const sku = uniqueSku("stripe-async-fail");
    await createSku(sku, { totalStock: 2, price: 300 });
    const id = (await reserve("cyd", sku, 1)).json.reservationId as string;
    const failed = stripeEvent(
      "checkout.session.async_payment_failed",
      checkoutSession(id, 300, { paymentStatus: "unpaid" }),
    );
    const answer = await sendStripe(failed);
    expect([answer.status, answer.json]).toEqual([
      200,
      { received: true, reservationStatus: "cancelled", outcome: "applied" },
    ]);
    expect(await stockOf(sku)).toEqual({ total: 2, available: 2, held: 0, sold: 0 });
    // Through metadata.reservationId too.
    const viaMetadata = (await reserve("dov", sku, 1)).json.reservationId as string;
    const byMetadata = checkoutSession(null, 300, {
      paymentStatus: "unpaid",
      metadata: { reservationId: viaMetadata },
    });
    expect((await sendStripe(stripeEvent("checkout.session.async_payment_failed", byMetadata))).json).toEqual({
      received: true,
      reservationStatus: "cancelled",
      outcome: "applied",
    });
  });

  it("one PaymentIntent is one payment: its money naming another reservation is 422 and pays nothing", async () => {
    const skuA = uniqueSku("stripe-pi-a");
    const skuB = uniqueSku("stripe-pi-b");
    await createSku(skuA, { totalStock: 2, price: 500 });
    await createSku(skuB, { totalStock: 2, price: 500 });
    const a = (await reserve("eli", skuA, 1)).json.reservationId as string;
    const b = (await reserve("fay", skuB, 1)).json.reservationId as string;
    const intent = `pi_test_one_${crypto.randomUUID().slice(0, 8)}`;
    const paid = await sendStripe(
      stripeEvent("checkout.session.completed", checkoutSession(a, 500, { paymentIntent: intent })),
    );
    expect(paid.json).toEqual({ received: true, reservationStatus: "paid", outcome: "applied" });
    const elsewhere = await sendStripe(stripeEvent("payment_intent.succeeded", paymentIntent(b, 500, { id: intent })));
    expect([elsewhere.status, elsewhere.json.error?.code]).toEqual([422, "IDEMPOTENCY_MISMATCH"]);
    expect(await stockOf(skuB)).toEqual({ total: 2, available: 1, held: 1, sold: 0 });
    expect(await stockOf(skuA)).toEqual({ total: 2, available: 1, held: 0, sold: 1 });
  });

  it("other types, missing and unknown reservations and unpaid sessions answer 200 ignored; the latter are counted", async () => {
    const sku = uniqueSku("stripe-ign");
    await createSku(sku, { totalStock: 2, price: 100 });
    const held = await reserve("wes", sku, 1);
    const before = await ignoredCount();
    const answers = [
      await sendStripe(stripeEvent("customer.created", { id: "cus_test_1", object: "customer", email: "x@y.z" })),
      await sendStripe(stripeEvent("charge.refunded", { id: "ch_test_1", object: "charge", amount: 100 })),
      await sendStripe(stripeEvent("checkout.session.completed", checkoutSession(null, 100))),
      await sendStripe(stripeEvent("payment_intent.succeeded", paymentIntent(undefined, 100))),
      await sendStripe(stripeEvent("payment_intent.succeeded", paymentIntent("not-a-reservation", 100))),
      await sendStripe(stripeEvent("payment_intent.succeeded", paymentIntent(`${sku}.0.${"0".repeat(32)}`, 100))),
      await sendStripe(
        stripeEvent(
          "checkout.session.completed",
          checkoutSession(held.json.reservationId, 100, { paymentStatus: "unpaid" }),
        ),
      ),
    ];
    for (const answer of answers) expect([answer.status, answer.json]).toEqual([200, IGNORED]);
    expect((await ignoredCount()) - before).toBe(5);
    expect(await stockOf(sku)).toEqual({ total: 2, available: 1, held: 1, sold: 0 });
  });

  it("refuses a bad Stripe-Signature with 401 and changes nothing; /webhooks/payments keeps its own header", async () => {
    const sku = uniqueSku("stripe-sig");
    await createSku(sku, { totalStock: 2 });
    const held = await reserve("xan", sku, 1);
    const event = stripeEvent("checkout.session.completed", checkoutSession(held.json.reservationId, 0));
    const now = Math.floor(Date.now() / 1000);
    const payload = JSON.stringify(event);
    const attempts = [
      await sendStripe(event, { secret: "whsec_wrong" }),
      // Outside the 300 s tolerance by more than the seconds this test's awaits may take on a busy machine.
      await sendStripe(event, { timestamp: now - 330 }),
      await sendStripe(event, { timestamp: now + 330 }),
      await sendStripe(event, { header: "t=1,v1=00" }),
      await call("POST", "/webhooks/stripe", { raw: payload }),
      // A Payment-Signature is not a Stripe-Signature, even when its secret would be right.
      await call("POST", "/webhooks/stripe", {
        raw: payload,
        headers: { "payment-signature": await signPayment(payload, STRIPE_SECRET, now) },
      }),
    ];
    for (const answer of attempts) expect([answer.status, answer.json.error?.code]).toEqual([401, "SIGNATURE_INVALID"]);
    expect(await stockOf(sku)).toEqual({ total: 2, available: 1, held: 1, sold: 0 });
    // Stripe's scheme computed by hand (not by the stripe package, not by Flashgate's code): hex
    // HMAC-SHA256 of "<t>.<payload>" with the secret's bytes, accepted up to 290 s either way.
    const signed = async (raw: string, t: number) => {
      const key = await crypto.subtle.importKey(
        "raw",
        new TextEncoder().encode(STRIPE_SECRET),
        { name: "HMAC", hash: "SHA-256" },
        false,
        ["sign"],
      );
      const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${t}.${raw}`)));
      const hex = [...mac].map((byte) => byte.toString(16).padStart(2, "0")).join("");
      return call("POST", "/webhooks/stripe", { raw, headers: { "stripe-signature": `t=${t},v1=${hex}` } });
    };
    const late = await signed(payload, now - 290);
    expect([late.status, late.json.outcome]).toEqual([200, "applied"]);
    const second = (await reserve("xan-2", sku, 1)).json.reservationId as string;
    const ahead = await signed(
      JSON.stringify(stripeEvent("checkout.session.completed", checkoutSession(second, 0))),
      now + 290,
    );
    expect([ahead.status, ahead.json.outcome]).toEqual([200, "applied"]);
    expect(await stockOf(sku)).toEqual({ total: 2, available: 0, held: 0, sold: 2 });
    expect((await pay(held.json.reservationId, "payment.succeeded")).json.outcome).toBe("refund_required");
  });

  it("answers 401 SIGNATURE_INVALID without STRIPE_WEBHOOK_SECRET, whatever the event is signed with, and changes nothing", async () => {
    const sku = uniqueSku("stripe-nosecret");
    await createSku(sku, { totalStock: 2 });
    const held = (await reserve("yan", sku, 1)).json.reservationId as string;
    const payload = JSON.stringify(stripeEvent("checkout.session.completed", checkoutSession(held, 0)));
    const now = Math.floor(Date.now() / 1000);
    // Unset or empty, the secret is missing: even a signature with the usual secret does not pass.
    const header = await signPayment(payload, STRIPE_SECRET, now);
    for (const missing of [undefined, ""]) {
      const answer = await call("POST", "/webhooks/stripe", {
        raw: payload,
        headers: { "stripe-signature": header },
        env: { STRIPE_WEBHOOK_SECRET: missing } as unknown as Partial<Env>,
      });
      expect([answer.status, answer.json.error?.code]).toEqual([401, "SIGNATURE_INVALID"]);
    }
    expect(await stockOf(sku)).toEqual({ total: 2, available: 1, held: 1, sold: 0 });
    // The same event with the secret set is applied: the 401s above were for the missing secret.
    const applied = await call("POST", "/webhooks/stripe", { raw: payload, headers: { "stripe-signature": header } });
    expect([applied.status, applied.json.outcome]).toEqual([200, "applied"]);
  });
});
