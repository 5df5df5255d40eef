#!/usr/bin/env node
// bftrainer-highs: HiGHS compiled to WebAssembly (the npm package
// "highs", version pinned in package.json) behind the part of the native
// highs command line that bftrainer's HiGHS backend (../highs.go) uses, so
// the backend runs either program the same way:
//
//   bftrainer-highs --model_file M.mps [--options_file O]
//                   [--solution_file S] [--time_limit SECONDS]
//   bftrainer-highs --version
//
// It reads the MPS file, applies the options file (HiGHS' own
// "name = value" lines; thread options are dropped, as this build is
// single-threaded), then --time_limit, solves, and writes the solution
// file in HiGHS' raw style (write_solution_style = 0: "Model status",
// the status, "# Primal solution values", …), exactly as native highs
// writes it. HiGHS' log goes to standard output.
//
// Exit status: 0 when HiGHS ran, whatever it concluded (the solution file
// says: optimal, infeasible, time limit, …); 1 on an error; 2 on bad
// usage. Errors are one "bftrainer-highs: …" line on standard error.
//
// Install: npm ci --prefix <this directory> (needs node ≥ 18 and npm;
// Debian: apt install nodejs npm).

import { readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

const usage =
  "usage: bftrainer-highs --model_file M.mps [--options_file O] [--solution_file S] [--time_limit SECONDS]";

class UsageError extends Error {}

// parseArgs reads "--name value" and "--name=value" arguments.
function parseArgs(argv) {
  const known = new Set(["model_file", "options_file", "solution_file", "time_limit"]);
  const args = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--version") {
      args.version = true;
      continue;
    }
    const m = /^--([a-z_]+)(?:=(.*))?$/.exec(a);
    if (!m || !known.has(m[1])) throw new UsageError(`unknown argument ${JSON.stringify(a)}`);
    let v = m[2];
    if (v === undefined) {
      if (++i >= argv.length) throw new UsageError(`--${m[1]} needs a value`);
      v = argv[i];
    }
    args[m[1]] = v;
  }
  if (!args.version && !args.model_file) throw new UsageError("--model_file is required");
  if (args.time_limit !== undefined && !(Number(args.time_limit) > 0)) {
    throw new UsageError(`--time_limit ${JSON.stringify(args.time_limit)}: want seconds > 0`);
  }
  return args;
}

// loadHighs imports the package, saying how to install it when absent.
async function loadHighs() {
  let mod;
  try {
    mod = await import("highs");
  } catch (err) {
    if (err?.code === "ERR_MODULE_NOT_FOUND") {
      const dir = dirname(fileURLToPath(import.meta.url));
      throw new Error(`the highs package is not installed beside ${fileURLToPath(import.meta.url)}; run: npm ci --prefix ${dir}`);
    }
    throw err;
  }
  // HiGHS' log and messages are dropped unless print functions are given.
  return mod.default({ print: (s) => console.log(s), printErr: (s) => console.error(s) });
}

// options returns an options file's text without the thread options the
// single-threaded WebAssembly build rejects.
function options(path) {
  return readFileSync(path, "utf8")
    .split(/\r?\n/)
    .filter((l) => !/^\s*(threads|parallel)\b/.test(l))
    .join("\n");
}

async function main(argv) {
  const args = parseArgs(argv);
  const highs = await loadHighs();
  if (args.version) {
    console.log(`HiGHS version ${highs.version.string} (WebAssembly, npm highs)`);
    return 0;
  }
  const model = highs.createModel({ format: "mps", data: readFileSync(args.model_file) });
  try {
    if (args.options_file) model.options.read(options(args.options_file));
    if (args.time_limit !== undefined) model.options.set("time_limit", Number(args.time_limit));
    model.run();
    if (args.solution_file) writeFileSync(args.solution_file, model.exportSolution(false));
  } finally {
    model.dispose();
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    // One line: the package's own errors would print its minified source.
    console.error(`bftrainer-highs: ${err?.message ?? err}`);
    if (err instanceof UsageError) {
      console.error(usage);
      process.exit(2);
    }
    process.exit(1);
  },
);
