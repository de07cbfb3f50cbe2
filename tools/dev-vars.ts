import { copyFileSync, existsSync, readFileSync } from "node:fs";

/** The secrets of .dev.vars.example, which tools that start their own Worker pass to it as vars. */
export const SECRETS = {
  AUTH_SECRET: "dev-auth-secret",
  TOKEN_SECRET: "dev-token-secret",
  ADMIN_TOKEN: "dev-admin-token",
  // The sale log's Ed25519 key (API.md v1.4 "The verifiable sale"): local runs keep every SKU's log.
  LOG_SIGNING_KEY: "PRIVATE+KEY+flashgate-dev+8238a725+ATkDZ4MQgpm0Szd0XgDTaes4dGSXhguzpOHRmnqbEwtl",
} as const;

/** Local secrets live in .dev.vars (git-ignored), created from .dev.vars.example when missing. */
export function ensureDevVars(): boolean {
  if (existsSync(".dev.vars")) return false;
  copyFileSync(".dev.vars.example", ".dev.vars");
  return true;
}

/** Reads .dev.vars (or the example when there is none yet) as a name → value map. */
export function readDevVars(): Record<string, string> {
  const file = existsSync(".dev.vars") ? ".dev.vars" : ".dev.vars.example";
  const vars: Record<string, string> = {};
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const match = /^\s*([A-Z0-9_]+)\s*=\s*(.*?)\s*$/.exec(line);
    if (match?.[1] && match[2] !== undefined) vars[match[1]] = match[2].replace(/^"(.*)"$/, "$1");
  }
  return vars;
}
