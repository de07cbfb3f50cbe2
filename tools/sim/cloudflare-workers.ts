/**
 * The simulator's stand-in for workerd's `cloudflare:workers` module (tools/sim/, docs/SIMULATOR.md):
 * only what the stock object takes from it, the `DurableObject` base class that keeps `ctx` and `env`.
 * vitest.unit.config.ts and tools/sim/resolve-hooks.mjs point the import here.
 */
export class DurableObject<E = unknown> {
  protected readonly ctx: DurableObjectState;
  protected readonly env: E;

  constructor(ctx: DurableObjectState, env: E) {
    this.ctx = ctx;
    this.env = env;
  }
}
