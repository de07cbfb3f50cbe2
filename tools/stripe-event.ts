/**
 * A Stripe event envelope (`{"id":"evt_…","object":"event",…,"data":{"object":…}}`) around `object`,
 * shaped like the ones Stripe sends: the tests' and chaos's Stripe stand-ins both build on it.
 */
export function stripeEnvelope(id: string, type: string, object: Record<string, unknown>): Record<string, unknown> {
  return {
    id,
    object: "event",
    api_version: "2025-06-30.basil",
    created: Math.floor(Date.now() / 1000),
    data: { object },
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
  };
}
