/** The Hono environment of every route: the Worker's bindings and what middleware learnt. */
export type AppEnv = {
  Bindings: Env;
  Variables: {
    /** The shopper, from the JWT's `sub` (set by `shopperAuth`). */
    userId: string;
    /** This request's id (the caller's `X-Request-Id`, or a new one), on every log line it causes. */
    requestId: string;
  };
};
