import { Hono } from "hono";
import { TrieRouter } from "hono/router/trie-router";
import type { AppEnv } from "./http/context";
import { errorBody, errorResponse } from "./http/errors";
import { observe } from "./http/observe";
import { admin } from "./routes/admin";
import { checkoutRoutes } from "./routes/checkout";
import { operatorPages } from "./routes/dashboard";
import { embed } from "./routes/embed";
import { handoff } from "./routes/handoff";
import { metrics } from "./routes/metrics";
import { openapi } from "./routes/openapi";
import { ops } from "./routes/ops";
import { paymentWebhooks } from "./routes/payment-webhooks";
import { paymentsAdmin } from "./routes/payments-admin";
import { saleLogRoutes } from "./routes/sale-log";
import { shopper } from "./routes/shopper";

/**
 * The methods each path of `app` answers (GET implies HEAD), looked up by request path. Built on
 * the first miss, once every route is registered; only requests no route matched pay for it.
 */
function allowedMethods(app: Hono<AppEnv>): (path: string) => string[] {
  let router: TrieRouter<string[]> | undefined;
  return (path) => {
    if (!router) {
      const byPath = new Map<string, Set<string>>();
      for (const route of app.routes) {
        if (route.method === "ALL") continue; // middleware
        const methods = byPath.get(route.path) ?? new Set<string>();
        methods.add(route.method);
        if (route.method === "GET") methods.add("HEAD");
        byPath.set(route.path, methods);
      }
      router = new TrieRouter();
      for (const [routePath, methods] of byPath) router.add("ALL", routePath, [...methods]);
    }
    const methods = new Set<string>();
    for (const [found] of router.match("ALL", path)[0]) for (const method of found) methods.add(method);
    return [...methods];
  };
}

/**
 * The Worker's routes: the contract's, then `pages`, then whatever `mount` adds before the
 * fallbacks. Production passes the operator dashboard and mounts nothing; the harness entry
 * (src/harness/index.ts) passes the demo storefront beside the dashboard and mounts the dev, bench
 * and chaos routes, so none of those is in the bundle `wrangler deploy` builds from src/index.ts.
 */
export function buildApp(pages: Hono<AppEnv>, mount?: (app: Hono<AppEnv>) => void): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  // One middleware for every request; the rest is per route (admission and the body limit, in
  // register.ts), so a request passes only the layers its route needs. It also answers CORS: browser
  // pages of the shop's own origins (ALLOWED_ORIGINS) may call the shopper routes.
  app.use(observe);

  app.route("/", ops);
  app.route("/", metrics);
  app.route("/", shopper);
  app.route("/", checkoutRoutes);
  app.route("/", saleLogRoutes);
  app.route("/", admin);
  app.route("/", handoff);
  app.route("/", paymentsAdmin);
  app.route("/", paymentWebhooks);
  app.route("/", openapi);
  // The embeddable buy button (public, any origin may import it).
  app.route("/", embed);
  app.route("/", pages);
  mount?.(app);

  // No route matched: 405 with `Allow` when the path has routes for other methods, else 404.
  const allowed = allowedMethods(app);
  app.notFound((c) => {
    const methods = allowed(c.req.path);
    if (methods.length === 0) return c.json(errorBody("NOT_FOUND"), 404);
    return c.json(errorBody("METHOD_NOT_ALLOWED"), 405, { Allow: methods.join(", ") });
  });
  app.onError(errorResponse);
  return app;
}

/** The production app: the contract's routes and the operator dashboard, nothing else. */
export const app = buildApp(operatorPages);
