import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { methodNotAllowed } from "hono/method-not-allowed";
import { requestId } from "hono/request-id";
import type { AppEnv } from "./http/context";
import { ApiError, errorBody, errorResponse } from "./http/errors";
import { observe } from "./http/observe";
import { admin } from "./routes/admin";
import { metrics } from "./routes/metrics";
import { openapi } from "./routes/openapi";
import { ops } from "./routes/ops";
import { pages } from "./routes/pages";
import { shopper } from "./routes/shopper";
import { webhooks } from "./routes/webhooks";

/** Bodies over 16 KiB are refused before anything reads them (API.md). */
const MAX_BODY_BYTES = 16 * 1024;

/**
 * The Worker's routes. `mount` adds routes before the fallbacks: the harness entry
 * (src/harness/index.ts) mounts the dev, bench and chaos routes that way; production mounts none,
 * so they are not in the bundle `wrangler deploy` builds from src/index.ts.
 */
export function buildApp(mount?: (app: Hono<AppEnv>) => void): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.use(requestId({ limitLength: 128 }), observe);
  app.use(
    methodNotAllowed({
      app,
      onMethodNotAllowed: (c, allowed) => c.json(errorBody("METHOD_NOT_ALLOWED"), 405, { Allow: allowed.join(", ") }),
    }),
  );
  app.use(
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: () => {
        throw new ApiError("PAYLOAD_TOO_LARGE");
      },
    }),
  );

  app.route("/", ops);
  app.route("/", metrics);
  app.route("/", shopper);
  app.route("/", admin);
  app.route("/", webhooks);
  app.route("/", openapi);
  app.route("/", pages);
  mount?.(app);

  // A plain 404 answer (not a thrown error), so that methodNotAllowed can turn it into a 405.
  app.notFound((c) => c.json(errorBody("NOT_FOUND"), 404));
  app.onError(errorResponse);
  return app;
}

/** The production app: the contract's routes and nothing else. */
export const app = buildApp();
