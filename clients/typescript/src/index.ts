import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema";

/**
 * A thin typed client of the Flashgate HTTP API: openapi-fetch over the types openapi-typescript
 * generated from the gateway's /openapi.json (./schema.d.ts). Paths, parameters, bodies and answers
 * (errors included) are checked by the compiler against the contract:
 *
 *   const flashgate = createFlashgateClient({ baseUrl: "https://gateway.example", token: () => jwt });
 *   const { data, error } = await flashgate.GET("/api/skus/{sku}", { params: { path: { sku: "tee" } } });
 */

export type { components, paths };
/** The contract's named schemas: `Schemas["PublicSku"]`, `Schemas["Reservation"]`, `Schemas["ErrorBody"]`… */
export type Schemas = components["schemas"];
export type FlashgateClient = Client<paths>;

export interface FlashgateClientOptions {
  /** The gateway's base URL, e.g. https://gateway.example */
  baseUrl: string;
  /** The bearer token of each request (a shopper's JWT, or ADMIN_TOKEN for /admin/*), when there is one. */
  token?: () => string | null | undefined | Promise<string | null | undefined>;
  /** A fetch of your own (tests, a server runtime). */
  fetch?: (input: Request) => Promise<Response>;
}

export function createFlashgateClient(options: FlashgateClientOptions): FlashgateClient {
  const client = createClient<paths>({
    baseUrl: options.baseUrl,
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
  const token = options.token;
  if (token) {
    client.use({
      async onRequest({ request }) {
        const value = await token();
        if (value) request.headers.set("Authorization", `Bearer ${value}`);
        return request;
      },
    });
  }
  return client;
}
