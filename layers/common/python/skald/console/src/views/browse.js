// Browse: the viking:// tree (children load on expansion, a page at a time), and beside it
// the selected directory's L0 abstract and L1 overview or the selected file rendered, with
// stat, tags and the processing state of work still pending on it.
import { api, get } from "../api.js";
import { ready, session } from "../shell.js";
import {
  badge, baseName, clear, errorBox, facts, formatBytes, formatTime, h, parentUri, routeHref,
  spinner,
} from "../dom.js";
import {
  downloadButton, matchedSpan, preloadRenderers, renderFile, renderMarkdownInto,
} from "../render.js";
import { provenanceView } from "./provenance.js";

const PAGE = 200;
const NOT_READY = /\[Directory (abstract|overview) is not ready\]\s*$/;

export function rootsFor(identity) {
  return ["viking://resources", `viking://user/${identity.user_id}`, "viking://agent"];
}

/** Tasks still pending or running, which mark the files and directories they work on. */
export async function pendingWork() {
  const lists = await Promise.all(["pending", "running"].map((status) =>
    get("/api/v1/tasks", { status, limit: 200 }).catch(() => [])));
  return lists.flat().filter((t) => t.resource_id);
}

function workOn(tasks, uri) {
  return tasks.filter((t) => t.resource_id === uri || t.resource_id.startsWith(`${uri}/`) ||
    uri.startsWith(`${t.resource_id}/`));
}

function processingNote(tasks) {
  if (!tasks.length) return null;
  return h("div", { class: "notice", role: "note" },
    h("strong", {}, "Processing: "),
    tasks.map((t) => `${t.task_type} ${t.status}${t.stage ? ` (${t.stage})` : ""}`).join("; "));
}

function breadcrumbs(uri) {
  const parts = [];
  for (let u = uri; u; u = parentUri(u)) parts.unshift(u);
  return h("nav", { class: "crumbs", "aria-label": "Path" }, parts.map((u, i) => [
    i ? " / " : "",
    i === parts.length - 1 ? h("span", { "aria-current": "location" }, baseName(u))
      : h("a", { href: routeHref("browse", { uri: u }) }, baseName(u)),
  ]));
}

function listPage(uri, offset) {
  return api("GET", "/api/v1/fs/ls", { envelope: true, query: { uri, output: "original",
    node_limit: PAGE, offset, sort_by: "name" } });
}

class Tree {
  constructor() {
    this.prefetched = new Map(); // uri -> the first page of its listing, requested early
    this.nodes = new Map();
    this.tasks = [];
    this.el = h("ul", { class: "tree", "aria-label": "viking:// tree" });
    this.el.addEventListener("keydown", (event) => this.keys(event));
  }

  addRoot(uri) {
    this.el.append(this.node({ uri, name: uri, isDir: true }, 1));
  }

  node(entry, level) {
    const toggle = entry.isDir ? h("button", {
      type: "button", class: "toggle", "aria-expanded": "false",
      "aria-label": `Expand ${entry.name}`,
    }, "▸") : h("span", { class: "toggle-space", "aria-hidden": "true" });
    const link = h("a", { href: routeHref("browse", { uri: entry.uri }), class: "node",
      dataset: { uri: entry.uri } }, entry.name);
    const li = h("li", { dataset: { level } }, h("div", { class: "row" }, toggle,
      h("span", { class: entry.isDir ? "icon dir" : "icon file", "aria-hidden": "true" }),
      link, this.badgeFor(entry.uri)));
    const state = { ...entry, li, link, toggle, level, expanded: false, list: null,
      offset: 0, loading: null };
    this.nodes.set(entry.uri, state);
    if (entry.isDir) toggle.addEventListener("click", () => this.toggle(entry.uri));
    return li;
  }

  badgeFor(uri) {
    return workOn(this.tasks, uri).length ? badge("processing", "warn") : null;
  }

  refreshBadges() {
    for (const state of this.nodes.values()) {
      state.li.querySelector(":scope > .row > .badge")?.remove();
      const mark = this.badgeFor(state.uri);
      if (mark) state.link.after(mark);
    }
  }

  async toggle(uri) {
    const state = this.nodes.get(uri);
    if (state.expanded) this.collapse(state);
    else await this.expand(uri);
  }

  collapse(state) {
    state.expanded = false;
    state.toggle.setAttribute("aria-expanded", "false");
    state.toggle.setAttribute("aria-label", `Expand ${state.name}`);
    state.toggle.textContent = "▸";
    if (state.list) state.list.hidden = true;
  }

  async expand(uri) {
    const state = this.nodes.get(uri);
    if (!state || !state.isDir) return;
    state.expanded = true;
    state.toggle.setAttribute("aria-expanded", "true");
    state.toggle.setAttribute("aria-label", `Collapse ${state.name}`);
    state.toggle.textContent = "▾";
    if (state.list) {
      state.list.hidden = false;
      return;
    }
    state.list = h("ul", { role: "group" });
    state.li.append(state.list);
    await this.loadMore(state);
  }

  loadMore(state) {
    if (!state.loading) {
      state.loading = this.fetchPage(state).finally(() => { state.loading = null; });
    }
    return state.loading;
  }

  async fetchPage(state) {
    const more = state.list.querySelector(":scope > li.more");
    if (more) more.remove();
    const loading = h("li", { class: "muted" }, "Loading…");
    state.list.append(loading);
    try {
      const prefetched = state.offset === 0 ? this.prefetched.get(state.uri) : null;
      this.prefetched.delete(state.uri);
      const body = await (prefetched || listPage(state.uri, state.offset));
      loading.remove();
      for (const entry of body.result) {
        state.list.append(this.node({ uri: entry.uri, name: entry.name, isDir: entry.isDir },
          state.level + 1));
      }
      state.offset += body.result.length;
      if (!body.result.length && !state.offset) {
        state.list.append(h("li", { class: "muted" }, "(empty)"));
      }
      if (body.has_more) {
        const button = h("button", { type: "button", class: "link" },
          `Show more (${state.offset} shown)`);
        button.addEventListener("click", () => this.loadMore(state));
        state.list.append(h("li", { class: "more" }, button));
      }
    } catch (error) {
      loading.remove();
      state.list.append(h("li", {}, errorBox(error)));
    }
  }

  /**
   * Expands every ancestor of `uri` below a root, so the selection is in view, and with
   * `self` the selection too (a directory opens where it is chosen).
   */
  async reveal(uri, self = false) {
    const chain = self ? [uri] : [];
    for (let u = parentUri(uri); u; u = parentUri(u)) chain.unshift(u);
    // Every level's first page is requested at once, then the levels open in order.
    const roots = [...this.nodes.values()].filter((n) => n.level === 1).map((n) => n.uri);
    for (const ancestor of chain) {
      const state = this.nodes.get(ancestor);
      const inTree = roots.some((r) => ancestor === r || ancestor.startsWith(`${r}/`));
      if (inTree && !(state && state.list) && !this.prefetched.has(ancestor)) {
        this.prefetched.set(ancestor, listPage(ancestor, 0));
      }
    }
    for (const ancestor of chain) {
      const state = this.nodes.get(ancestor);
      if (!state) continue;
      if (!state.expanded) await this.expand(ancestor);
      else if (state.loading) await state.loading;
    }
  }

  select(uri) {
    for (const state of this.nodes.values()) {
      const on = state.uri === uri;
      state.link.classList.toggle("selected", on);
      if (on) state.link.setAttribute("aria-current", "page");
      else state.link.removeAttribute("aria-current");
    }
  }

  /** Up/Down move between visible entries; Right expands, Left collapses or goes up. */
  keys(event) {
    const link = event.target.closest("a.node");
    if (!link) return;
    const visible = [...this.el.querySelectorAll("a.node")].filter((a) => a.offsetParent);
    const i = visible.indexOf(link);
    const state = this.nodes.get(link.dataset.uri);
    if (event.key === "ArrowDown" && i < visible.length - 1) visible[i + 1].focus();
    else if (event.key === "ArrowUp" && i > 0) visible[i - 1].focus();
    else if (event.key === "ArrowRight" && state && state.isDir) this.expand(state.uri);
    else if (event.key === "ArrowLeft" && state) {
      if (state.expanded) this.collapse(state);
      else this.nodes.get(parentUri(state.uri) || "")?.link.focus();
    } else return;
    event.preventDefault();
  }
}

/** A name with an extension is most likely a file: its contents are asked for at once. */
function looksLikeFile(uri) {
  return /\.[A-Za-z0-9]{1,10}$/.test(baseName(uri));
}

/**
 * Every request a selection needs, started at once: stat, tags and either the sidecars or,
 * when the name looks like a file, its contents. What the stat then says decides what shows
 * (a directory named like a file asks for its sidecars after).
 */
function fetchAll(uri, work, span) {
  const content = h("section", { class: "card file", "aria-label": "Contents" });
  const file = looksLikeFile(uri);
  const sidecar = (name) => () => get(`/api/v1/content/${name}`, { uri }).catch((e) => e);
  const abstract = sidecar("abstract");
  const overview = sidecar("overview");
  return {
    stat: get("/api/v1/fs/stat", { uri }),
    attrs: get("/api/v1/fs/attrs", { uri }).catch(() => null),
    work,
    abstract: file ? abstract : abstract(),
    overview: file ? overview : overview(),
    content,
    rendering: file ? renderFile(content, uri, { span }) : null,
    span,
  };
}

async function sidecar(title, text) {
  const box = h("section", { class: "card sidecar", "aria-label": title }, h("h3", {}, title));
  if (text instanceof Error) box.append(errorBox(text));
  else if (NOT_READY.test(text)) box.append(badge("not ready yet", "warn"));
  else {
    const body = h("div");
    await renderMarkdownInto(body, text);
    box.append(body);
  }
  return box;
}

/** Filled when the pending tasks have loaded: they never hold the page back. */
function processingSlot(uri, work) {
  const slot = h("div", { class: "processing" });
  work.then((tasks) => {
    const note = processingNote(workOn(tasks, uri));
    if (note) slot.append(note);
  });
  return slot;
}

async function directoryDetail(uri, stat, req) {
  const later = (p) => (typeof p === "function" ? p() : p); // a dir named like a file
  const [attrs, abstract, overview] = await Promise.all([req.attrs, later(req.abstract),
    later(req.overview)]);
  return [
    facts([["Kind", "directory"], ["Entries", stat.count], ["Modified", formatTime(stat.modTime)],
      ["Tags", tagList(attrs)]]),
    processingSlot(uri, req.work),
    h("div", { class: "sidecars" }, await sidecar("L0 abstract", abstract),
      await sidecar("L1 overview", overview)),
  ];
}

function tagList(attrs) {
  const tags = attrs && attrs.attrs ? attrs.attrs.tags || [] : [];
  return tags.length ? h("span", {}, tags.map((t) => badge(t))) : "none";
}

async function fileDetail(uri, stat, req) {
  const rendering = req.rendering || renderFile(req.content, uri, { span: req.span });
  const [attrs, provenance] = await Promise.all([req.attrs,
    /\/memories\//.test(uri) ? provenanceView(uri) : null, rendering]);
  return [
    facts([["Kind", "file"], ["Size", formatBytes(stat.size)],
      ["Modified", formatTime(stat.modTime)], ["Context", attrs ? attrs.context_type : ""],
      ["Tags", tagList(attrs)]]),
    processingSlot(uri, req.work),
    h("div", { class: "actions" }, downloadButton(uri)),
    provenance,
    req.content,
  ];
}

export async function render(main, params) {
  preloadRenderers(params.uri || "");
  const identity = session.identity;
  const detail = h("section", { class: "detail", "aria-labelledby": "detail-title" });
  const tree = new Tree();
  const title = h("h1", { tabindex: "-1" }, "Browse");
  clear(main, title, h("div", { class: "split" },
    h("nav", { class: "tree-pane", "aria-label": "Tree" }, tree.el), detail));
  // Pending work marks the tree and the detail; it loads once the page is on screen.
  let loadWork;
  const work = new Promise((resolve) => { loadWork = resolve; }).then(pendingWork)
    .then((tasks) => {
      tree.tasks = tasks;
      tree.refreshBadges();
      return tasks;
    });
  for (const root of rootsFor(identity)) tree.addRoot(root);

  let selection = 0;
  const show = async (p) => {
    const token = ++selection;
    const uri = p.uri || "viking://resources";
    tree.select(uri);
    clear(detail, h("h2", { id: "detail-title" }, baseName(uri)), breadcrumbs(uri), spinner());
    const revealing = tree.reveal(uri, !looksLikeFile(uri)).then(() => tree.select(uri));
    let body;
    const req = fetchAll(uri, work, matchedSpan(p.lines ? `lines ${p.lines}` : ""));
    try {
      const stat = await req.stat;
      body = stat.isDir ? await directoryDetail(uri, stat, req)
        : await fileDetail(uri, stat, req);
    } catch (error) {
      body = errorBox(error, uri);
    }
    if (token !== selection) return;
    clear(detail, h("h2", { id: "detail-title" }, baseName(uri)), breadcrumbs(uri),
      h("p", { class: "uri" }, uri), body);
    await revealing;
    if (token === selection) ready("browse");
    loadWork();
  };
  await show(params);
  return { update: show };
}
