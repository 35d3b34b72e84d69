// Search: one query run four ways side by side (find, semantic search, keyword search and
// context mode) with the same filters; each hit's score and match reason, the matched line
// span highlighted in the file, and the context block with its token budget use.
import { post } from "../api.js";
import { navigate, ready } from "../shell.js";
import {
  badge, clear, errorBox, field, formatScore, h, routeHref, spinner,
} from "../dom.js";
import { matchedSpan, renderFile } from "../render.js";

const MODES = [
  { id: "find", title: "Find (hybrid)", path: "/api/v1/search/find", extra: {} },
  { id: "semantic", title: "Search · semantic", path: "/api/v1/search/search",
    extra: { search_type: "semantic" } },
  { id: "keywords", title: "Search · keywords", path: "/api/v1/search/search",
    extra: { search_type: "keywords" } },
  { id: "context", title: "Context mode", path: "/api/v1/search/search",
    extra: { mode: "context" } },
];

function filters(p) {
  const body = {};
  if (p.type) body.context_type = p.type;
  if (p.levels) body.level = p.levels.split(",").map(Number);
  if (p.tags) body.tags = p.tags.split(",").map((t) => t.trim()).filter(Boolean);
  if (p.since) body.since = p.since;
  if (p.until) body.until = p.until;
  if ((p.since || p.until) && p.time_field) body.time_field = p.time_field;
  return body;
}

export function requestFor(mode, p) {
  const body = { query: p.q || "", ...filters(p), ...mode.extra };
  if (mode.id === "context") {
    body.max_tokens = Number(p.max_tokens || 1600);
  } else {
    body.limit = Number(p.limit || 10);
    if (p.scope) body.target_uri = p.scope;
  }
  return body;
}

function hitsOf(result) {
  return [...(result.memories || []), ...(result.resources || []), ...(result.skills || [])]
    .sort((a, b) => b.score - a.score);
}

function form(p) {
  const input = (name, attrs = {}) => h("input", { name, value: p[name] || "", ...attrs });
  const select = (name, options) => {
    const el = h("select", { name }, options.map(([value, label]) =>
      h("option", { value, selected: (p[name] || "") === value }, label)));
    return el;
  };
  const levels = (p.levels || "").split(",");
  const levelBoxes = h("fieldset", { class: "inline" }, h("legend", {}, "Level"),
    [["0", "L0 abstract"], ["1", "L1 overview"], ["2", "L2 file"]].map(([v, label]) => {
      const box = h("input", { type: "checkbox", name: "level", value: v,
        checked: levels.includes(v), id: `level-${v}` });
      return h("label", { for: box.id, class: "check" }, box, label);
    }));
  const query = input("q", { type: "search", required: false, placeholder: "What are you looking for?" });
  const f = h("form", { class: "card search-form", role: "search" },
    h("div", { class: "grid" },
      field("Query", query),
      field("Scope (target URI)", input("scope", { placeholder: "viking://resources/…" }),
        "Not used by context mode."),
      field("Context type", select("type", [["", "any"], ["resource", "resource"],
        ["memory", "memory"], ["skill", "skill"]])),
      field("Tags (k=v, comma separated)", input("tags")),
      field("Since", input("since", { placeholder: "7d or 2026-01-31" })),
      field("Until", input("until", { placeholder: "2h or 2026-02-01" })),
      field("Time field", select("time_field", [["", "updated_at"],
        ["created_at", "created_at"]])),
      field("Limit", input("limit", { type: "number", min: "1", max: "100",
        value: p.limit || "10" })),
      field("Context budget (max tokens)", input("max_tokens", { type: "number", min: "64",
        max: "32000", value: p.max_tokens || "1600" }))),
    levelBoxes,
    h("button", { type: "submit", class: "primary" }, "Search"));
  f.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(f);
    const next = {};
    for (const key of ["q", "scope", "type", "tags", "since", "until", "time_field", "limit",
      "max_tokens"]) {
      const value = String(data.get(key) || "").trim();
      if (value) next[key] = value;
    }
    const picked = data.getAll("level");
    if (picked.length) next.levels = picked.join(",");
    navigate("search", next);
  });
  return { form: f, query };
}

function hitItem(hit, onOpen) {
  const span = matchedSpan(hit.match_reason);
  const open = h("button", { type: "button", class: "link hit-uri" }, hit.uri);
  open.addEventListener("click", () => onOpen(hit.uri, span));
  return h("li", { class: "hit" },
    h("div", { class: "hit-head" }, h("span", { class: "score", title: "score" },
      formatScore(hit.score)), badge(`L${hit.level}`), badge(hit.context_type)),
    open,
    hit.match_reason ? h("div", { class: "reason" }, hit.match_reason) : null,
    hit.abstract ? h("p", { class: "abstract" }, hit.abstract) : null);
}

function contextResult(result) {
  const stats = result.stats || {};
  const used = stats.used_tokens ?? 0;
  const max = stats.max_tokens ?? 0;
  const meterId = `meter-${Math.random().toString(36).slice(2)}`;
  return [
    h("div", { class: "budget" },
      h("label", { for: meterId }, `${used} of ${max} tokens used`),
      h("meter", { id: meterId, min: "0", max: String(max || 1), value: String(used) })),
    h("p", { class: "muted" }, `${(result.entries || []).length} entries` +
      `${stats.candidates !== undefined ? ` from ${stats.candidates} candidates` : ""}`),
    h("ol", { class: "entries" }, (result.entries || []).map((e) => h("li", {},
      h("span", { class: "score" }, formatScore(e.score)), " ", badge(e.category || ""),
      " ", badge(e.detail || ""), " ", h("span", { class: "uri" }, e.uri)))),
    h("h4", {}, "Rendered block"),
    h("pre", { class: "rendered", tabindex: "0", "aria-label": "Rendered context block" },
      result.rendered || ""),
  ];
}

export async function render(main, params) {
  const { form: searchForm, query } = form(params);
  const columns = h("div", { class: "columns" });
  const preview = h("section", { class: "card preview", "aria-label": "Preview",
    hidden: true });
  clear(main, h("h1", { tabindex: "-1" }, "Search"), searchForm, columns, preview);

  const open = (uri, span) => {
    preview.hidden = false;
    const body = h("div");
    clear(preview, h("h2", {}, "Preview"),
      h("p", {}, h("a", { href: routeHref("browse", { uri,
        lines: span ? `${span[0]}-${span[1]}` : "" }) }, uri), " (open in Browse)"), body);
    renderFile(body, uri, { span });
    preview.scrollIntoView({ block: "start" });
  };

  let run = 0;
  const search = async (p) => {
    const token = ++run;
    query.value = p.q || "";
    if (!p.q) {
      clear(columns, h("p", { class: "muted" }, "Enter a query to compare the four modes."));
      ready("search");
      return;
    }
    const cells = MODES.map((mode) => {
      const body = h("div", { class: "col-body" }, spinner("Searching…"));
      const col = h("section", { class: "col card", "aria-label": mode.title,
        dataset: { mode: mode.id } }, h("h2", {}, mode.title), body);
      return { mode, col, body };
    });
    clear(columns, cells.map((c) => c.col));
    await Promise.all(cells.map(async ({ mode, body }) => {
      const started = performance.now();
      try {
        const result = await post(mode.path, requestFor(mode, p));
        if (token !== run) return;
        const ms = Math.round(performance.now() - started);
        if (mode.id === "context") {
          clear(body, h("p", { class: "muted" }, `${ms} ms`), contextResult(result));
        } else {
          const hits = hitsOf(result);
          clear(body, h("p", { class: "muted" }, `${hits.length} hits · ${ms} ms`),
            hits.length ? h("ol", { class: "hits" }, hits.map((hit) => hitItem(hit, open)))
              : h("p", {}, "No hits."));
        }
      } catch (error) {
        if (token === run) clear(body, errorBox(error));
      }
    }));
    if (token === run) ready("search");
  };
  await search(params);
  return { update: search };
}
