// Memories by type (preferences, entities, events, ...), each memory's text and its
// provenance: the session, archive and messages it was extracted from.
import { api } from "../api.js";
import { ready, session } from "../shell.js";
import {
  baseName, clear, errorBox, formatTime, h, routeHref, spinner,
} from "../dom.js";
import { preloadRenderers, renderFile } from "../render.js";
import { provenanceView } from "./provenance.js";

const PAGE = 200;

function memoriesRoot() {
  return `viking://user/${session.identity.user_id}/memories`;
}

async function ls(uri, extra = {}) {
  return api("GET", "/api/v1/fs/ls", { envelope: true, query: { uri, output: "agent",
    node_limit: PAGE, sort_by: "name", ...extra } });
}

function typeOf(uri) {
  const rest = uri.slice(memoriesRoot().length + 1);
  return rest.includes("/") ? rest.slice(0, rest.indexOf("/")) : "";
}

async function memoryList(type) {
  const uri = type ? `${memoriesRoot()}/${type}` : memoriesRoot();
  const body = await ls(uri, type ? { recursive: true } : {});
  const files = body.result.filter((e) => !e.isDir);
  if (!files.length) return h("p", { class: "muted" }, "No memories of this type yet.");
  return [
    h("ul", { class: "memory-list" }, files.map((e) => h("li", {},
      h("a", { href: routeHref("memories", { type, uri: e.uri }) }, e.rel_path || baseName(e.uri)),
      h("span", { class: "muted small" }, ` ${formatTime(e.modTime)}`),
      e.abstract ? h("p", { class: "abstract" }, e.abstract) : null))),
    body.has_more ? h("p", { class: "muted" }, `Showing the first ${PAGE}.`) : null,
  ];
}

async function memoryDetail(uri) {
  const text = h("section", { class: "card", "aria-label": "Memory" });
  const provenance = await provenanceView(uri);
  renderFile(text, uri);
  return [h("h3", {}, baseName(uri)),
    h("p", {}, h("a", { href: routeHref("browse", { uri }) }, uri)), text, provenance];
}

export async function render(main, params) {
  preloadRenderers("memory.md");
  const types = h("nav", { class: "list-pane", "aria-label": "Memory types" });
  const detail = h("section", { class: "detail" });
  clear(main, h("h1", { tabindex: "-1" }, "Memories"),
    h("div", { class: "split" }, types, detail));
  const typesLoaded = ls(memoriesRoot()).then((top) =>
    top.result.filter((e) => e.isDir).map((e) => baseName(e.uri)));

  let current = 0;
  const show = async (p) => {
    const token = ++current;
    const known = p.type ?? (p.uri ? typeOf(p.uri) : null);
    // with the type known, its memories load alongside the list of types
    const listing = known !== null ? memoryList(known).catch((e) => errorBox(e)) : null;
    const detailing = p.uri ? memoryDetail(p.uri).catch((e) => errorBox(e)) : null;
    const dirs = await typesLoaded;
    const type = known ?? (dirs[0] || "");
    clear(types, h("ul", { class: "plain" }, [...dirs, ""].map((d) => h("li", {},
      h("a", { href: routeHref("memories", { type: d }),
        "aria-current": d === type ? "page" : null }, d || "profile files")))));
    clear(detail, spinner());
    const body = [h("h2", {}, type || "profile files"),
      await (listing || memoryList(type).catch((e) => errorBox(e))), await detailing];
    if (token !== current) return;
    clear(detail, body);
    if (p.uri) detail.querySelector("h3")?.scrollIntoView({ block: "start" });
    ready("memories");
  };
  await show(params);
  return { update: show };
}
