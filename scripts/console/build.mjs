// Builds the console's vendored libraries into minified ES modules inside the skald package:
//   node build.mjs   (or `make console-assets` from the repository root)
// The output is committed, so serving the console never needs npm or the network.
import { build } from "esbuild";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "../../layers/common/python/skald/console/vendor");
mkdirSync(out, { recursive: true });

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
