import type { Context } from "hono";
import { Hono } from "hono";
import type { AppEnv } from "../http/context";
import { ApiError } from "../http/errors";

/**
 * The static pages of public/ (the demo storefront at `/`, the operator dashboard at
 * `/dashboard`, their scripts and styles under `/static/`), served through the ASSETS binding.
 * wrangler.toml runs the Worker first for every request, so only the paths routed here can
 * reach an asset: `/api/...` and unknown paths keep the contract's JSON 404 and 405 answers.
 */
export const pages = new Hono<AppEnv>();

/** The pages load their own script and style and talk only to this origin. */
const PAGE_HEADERS: Record<string, string> = {
  "Content-Security-Policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "Referrer-Policy": "no-referrer",
  "X-Content-Type-Options": "nosniff",
};

async function asset(c: Context<AppEnv>): Promise<Response> {
  const response = await c.env.ASSETS.fetch(c.req.raw);
  if (response.status === 404) throw new ApiError("NOT_FOUND");
  const headers = new Headers(response.headers);
  for (const [name, value] of Object.entries(PAGE_HEADERS)) headers.set(name, value);
  return new Response(response.body, { status: response.status, headers });
}

pages.get("/", asset);
pages.get("/dashboard", asset);
pages.get("/static/:file{[a-z0-9-]+\\.(?:js|css|svg)}", asset);
