/** The Hono environment of every route: the Worker's bindings and what middleware learnt. */
export type AppEnv = {
  Bindings: Env;
  Variables: {
    /** The shopper, from the JWT's `sub` (set by `shopperAuth`). */
    userId: string;
  };
};
