// Syntax highlighting: highlight.js core with the languages a knowledge base mostly holds.
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import c from "highlight.js/lib/languages/c";
import cpp from "highlight.js/lib/languages/cpp";
import csharp from "highlight.js/lib/languages/csharp";
import css from "highlight.js/lib/languages/css";
import diff from "highlight.js/lib/languages/diff";
import dockerfile from "highlight.js/lib/languages/dockerfile";
import go from "highlight.js/lib/languages/go";
import ini from "highlight.js/lib/languages/ini";
import java from "highlight.js/lib/languages/java";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import kotlin from "highlight.js/lib/languages/kotlin";
import makefile from "highlight.js/lib/languages/makefile";
import markdown from "highlight.js/lib/languages/markdown";
import php from "highlight.js/lib/languages/php";
import python from "highlight.js/lib/languages/python";
import ruby from "highlight.js/lib/languages/ruby";
import rust from "highlight.js/lib/languages/rust";
import scala from "highlight.js/lib/languages/scala";
import shell from "highlight.js/lib/languages/shell";
import sql from "highlight.js/lib/languages/sql";
import swift from "highlight.js/lib/languages/swift";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";

const LANGUAGES = { bash, c, cpp, csharp, css, diff, dockerfile, go, ini, java, javascript,
  json, kotlin, makefile, markdown, php, python, ruby, rust, scala, shell, sql, swift,
  typescript, xml, yaml };
for (const [name, lang] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, lang);

const BY_EXTENSION = {
  sh: "bash", bash: "bash", zsh: "bash", c: "c", h: "c", cc: "cpp", cpp: "cpp", hpp: "cpp",
  cs: "csharp", css: "css", diff: "diff", patch: "diff", go: "go", ini: "ini", toml: "ini",
  cfg: "ini", java: "java", js: "javascript", mjs: "javascript", cjs: "javascript",
  jsx: "javascript", json: "json", jsonl: "json", kt: "kotlin", mk: "makefile",
  md: "markdown", markdown: "markdown", php: "php", py: "python", pyi: "python", rb: "ruby",
  rs: "rust", scala: "scala", sql: "sql", swift: "swift", ts: "typescript", tsx: "typescript",
  html: "xml", htm: "xml", xml: "xml", svg: "xml", yaml: "yaml", yml: "yaml",
};
const BY_NAME = { dockerfile: "dockerfile", makefile: "makefile" };

/** The highlight.js language for a file name, or null for plain text. */
export function languageFor(name) {
  const lower = name.toLowerCase();
  if (BY_NAME[lower]) return BY_NAME[lower];
  const dot = lower.lastIndexOf(".");
  return dot < 0 ? null : BY_EXTENSION[lower.slice(dot + 1)] || null;
}

/** Highlighted HTML (escaped by highlight.js; the caller sanitises it before insertion). */
export function highlight(code, language) {
  return hljs.highlight(code, { language, ignoreIllegals: true }).value;
}
