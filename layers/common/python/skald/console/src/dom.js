// DOM building without HTML strings: every text a server or a user supplied goes in as a
// text node, so names, contents and memories can never become markup. The only HTML the
// console inserts is sanitiser output (see render.js).

/**
 * h("a", {href: "#/x", class: "link", onclick: fn}, "text", child, [more]) -> element.
 * Attributes starting with "on" become listeners; `true`/`false` toggle boolean attributes;
 * null and undefined are skipped.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let idCounter = 0;
/** A unique id for label/aria wiring. */
export function uid(prefix = "id") {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
}

/** A labelled form field: <div class="field"><label for>..</label><input id></div>. */
export function field(label, control, hint) {
  const id = control.id || uid("f");
  control.id = id;
  let hintEl = null;
  if (hint) {
    hintEl = h("small", { id: `${id}-hint`, class: "hint" }, hint);
    control.setAttribute("aria-describedby", hintEl.id);
  }
  return h("div", { class: "field" }, h("label", { for: id }, label), control, hintEl);
}

export function formatBytes(n) {
  if (n === null || n === undefined) return "";
  if (n < 1024) return `${n} B`;
  const units = ["KB", "MB", "GB", "TB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function formatTime(value) {
  if (value === null || value === undefined || value === "") return "";
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  if (Number.isNaN(date.getTime())) return String(value);
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function formatScore(value) {
  return typeof value === "number" ? value.toFixed(3) : "";
}

/** A definition list from [label, value] pairs, skipping empty values. */
export function facts(pairs) {
  const dl = h("dl", { class: "facts" });
  for (const [label, value] of pairs) {
    if (value === null || value === undefined || value === "") continue;
    dl.append(h("dt", {}, label), h("dd", {}, value));
  }
  return dl;
}

export function badge(text, kind = "") {
  return h("span", { class: `badge ${kind}`.trim() }, text);
}

/** An error box for a failed call (code and message, as text). */
export function errorBox(error, what) {
  const code = error && error.code ? `${error.code}: ` : "";
  const message = error && error.message ? error.message : String(error);
  return h("div", { class: "error", role: "alert" }, what ? `${what}: ` : "", code, message);
}

export function spinner(label = "Loading…") {
  return h("p", { class: "loading", role: "status" }, label);
}

/** Hash-route links: #/view?key=value with every value encoded. */
export function routeHref(view, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== "") query.set(k, v);
  }
  const qs = query.toString();
  return `#/${view}${qs ? `?${qs}` : ""}`;
}

/** The last segment of a viking:// URI. */
export function baseName(uri) {
  const trimmed = uri.replace(/\/+$/, "");
  const i = trimmed.lastIndexOf("/");
  return i < 0 ? trimmed : trimmed.slice(i + 1);
}

export function parentUri(uri) {
  const trimmed = uri.replace(/\/+$/, "");
  const i = trimmed.lastIndexOf("/");
  if (i <= "viking://".length - 1) return null;
  const parent = trimmed.slice(0, i);
  return parent === "viking:/" ? null : parent;
}
