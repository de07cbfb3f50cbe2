// The import rules of the product code, checked by `npm run check` (dependency-cruiser).
// docs/ARCHITECTURE.md draws the layers these rules keep apart.

// src/'s own layers, top to bottom: a folder imports only from folders below it (or its own layer).
const SRC_LAYERS = [
  ["index", "app", "harness"],
  ["routes"],
  ["reconcile", "payments"],
  ["orders"],
  ["handoff"],
  ["mirror"],
  ["catalog"],
  ["sale-log"],
  ["edge"],
  ["stock"],
  ["http"],
  ["db", "observability"],
];
const srcPath = (names) => `^src/(${names.join("|")})(/|\\.ts$)`;
const layerRules = SRC_LAYERS.slice(1).map((layer, i) => ({
  name: `src-layer-${layer.join("-")}`,
  comment: `src/${layer.join(", src/")} sits below ${SRC_LAYERS.slice(0, i + 1)
    .flat()
    .join(", ")}: it never imports them (docs/ARCHITECTURE.md, "Where things live").`,
  severity: "error",
  from: { path: srcPath(layer) },
  to: { path: srcPath(SRC_LAYERS.slice(0, i + 1).flat()) },
}));

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...layerRules,
    {
      name: "no-cycle",
      comment: "A cycle makes two parts one: neither can be read, tested or changed alone.",
      severity: "error",
      from: { path: "^(src|durable-objects)/" },
      to: { circular: true },
    },
    {
      name: "objects-below-edge",
      comment: "durable-objects/ imports nothing from src/: the edge depends on the stock model, never the other way.",
      severity: "error",
      from: { path: "^durable-objects/" },
      to: { path: "^src/" },
    },
    {
      name: "edge-through-the-model",
      comment:
        "src/ reaches durable-objects/ only through shared/ (log, hash, runner, event format, shard names), stock/stock-model.ts (the model's types and faces), the mirror client, and the classes the Worker exports.",
      severity: "error",
      from: { path: "^src/" },
      to: {
        path: "^durable-objects/",
        pathNot:
          "^durable-objects/(shared/[^/]+|stock/stock-model|stock/sku-stock|log/sale-log|mirror/redis-mirror|metrics/metrics-totals)\\.ts$",
      },
    },
    {
      name: "engine-is-pure",
      comment:
        "The engine is synchronous over its storage: it uses only itself and shared/, never the object around it.",
      severity: "error",
      from: { path: "^durable-objects/engine/" },
      to: { path: "^durable-objects/", pathNot: "^durable-objects/(engine|shared)/" },
    },
    {
      name: "shared-stands-alone",
      comment: "What the Worker and the objects share depends on neither of them.",
      severity: "error",
      from: { path: "^durable-objects/shared/" },
      to: { path: "^durable-objects/", pathNot: "^durable-objects/shared/" },
    },
    {
      name: "callers-use-faces",
      comment:
        "No part of the product but the Worker's entry holds the stock object's class: callers hold a face (stock/stock-faces.ts).",
      severity: "error",
      from: { path: "^(src|durable-objects)/", pathNot: "^(src/index|src/harness/.*)\\.ts$" },
      to: { path: "^durable-objects/stock/sku-stock\\.ts$" },
    },
    {
      name: "product-not-on-tools",
      comment: "What is deployed never imports the tests, the bench, the tools or the scripts.",
      severity: "error",
      from: { path: "^(src|durable-objects)/" },
      to: { path: "^(test|bench|tools|scripts)/" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(node_modules|worker-configuration\\.d\\.ts)" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default"] },
  },
};
