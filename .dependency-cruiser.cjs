// The import rules of the product code, checked by `npm run check` (dependency-cruiser).
// docs/ARCHITECTURE.md draws the layers these rules keep apart.
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
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
      name: "edge-through-barrels",
      comment:
        "src/ reaches durable-objects/ through stock-model.ts (the model's types, rules), support.ts (log, runner, hash) or objects.ts (the Worker-only classes).",
      severity: "error",
      from: { path: "^src/" },
      to: { path: "^durable-objects/", pathNot: "^durable-objects/(stock-model|support|objects)\\.ts$" },
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
