/**
 * `npx tsx scripts/log-key.ts [name]`: a new Ed25519 key for the sale log (API.md v1.4 "The
 * verifiable sale"), in signed-note form. The first line is the secret `LOG_SIGNING_KEY`
 * (`npx wrangler secret put LOG_SIGNING_KEY`, or .dev.vars locally); the second the verifier key that
 * `GET /api/log/key` serves and buyers check checkpoints with. `name`: the key's name, e.g. the
 * gateway's host (default `flashgate-dev`).
 */
import { generateKey } from "../durable-objects/shared/signed-note";

const name = process.argv[2] ?? "flashgate-dev";
const { signer, verifier } = await generateKey(name);
console.log(`LOG_SIGNING_KEY=${signer}`);
console.log(`# verifier key: ${verifier}`);
