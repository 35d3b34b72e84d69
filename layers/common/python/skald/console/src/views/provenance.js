// Where a memory came from: the fields of its hidden MEMORY_FIELDS trailer and, when present,
// a provenance frontmatter block, turned into links back to the session, archive and messages
// that produced it.
import { get } from "../api.js";
import { badge, errorBox, facts, h, routeHref } from "../dom.js";

const TRAILER = /\n*<!-- MEMORY_FIELDS\n([\s\S]*?)\n-->\s*$/;
const FRONTMATTER = /^---\n([\s\S]*?)\n---\n?/;

function scalar(text) {
  const value = text.trim();
  if (/^\[.*\]$/.test(value)) {
    return value.slice(1, -1).split(",").map((v) => scalar(v)).filter((v) => v !== "");
  }
  return value.replace(/^(["'])(.*)\1$/, "$2");
}

/** A small YAML subset (scalars, lists, one level of nesting): enough to show the block. */
export function parseFrontmatter(text) {
  const out = {};
  let key = null;
  let nestedKey = null;
  for (const line of text.split("\n")) {
    if (!line.trim() || line.trim().startsWith("#")) continue;
    const indent = line.length - line.trimStart().length;
    const item = /^\s*-\s+(.*)$/.exec(line);
    const pair = /^\s*([\w.-]+):\s*(.*)$/.exec(line);
    if (item && key) {
      const target = nestedKey && typeof out[key] === "object" && !Array.isArray(out[key])
        ? out[key] : out;
      const name = target === out ? key : nestedKey;
      if (!Array.isArray(target[name])) target[name] = [];
      target[name].push(scalar(item[1]));
    } else if (pair && indent === 0) {
      key = pair[1];
      nestedKey = null;
      out[key] = pair[2] === "" ? {} : scalar(pair[2]);
    } else if (pair && key && typeof out[key] === "object" && !Array.isArray(out[key])) {
      nestedKey = pair[1];
      out[key][nestedKey] = pair[2] === "" ? [] : scalar(pair[2]);
    }
  }
  return out;
}

/** {body, fields, frontmatter, frontmatterText} of a memory file read with raw=true. */
export function splitMemory(raw) {
  let text = raw;
  let fields = null;
  const trailer = TRAILER.exec(text);
  if (trailer) {
    try {
      fields = JSON.parse(trailer[1]);
    } catch {
      fields = null;
    }
    text = text.slice(0, trailer.index);
  }
  let frontmatter = null;
  let frontmatterText = "";
  const fm = FRONTMATTER.exec(text);
  if (fm) {
    frontmatterText = fm[1];
    frontmatter = parseFrontmatter(fm[1]);
    text = text.slice(fm[0].length);
  }
  return { body: text, fields, frontmatter, frontmatterText };
}

function first(...values) {
  for (const v of values) if (typeof v === "string" && v) return v;
  return null;
}

function list(...values) {
  for (const v of values) if (Array.isArray(v) && v.length) return v.map(String);
  return [];
}

/** Session, archive and message ids wherever the memory recorded them. */
export function provenanceOf(fields, frontmatter) {
  const f = fields || {};
  const fm = frontmatter || {};
  const p = (typeof fm.provenance === "object" && fm.provenance) || {};
  const fp = (typeof f.provenance === "object" && f.provenance) || {};
  const tag = (name) => {
    const hit = (f.tags || []).find((t) => typeof t === "string" && t.startsWith(`${name}=`));
    return hit ? hit.slice(name.length + 1) : null;
  };
  const archiveUri = first(p.archive_uri, fm.archive_uri, fp.archive_uri, f.archive_uri);
  const fromUri = archiveUri ? /\/sessions\/([^/]+)\/history\/(archive_\d+)/.exec(archiveUri)
    : null;
  return {
    session: first(p.session_id, fm.session_id, fp.session_id, f.session_id, tag("session"),
      fromUri && fromUri[1]),
    archive: first(p.archive_id, fm.archive_id, fp.archive_id, f.archive_id, tag("archive"),
      fromUri && fromUri[2]),
    messages: list(p.message_ids, p.source_message_ids, fm.source_message_ids,
      fm.message_ids, fp.source_message_ids, f.source_message_ids),
  };
}

/** The provenance card of the memory at `uri`. */
export async function provenanceView(uri) {
  const card = h("section", { class: "card provenance", "aria-label": "Provenance" },
    h("h3", {}, "Provenance"));
  let raw;
  try {
    raw = await get("/api/v1/content/read", { uri, raw: true });
  } catch (error) {
    card.append(errorBox(error));
    return card;
  }
  const { fields, frontmatter, frontmatterText } = splitMemory(raw);
  if (!fields && !frontmatter) {
    card.append(h("p", { class: "muted" }, "This file records no provenance."));
    return card;
  }
  const prov = provenanceOf(fields, frontmatter);
  const sessionLink = prov.session ? h("a", { href: routeHref("sessions", {
    sid: prov.session, archive: prov.archive || "" }) },
  `${prov.session}${prov.archive ? ` / ${prov.archive}` : ""}`) : "not recorded";
  const messages = prov.messages.length ? h("ul", { class: "plain" }, prov.messages.map((m) =>
    h("li", {}, h("a", { href: routeHref("sessions", { sid: prov.session || "",
      archive: prov.archive || "", msg: m }) }, m)))) : "not recorded";
  const f = fields || {};
  card.append(facts([
    ["Memory type", f.memory_type ? badge(f.memory_type) : ""],
    ["Version", f.version],
    ["Extraction", f.source_extraction_id],
    ["Session", sessionLink],
    ["Source messages", messages],
  ]));
  if (frontmatterText) {
    card.append(h("details", {}, h("summary", {}, "Frontmatter"),
      h("pre", { class: "plain" }, frontmatterText)));
  }
  return card;
}
