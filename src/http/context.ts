/** The Hono environment of every route: the Worker's bindings and what middleware learnt. */
export type AppEnv = {
  Bindings: Env;
  Variables: {
    /** The shopper, from the JWT's `sub` (set by `shopperAuth`). */
    userId: string;
    /** The shopper JWT's claims (early access tiers admit by one of them). */
    claims: Record<string, unknown>;
    /** This request's id (the caller's `X-Request-Id`, or a new one), on every log line it causes. */
    requestId: string;
  };
};
