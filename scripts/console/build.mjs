// Builds the console's assets inside the skald package (`make console-assets`):
//   console/console.js   the console's own sources (console/src) bundled and minified
//   console/vendor/*     Markdown renderer, sanitiser, highlighter and zip from npm, each a
//                        minified ES module the bundle imports on first use
// The output is committed, so serving the console never needs npm or the network. The
// bundle's first line carries a hash of its sources; a unit test fails when they changed
// without a rebuild.
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const consoleDir = join(here, "../../layers/common/python/skald/console");
const src = join(consoleDir, "src");
const out = join(consoleDir, "vendor");
mkdirSync(out, { recursive: true });

/** sha256 over the sources' relative paths and bytes, in path order (as the test computes). */
function sourcesHash() {
  const files = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith(".js")) files.push(path);
    }
  };
  walk(src);
  const hash = createHash("sha256");
  for (const path of files.map((f) => relative(src, f)).sort()) {
    hash.update(`${path}\n`);
    hash.update(readFileSync(join(src, path)));
    hash.update("\n");
  }
  return hash.digest("hex");
}

// "./vendor/..." stays an import of the separate vendor module, next to the bundle.
const vendorExternal = {
  name: "vendor-external",
  setup(b) {
    b.onResolve({ filter: /^\.\/vendor\// }, (args) => ({ path: args.path, external: true }));
  },
};

await build({
  entryPoints: [join(src, "app.js")],
  outfile: join(consoleDir, "console.js"),
  bundle: true,
  format: "esm",
  minify: true,
  target: "es2020",
  legalComments: "none",
  banner: { js: `/* skald console; sources sha256 ${sourcesHash()} */` },
  plugins: [vendorExternal],
  logLevel: "warning",
});

await build({
  entryPoints: ["markdown", "highlight", "zip"].map((n) => join(here, "entries", `${n}.js`)),
  outdir: out,
  bundle: true,
  format: "esm",
  minify: true,
  target: "es2020",
  legalComments: "none",
  logLevel: "warning",
});
await build({
  entryPoints: [join(here, "node_modules/highlight.js/styles/github.css")],
  outfile: join(out, "highlight.css"),
  bundle: true,
  minify: true,
  legalComments: "none",
  logLevel: "warning",
});

// One notice file for everything bundled (each package's own LICENSE text).
const packages = ["markdown-it", "mdurl", "uc.micro", "linkify-it", "punycode.js", "entities",
  "dompurify", "highlight.js", "fflate"];
const notices = packages.map((name) => {
  const dir = join(here, "node_modules", name);
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const file = ["LICENSE", "LICENSE.md", "LICENSE.txt", "LICENSE-MIT", "LICENSE-MIT.txt"].find((f) => {
    try { readFileSync(join(dir, f)); return true; } catch { return false; }
  });
  const text = file ? readFileSync(join(dir, file), "utf8").trim() : `License: ${pkg.license}`;
  return `${name} ${pkg.version}\n${"-".repeat(name.length + pkg.version.length + 1)}\n${text}\n`;
});
writeFileSync(join(out, "LICENSES.txt"), notices.join("\n"));
