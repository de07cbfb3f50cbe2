// Type-checks several TypeScript projects in one process: what `tsc -p <config>` (with the config's
// noEmit) would report for each, one after another, every project checked even when an earlier one
// fails. Exits 1 when any reports an error.
//   node --import tsx scripts/check-tsc.ts tsconfig.json public/tsconfig.storefront.json ...
// One process instead of one `tsc` each saves the start-up (node, loading the compiler) and, like
// `tsc -b`, parses and binds a file the projects share (the standard library's declarations, most of
// all lib.dom.d.ts for the four page projects) once: files are shared only between programs that
// would parse them alike (same language version, module format and module detection). Unlike
// `tsc -b`, it writes no .tsbuildinfo and keeps nothing between runs: every run checks everything.
import { createRequire } from "node:module";
import type * as TS from "typescript";

// Required, not imported: through tsx's import hooks the compiler's 9 MB of JavaScript loads, and then
// runs, about a second slower (run this file with `node --import tsx/esm`, whose hooks leave require
// alone). tsx also turns source maps on, which only slows the compiler down: off.
process.setSourceMapsEnabled(false);
const ts: typeof TS = createRequire(import.meta.url)("typescript");

const configs = process.argv.slice(2);
if (configs.length === 0) {
  console.error("usage: check-tsc.ts <tsconfig.json>...");
  process.exit(2);
}

const formatHost: TS.FormatDiagnosticsHost = {
  getCanonicalFileName: (f) => (ts.sys.useCaseSensitiveFileNames ? f : f.toLowerCase()),
  getCurrentDirectory: ts.sys.getCurrentDirectory,
  getNewLine: () => ts.sys.newLine,
};
const pretty = Boolean(process.stdout.isTTY);
const print = (diagnostics: readonly TS.Diagnostic[]) => {
  if (diagnostics.length === 0) return;
  process.stdout.write(
    pretty
      ? ts.formatDiagnosticsWithColorAndContext(diagnostics, formatHost) + ts.sys.newLine
      : ts.formatDiagnostics(diagnostics, formatHost),
  );
};

const shared = new Map<string, TS.SourceFile>();
let failed = 0;
for (const config of configs) {
  let unrecoverable: TS.Diagnostic | undefined;
  const parsed = ts.getParsedCommandLineOfConfigFile(config, undefined, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      unrecoverable = d;
    },
  });
  if (!parsed || unrecoverable) {
    if (unrecoverable) print([unrecoverable]);
    console.error(`${config}: cannot read the project`);
    failed++;
    continue;
  }
  const options = parsed.options;
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile;
  // What decides how a file parses besides its name: the options object the program passes carries
  // the language version, module format and JSDoc mode; whether a file without imports counts as a
  // module (setExternalModuleIndicator) follows from these compiler options.
  const scope = JSON.stringify([options.module, options.moduleDetection, options.jsx, options.moduleResolution]);
  host.getSourceFile = (fileName, languageVersionOrOptions, onError, shouldCreate) => {
    const v = languageVersionOrOptions;
    const key =
      typeof v === "object"
        ? JSON.stringify([fileName, v.languageVersion, v.impliedNodeFormat, v.jsDocParsingMode, scope])
        : JSON.stringify([fileName, v, scope]);
    const cached = shared.get(key);
    if (cached) return cached;
    const file = getSourceFile.call(host, fileName, languageVersionOrOptions, onError, shouldCreate);
    if (file) shared.set(key, file);
    return file;
  };
  const program = ts.createProgram({
    rootNames: parsed.fileNames,
    options,
    host,
    configFileParsingDiagnostics: ts.getConfigFileParsingDiagnostics(parsed),
    ...(parsed.projectReferences ? { projectReferences: parsed.projectReferences } : {}),
  });
  const diagnostics = ts.getPreEmitDiagnostics(program);
  print(diagnostics);
  const errors = diagnostics.filter((d) => d.category === ts.DiagnosticCategory.Error).length;
  if (errors > 0) {
    console.error(`${config}: ${errors} error${errors === 1 ? "" : "s"}`);
    failed++;
  }
}
if (failed > 0) process.exit(1);
