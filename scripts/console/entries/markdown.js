// Markdown to sanitised DOM. markdown-it runs with raw HTML disabled (tags in the text are
// escaped), and DOMPurify cleans the result again, so that a flaw in either one alone cannot
// inject markup. Results are DocumentFragments: the page never assigns an HTML string.
import MarkdownIt from "markdown-it";
import DOMPurify from "dompurify";

const md = new MarkdownIt({ html: false, linkify: true, typographer: false });

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("rel", "noopener noreferrer");
    node.setAttribute("target", "_blank");
  }
});

const OPTIONS = {
  RETURN_DOM_FRAGMENT: true,
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select"],
  FORBID_ATTR: ["style"],
};

/** Sanitised markup (for instance highlight.js output) as a DocumentFragment. */
export function sanitizeFragment(html) {
  return DOMPurify.sanitize(html, OPTIONS);
}

/** Markdown rendered with raw HTML disabled, then sanitised, as a DocumentFragment. */
export function renderMarkdown(text) {
  return sanitizeFragment(md.render(text));
}
