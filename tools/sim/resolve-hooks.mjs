import { readFileSync } from "node:fs";

// Node module hooks for `npm run sim` (registered by scripts/sim.ts): the stock object's workerd-only
// import and its id source point at the simulator's stand-ins, and `*.lua` loads as text (wrangler.toml's rule), as vitest.unit.config.ts does for the unit tier.
const here = new URL("./", import.meta.url);

export async function resolve(specifier, context, next) {
  // Handed on as file URLs, so tsx's own hook (next) loads the TypeScript.
  if (specifier === "cloudflare:workers") return next(new URL("cloudflare-workers.ts", here).href, context);
  if (specifier === "uuid" && context.parentURL?.endsWith("/durable-objects/stock/sku-stock.ts"))
    return next(new URL("uuid.ts", here).href, context);
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!url.endsWith(".lua")) return next(url, context);
  const text = readFileSync(new URL(url), "utf8");
  return { format: "module", source: `export default ${JSON.stringify(text)};`, shortCircuit: true };
}
