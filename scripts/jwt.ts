// Mints a shopper JWT for local use: `npm run jwt -- <userId> [ttlSeconds]`.
// Signed with AUTH_SECRET from the environment, else from .dev.vars (the local default).
import { readDevVars } from "../tools/dev-vars";
import { shopperJwt } from "../tools/jwt";

const [userId, ttlArg] = process.argv.slice(2);
if (!userId) {
  console.error("usage: npm run jwt -- <userId> [ttlSeconds]");
  process.exit(2);
}
const ttl = ttlArg === undefined ? 3600 : Number(ttlArg);
if (!Number.isInteger(ttl) || ttl <= 0) {
  console.error(`ttlSeconds must be a positive integer, got ${ttlArg}`);
  process.exit(2);
}
const secret = process.env.AUTH_SECRET ?? readDevVars().AUTH_SECRET;
if (!secret) {
  console.error("AUTH_SECRET is not set and .dev.vars has none");
  process.exit(2);
}
console.log(await shopperJwt(userId, secret, ttl));
