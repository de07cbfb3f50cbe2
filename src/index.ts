import { app } from "./app";

export { SkuStock } from "../durable-objects/sku-stock";

export default {
  fetch: app.fetch,
} satisfies ExportedHandler<Env>;
