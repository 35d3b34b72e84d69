// A commit's memory_diff.json as a reader wants it: what was added, what changed (a line diff
// of before and after), what was deleted, and what was skipped and why.
import { badge, h, routeHref } from "../dom.js";

/** Line diff by longest common subsequence: [{op: " "|"-"|"+", text}]. Inputs are small. */
export function lineDiff(before, after) {
  const split = (text) => (text ? text.replace(/\n+$/, "").split("\n") : []);
  const a = split(before);
  const b = split(after);
  const n = a.length;
  const m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push({ op: " ", text: a[i] }); i += 1; j += 1; }
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) { out.push({ op: "-", text: a[i] }); i += 1; }
    else { out.push({ op: "+", text: b[j] }); j += 1; }
  }
  while (i < n) { out.push({ op: "-", text: a[i] }); i += 1; }
  while (j < m) { out.push({ op: "+", text: b[j] }); j += 1; }
  return out;
}

function diffBlock(rows) {
  const cls = { " ": "same", "-": "del", "+": "add" };
  const label = { " ": "unchanged", "-": "removed", "+": "added" };
  return h("pre", { class: "diff", tabindex: "0" }, rows.map((r) =>
    h("span", { class: `diff-line ${cls[r.op]}`, title: label[r.op] },
      h("span", { class: "diff-op", "aria-label": label[r.op] }, r.op), r.text)));
}

function memoryLink(uri) {
  return h("a", { href: routeHref("memories", { uri }) }, uri);
}

function entryHead(entry, kind, kindClass) {
  return h("div", { class: "entry-head" }, badge(kind, kindClass), " ",
    entry.memory_type ? [badge(entry.memory_type), " "] : null,
    entry.uri ? memoryLink(entry.uri) : null);
}

export function memoryDiffView(diff) {
  const ops = diff.operations || {};
  const adds = ops.adds || [];
  const updates = ops.updates || [];
  const deletes = ops.deletes || [];
  const skipped = diff.skipped_operations || [];
  const section = (title, count, items) => h("section", { class: "diff-group",
    "aria-label": title }, h("h5", {}, `${title} (${count})`), count ? items : null);
  return h("div", { class: "memory-diff" },
    h("p", { class: "summary" },
      `${adds.length} added, ${updates.length} updated, ${deletes.length} deleted, ` +
      `${skipped.length} skipped`,
      diff.extracted_at ? ` · extracted ${diff.extracted_at}` : ""),
    section("Added", adds.length, h("ul", { class: "plain" }, adds.map((e) => h("li", {},
      entryHead(e, "added", "good"), diffBlock(lineDiff("", e.after || "")
        .filter((r) => r.op === "+")))))),
    section("Updated", updates.length, h("ul", { class: "plain" }, updates.map((e) =>
      h("li", {}, entryHead(e, "updated", "warn"),
        diffBlock(lineDiff(e.before || "", e.after || "")))))),
    section("Deleted", deletes.length, h("ul", { class: "plain" }, deletes.map((e) =>
      h("li", {}, entryHead(e, "deleted", "bad"),
        e.before ? diffBlock(lineDiff(e.before, "").filter((r) => r.op === "-")) : null)))),
    section("Skipped", skipped.length, h("table", { class: "table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Reason"),
        h("th", { scope: "col" }, "Detail"))),
      h("tbody", {}, skipped.map((s) => h("tr", {},
        h("td", {}, badge(s.reason || "unknown")),
        h("td", {}, typeof s.detail === "string" ? s.detail
          : JSON.stringify(s.detail ?? s))))))));
}
