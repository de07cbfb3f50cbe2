// Writes src/schema.d.ts, the types of the Flashgate API, from the contract's OpenAPI document:
//   tsx scripts/generate.ts                  from the document the gateway serves (built here by the
//                                            same function GET /openapi.json answers with)
//   tsx scripts/generate.ts --from <url>     from a running gateway's /openapi.json
//   tsx scripts/generate.ts --check          writes nothing; exits 1 when the committed file differs
import { readFileSync, writeFileSync } from "node:fs";
import { buildOpenApiDocument } from "../../../src/routes/openapi";
import { SCHEMA_FILE, schemaText } from "./schema-text";

const args = process.argv.slice(2);
const from = args.includes("--from") ? args[args.indexOf("--from") + 1] : undefined;
const document = from
  ? ((await (await fetch(from)).json()) as object)
  : buildOpenApiDocument("https://gateway.example");
const text = await schemaText(document);

if (args.includes("--check")) {
  const committed = readFileSync(SCHEMA_FILE, "utf8");
  if (committed !== text) {
    const lines = committed.split("\n");
    const line = text.split("\n").findIndex((l, i) => l !== lines[i]);
    console.error(
      `clients/typescript/src/schema.d.ts is not what the contract gives now (first difference at line ${line + 1}): ` +
        "run `npm run generate --workspace clients/typescript`.",
    );
    process.exit(1);
  }
  console.log("clients/typescript/src/schema.d.ts matches the contract.");
} else {
  writeFileSync(SCHEMA_FILE, text);
  console.log(`wrote ${SCHEMA_FILE}`);
}
