// Rendering file contents: Markdown (sanitised), code (highlighted, per line, with matched
// line spans marked), images (downloaded bytes shown from a blob: URL), extracted text of
// documents, plain text. The vendored libraries load on first use only.
import { download, get } from "./api.js";
import { baseName, clear, errorBox, h, spinner } from "./dom.js";

// Relative to the bundle (console.js), which sits beside vendor/.
const markdownLib = () => import("./vendor/markdown.js");
const highlightLib = () => import("./vendor/highlight.js");

const IMAGE = new Set(["png", "jpg", "jpeg", "gif", "webp", "svg", "bmp", "ico", "avif"]);
const MARKDOWN = new Set(["md", "markdown", "mdx"]);
const DOCUMENT = new Set(["pdf", "docx", "doc", "pptx", "xlsx", "odt", "epub", "rtf"]);
// Syntax highlighting beyond this size costs more than it helps; such files show as text.
const HIGHLIGHT_MAX_CHARS = 300_000;
export const READ_LINES = 5000;

/**
 * Starts loading the libraries a view is about to need for `name` (Markdown for sidecars and
 * .md files, the highlighter for other files) while its data loads.
 */
export function preloadRenderers(name) {
  markdownLib().catch(() => null);
  const kind = fileKind(name);
  if (kind === "text" && /\.[A-Za-z0-9]+$/.test(name)) highlightLib().catch(() => null);
}

function extension(name) {
  const dot = name.lastIndexOf(".");
  return dot < 0 ? "" : name.slice(dot + 1).toLowerCase();
}

/** image | markdown | document | text (code is text with a language). */
export function fileKind(name) {
  const ext = extension(name);
  if (IMAGE.has(ext)) return "image";
  if (MARKDOWN.has(ext)) return "markdown";
  if (DOCUMENT.has(ext)) return "document";
  return "text";
}

/** Markdown into `el`, with fenced code highlighted. */
export async function renderMarkdownInto(el, text) {
  const { renderMarkdown, sanitizeFragment } = await markdownLib();
  el.classList.add("markdown");
  el.replaceChildren(renderMarkdown(text));
  const blocks = el.querySelectorAll("pre > code[class*='language-']");
  if (!blocks.length) return;
  const { highlight } = await highlightLib();
  for (const block of blocks) {
    const lang = [...block.classList].find((c) => c.startsWith("language-"))?.slice(9);
    try {
      block.replaceChildren(sanitizeFragment(highlight(block.textContent, lang)));
      block.classList.add("hljs");
    } catch {
      // an unknown language stays plain text
    }
  }
}

/**
 * Splits highlighted markup into one element per line, re-opening the spans a line break
 * cut through, so that each line can be numbered and marked on its own.
 */
function splitLines(fragment) {
  const lines = [];
  const path = [];
  let stack = [];
  const newLine = () => {
    const line = document.createElement("span");
    lines.push(line);
    stack = [line];
    for (const source of path) {
      const copy = source.cloneNode(false);
      stack[stack.length - 1].append(copy);
      stack.push(copy);
    }
  };
  const visit = (node) => {
    if (node.nodeType === Node.TEXT_NODE) {
      node.data.split("\n").forEach((part, i) => {
        if (i > 0) newLine();
        if (part) stack[stack.length - 1].append(part);
      });
    } else if (node.nodeType === Node.ELEMENT_NODE) {
      const copy = node.cloneNode(false);
      stack[stack.length - 1].append(copy);
      stack.push(copy);
      path.push(node);
      for (const child of [...node.childNodes]) visit(child);
      path.pop();
      stack.pop();
    }
  };
  newLine();
  for (const child of [...fragment.childNodes]) visit(child);
  return lines;
}

function plainLines(text) {
  return text.split("\n").map((line) => {
    const span = document.createElement("span");
    span.textContent = line;
    return span;
  });
}

/**
 * A numbered line view of `text`. `language` highlights it; `span` = [first, last] (1-based)
 * marks the lines a search matched and scrolls them into view.
 */
export async function codeView(text, { language = null, span = null, firstLine = 1 } = {}) {
  let lines = null;
  if (language && text.length <= HIGHLIGHT_MAX_CHARS) {
    try {
      const [{ highlight }, { sanitizeFragment }] = await Promise.all([highlightLib(),
        markdownLib()]);
      lines = splitLines(sanitizeFragment(highlight(text, language)));
    } catch {
      lines = null;
    }
  }
  if (!lines) lines = plainLines(text);
  if (lines.length > 1 && text.endsWith("\n")) lines.pop();
  const code = h("code", { class: language ? `hljs language-${language}` : "" });
  let firstHit = null;
  lines.forEach((content, i) => {
    const number = firstLine + i;
    const hit = span && number >= span[0] && number <= span[1];
    const row = h("span", { class: hit ? "line hit" : "line", dataset: { line: number } },
      h("span", { class: "ln", "aria-hidden": "true" }, String(number)),
      content);
    content.classList.add("src");
    if (hit && !firstHit) firstHit = row;
    code.append(row);
  });
  const view = h("div", { class: "code-view" });
  if (span) {
    view.append(h("p", { class: "hit-note" },
      `Lines ${span[0]}–${span[1]} matched the query (highlighted).`));
  }
  view.append(h("pre", { tabindex: "0", "aria-label": "File contents" }, code));
  if (firstHit) requestAnimationFrame(() => firstHit.scrollIntoView({ block: "center" }));
  return view;
}

/** `lines 12-20` inside a match_reason -> [12, 20]. */
export function matchedSpan(reason) {
  const m = /lines (\d+)-(\d+)/.exec(reason || "");
  return m ? [Number(m[1]), Number(m[2])] : null;
}

async function imageView(uri) {
  const blob = await download(uri);
  const url = URL.createObjectURL(blob);
  const img = h("img", { src: url, alt: `Image ${baseName(uri)}`, class: "preview" });
  img.addEventListener("load", () => URL.revokeObjectURL(url), { once: true });
  return img;
}

/** A button that downloads the file through the API (with the key) and saves it. */
export function downloadButton(uri) {
  return h("button", { type: "button", onclick: async (event) => {
    const button = event.currentTarget;
    button.disabled = true;
    try {
      const url = URL.createObjectURL(await download(uri));
      const a = h("a", { href: url, download: baseName(uri) });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } finally {
      button.disabled = false;
    }
  } }, "Download");
}

/**
 * Renders the file at `uri` into `container`. `span` marks matched lines (search results);
 * with a span, Markdown opens as source so the lines can be seen.
 */
export async function renderFile(container, uri, { span = null, raw = false } = {}) {
  const name = baseName(uri);
  const kind = fileKind(name);
  clear(container, spinner("Loading the file…"));
  try {
    if (kind === "image") {
      clear(container, await imageView(uri));
      return;
    }
    const text = await get("/api/v1/content/read", { uri, limit: READ_LINES, raw });
    const body = h("div", { class: "file-body" });
    const notes = [];
    if (text.split("\n").length >= READ_LINES) {
      notes.push(h("p", { class: "muted" }, `Showing the first ${READ_LINES} lines.`));
    }
    if (kind === "document") {
      notes.push(h("p", { class: "muted" }, "Extracted text of the document:"));
      body.append(await codeView(text, { span }));
    } else if (kind === "markdown" && !span) {
      await renderMarkdownInto(body, text);
    } else {
      const { languageFor } = await highlightLib();
      body.append(await codeView(text, { language: languageFor(name), span }));
    }
    clear(container, notes, body);
  } catch (error) {
    clear(container, errorBox(error, "The file could not be shown"), downloadButton(uri));
  }
}
