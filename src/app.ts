import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { methodNotAllowed } from "hono/method-not-allowed";
import { requestId } from "hono/request-id";
import type { AppEnv } from "./http/context";
import { ApiError, errorBody, errorResponse } from "./http/errors";
import { observe } from "./http/observe";
import { admin } from "./routes/admin";
import { bench } from "./routes/bench";
import { chaos } from "./routes/chaos";
import { type Dispatch, devRoutes } from "./routes/dev";
import { metrics } from "./routes/metrics";
import { openapi } from "./routes/openapi";
import { ops } from "./routes/ops";
import { pages } from "./routes/pages";
import { shopper } from "./routes/shopper";
import { webhooks } from "./routes/webhooks";

/** Bodies over 16 KiB are refused before anything reads them (API.md). */
const MAX_BODY_BYTES = 16 * 1024;

export const app = new Hono<AppEnv>();

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
app.route("/", chaos); // chaos harness only: 404 unless the var CHAOS is "true" (scripts/chaos/)
// Dev-only helpers of the demo storefront: 404 unless the var DEV_TOOLS is "true" (.dev.vars only).
// The simulated payment goes through this app, so the real webhook route and middleware answer it.
const dispatch: Dispatch = (request, env, ctx) => app.fetch(request, env, ctx);
app.route("/", devRoutes(dispatch));
app.route("/", bench); // bench-only (npm run bench): 404 unless DEV_TOOLS is "true"

// A plain 404 answer (not a thrown error), so that methodNotAllowed can turn it into a 405.
app.notFound((c) => c.json(errorBody("NOT_FOUND"), 404));
app.onError(errorResponse);
