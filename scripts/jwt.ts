// Mints a shopper JWT for local use: `npm run jwt -- <userId> [ttlSeconds] [claim=value ...]`.
// Signed with AUTH_SECRET from the environment, else from .dev.vars (the local default). Extra
// `name=value` claims are what an early access tier admits by (`tier=gold`).
import { readDevVars } from "../tools/dev-vars";
import { signHs256 } from "../tools/jwt";

const [userId, ...rest] = process.argv.slice(2);
if (!userId) {
  console.error("usage: npm run jwt -- <userId> [ttlSeconds] [claim=value ...]");
  process.exit(2);
}
const ttlArg = rest[0] !== undefined && !rest[0].includes("=") ? rest.shift() : undefined;
const ttl = ttlArg === undefined ? 3600 : Number(ttlArg);
if (!Number.isInteger(ttl) || ttl <= 0) {
  console.error(`ttlSeconds must be a positive integer, got ${ttlArg}`);
  process.exit(2);
}
const claims: Record<string, string> = {};
for (const pair of rest) {
  const at = pair.indexOf("=");
  if (at <= 0) {
    console.error(`a claim is name=value, got ${pair}`);
    process.exit(2);
  }
  claims[pair.slice(0, at)] = pair.slice(at + 1);
}
const secret = process.env.AUTH_SECRET ?? readDevVars().AUTH_SECRET;
if (!secret) {
  console.error("AUTH_SECRET is not set and .dev.vars has none");
  process.exit(2);
}
const now = Math.floor(Date.now() / 1000);
// The registered claims last: a `sub=` or `exp=` pair cannot replace them.
console.log(await signHs256({ ...claims, sub: userId, iat: now, exp: now + ttl }, secret));
