import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import harness from "../../src/harness/index";
import production from "../../src/index";

/**
 * Which pages each entry serves (API.md "Operations": a page that needs the development helpers is
 * never reachable in a deployed Worker). Production: the operator dashboard, with `/` sending there.
 * The harness: the demo storefront at `/` as well, with its Turnstile site key filled in.
 */

type Worker = typeof production;

async function get(worker: Worker, path: string, init: RequestInit = {}, vars: Record<string, string> = {}) {
  const ctx = createExecutionContext();
  const response = await worker.fetch(
    new Request(`http://flashgate.test${path}`, init),
    { ...env, ...vars } as Env,
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return { status: response.status, headers: response.headers, body: await response.text() };
}

describe("the production Worker's pages", () => {
  it("sends `/` to the operator dashboard", async () => {
    for (const method of ["GET", "HEAD"]) {
      const answer = await get(production, "/?sku=tee", { method, redirect: "manual" });
      expect(answer.status, method).toBe(302);
      expect(answer.headers.get("location")).toBe("/dashboard");
    }
  });

  it("serves the dashboard, its script and the stylesheet, revalidated by ETag", async () => {
    const dashboard = await get(production, "/dashboard");
    expect(dashboard.status).toBe(200);
    expect(dashboard.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(dashboard.body).toContain("<title>Flashgate · operator dashboard</title>");
    expect(dashboard.headers.get("content-security-policy")).toContain("default-src 'none'");
    // No link to a storefront this Worker does not have.
    expect(dashboard.body).not.toContain('href="/"');
    const etag = dashboard.headers.get("etag") ?? "";
    expect((await get(production, "/dashboard", { headers: { "if-none-match": etag } })).status).toBe(304);
    for (const path of ["/static/dashboard.js", "/static/dashboard-console.js", "/static/style.css"]) {
      expect((await get(production, path)).status, path).toBe(200);
      expect(dashboard.body, `the page loads ${path}`).toContain(`"${path}"`);
    }
    // The console's script is served as the text of public/ (wrangler.toml `rules`), not bundled as Worker code.
    expect((await get(production, "/static/dashboard-console.js")).body).toContain(
      "dashboardConsole = { renderSkuActions",
    );
  });

  it("serves the buy button, its solver and its receipt checker to any origin (API.md v1.4), revalidated by ETag", async () => {
    for (const path of ["/embed/flashgate.js", "/embed/pow-worker.js", "/embed/receipt-check.js"]) {
      const answer = await get(production, path, { headers: { origin: "https://shop.example" } });
      expect(answer.status, path).toBe(200);
      expect(answer.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
      expect(answer.headers.get("access-control-allow-origin")).toBe("*");
      const etag = answer.headers.get("etag") ?? "";
      expect((await get(production, path, { headers: { "if-none-match": etag } })).status).toBe(304);
    }
    // The element's module as text (wrangler.toml `rules`), not bundled as Worker code.
    const element = await get(production, "/embed/flashgate.js");
    expect(element.body).toContain('customElements.define("flashgate-buy", FlashgateBuy)');
  });

  it("has no demo storefront, its script or its solver, whatever the site key", async () => {
    for (const path of ["/static/storefront.js", "/static/pow-worker.js", "/static/receipt-check.js", "/index.html"]) {
      const answer = await get(production, path, {}, { TURNSTILE_SITE_KEY: "1x00000000000000000000AA" });
      expect(answer.status, path).toBe(404);
      expect(JSON.parse(answer.body)).toMatchObject({ error: { code: "NOT_FOUND" } });
    }
  });
});

describe("the harness entry's pages", () => {
  it("serves the demo storefront at `/` with the Turnstile site key, and its scripts", async () => {
    const plain = await get(harness, "/");
    expect(plain.status).toBe(200);
    expect(plain.body).toContain("<title>Flashgate · demo storefront</title>");
    expect(plain.body).toContain('data-turnstile-site-key=""');
    expect(plain.headers.get("content-security-policy")).not.toContain("challenges.cloudflare.com");

    const withKey = await get(harness, "/", {}, { TURNSTILE_SITE_KEY: 'key"<x>' });
    expect(withKey.body).toContain('data-turnstile-site-key="key&#34;&#60;x&#62;"');
    expect(withKey.headers.get("content-security-policy")).toContain("frame-src https://challenges.cloudflare.com");
    expect(withKey.headers.get("etag")).not.toBe(plain.headers.get("etag"));

    for (const path of [
      "/static/storefront.js",
      "/static/pow-worker.js",
      "/static/receipt-check.js",
      "/static/style.css",
    ]) {
      const answer = await get(harness, path);
      expect(answer.status, path).toBe(200);
      expect(answer.headers.get("content-type"), path).toMatch(/^text\/(javascript|css); charset=utf-8$/);
    }
  });

  it("serves the dashboard with a link to the storefront", async () => {
    const dashboard = await get(harness, "/dashboard");
    expect(dashboard.status).toBe(200);
    expect(dashboard.body).toContain('<a href="/">Storefront</a>');
  });
});
