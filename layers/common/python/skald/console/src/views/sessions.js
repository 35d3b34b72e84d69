// Sessions: each session's live messages with their parts, its archives, and for an archive
// the memories its commit produced (memory_diff.json as a readable diff).
import { api, get } from "../api.js";
import { navigate, ready, session } from "../shell.js";
import {
  badge, clear, errorBox, facts, formatTime, h, routeHref, spinner,
} from "../dom.js";
import { memoryDiffView } from "./memorydiff.js";

function sessionUri(sid) {
  return `viking://user/${session.identity.user_id}/sessions/${sid}`;
}

function json(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function partView(part) {
  switch (part.type) {
    case "text":
      return h("p", { class: "part text" }, part.text || "");
    case "context":
      return h("div", { class: "part context" }, badge("context"), " ",
        part.uri ? h("a", { href: routeHref("browse", { uri: part.uri }) }, part.uri) : "",
        part.context_type ? [" ", badge(part.context_type)] : null,
        part.abstract ? h("p", {}, part.abstract) : null);
    case "tool":
      return h("div", { class: "part tool" },
        h("div", {}, badge("tool"), " ", h("strong", {}, part.tool_name || part.tool_id || ""),
          " ", badge(part.tool_status || "", part.tool_status === "error" ? "bad" : ""),
          part.duration_ms !== undefined ? ` ${part.duration_ms} ms` : ""),
        part.tool_input !== undefined ? h("details", {}, h("summary", {}, "Input"),
          h("pre", { class: "plain" }, json(part.tool_input))) : null,
        part.tool_output !== undefined ? h("details", {}, h("summary", {}, "Output"),
          h("pre", { class: "plain" }, json(part.tool_output))) : null);
    case "image_url": {
      const url = typeof part.image_url === "string" ? part.image_url
        : (part.image_url || {}).url || "";
      // Shown as text: the console loads nothing from other origins.
      return h("p", { class: "part image" }, badge("image"), " ", url);
    }
    default:
      return h("pre", { class: "part plain" }, json(part));
  }
}

export function messageView(msg, focusId) {
  const el = h("li", { class: msg.id === focusId ? "message focus" : "message",
    id: `m-${msg.id}`, dataset: { id: msg.id } },
    h("div", { class: "msg-head" }, h("strong", {}, msg.role), " ",
      h("span", { class: "muted" }, formatTime(msg.created_at)), " ",
      h("code", { class: "muted" }, msg.id),
      msg.peer_id ? [" ", badge(`peer ${msg.peer_id}`)] : null),
    (msg.parts || []).map(partView));
  if (msg.id === focusId) el.setAttribute("aria-current", "true");
  return el;
}

function messageList(messages, focusId, label) {
  if (!messages.length) return h("p", { class: "muted" }, "No messages.");
  return h("ol", { class: "messages", "aria-label": label },
    messages.map((m) => messageView(m, focusId)));
}

async function archiveList(sid) {
  try {
    const body = await api("GET", "/api/v1/fs/ls", { envelope: true, query: {
      uri: `${sessionUri(sid)}/history`, output: "original", node_limit: 200,
      sort_by: "name", sort_order: "desc" } });
    return body.result.filter((e) => e.isDir && /^archive_\d+$/.test(e.name))
      .map((e) => e.name);
  } catch (error) {
    if (error.status === 404) return [];
    throw error;
  }
}

async function archiveDetail(sid, aid, focusId) {
  const [archive, diffText] = await Promise.all([
    get(`/api/v1/sessions/${encodeURIComponent(sid)}/archives/${encodeURIComponent(aid)}`),
    get("/api/v1/content/read", { uri: `${sessionUri(sid)}/history/${aid}/memory_diff.json` })
      .catch((e) => e),
  ]);
  let diff;
  if (diffText instanceof Error) {
    diff = diffText.status === 404
      ? h("p", { class: "muted" }, archive.status === "failed"
        ? "Memory extraction failed for this archive."
        : "No memory diff yet: extraction has not run or is still running.")
      : errorBox(diffText);
  } else {
    try {
      diff = memoryDiffView(JSON.parse(diffText));
    } catch (error) {
      diff = errorBox(error, "memory_diff.json is not valid JSON");
    }
  }
  return h("section", { class: "card archive", "aria-labelledby": "archive-title" },
    h("h3", { id: "archive-title" }, `Archive ${aid}`),
    facts([["Status", badge(archive.status || "", archive.status === "failed" ? "bad" : "")],
      ["Abstract", archive.abstract]]),
    h("h4", {}, "Memory diff"), diff,
    h("h4", {}, "Archived messages"),
    messageList(archive.messages || [], focusId, `Messages of ${aid}`));
}

async function sessionDetail(p) {
  const sid = p.sid;
  const path = `/api/v1/sessions/${encodeURIComponent(sid)}`;
  const aid = p.archive || "";
  const [meta, context, archives, archive] = await Promise.all([get(path),
    get(`${path}/context`, { token_budget: 128000 }), archiveList(sid),
    aid ? archiveDetail(sid, aid, p.msg) : null]);
  const nav = archives.length ? h("ul", { class: "archives" }, archives.map((a) =>
    h("li", {}, h("a", { href: routeHref("sessions", { sid, archive: a }),
      "aria-current": a === aid ? "page" : null }, a)))) : h("p", { class: "muted" },
    "No archives: nothing was committed yet.");
  return [
    facts([["Created", formatTime(meta.created_at)], ["Updated", formatTime(meta.updated_at)],
      ["Live messages", meta.message_count], ["All messages", meta.total_message_count],
      ["Commits", meta.commit_count], ["Memories extracted", meta.memories_extracted?.total],
      ["Pending tokens", meta.pending_tokens],
      ["Failed archive", meta.failed_archive ? badge(meta.failed_archive, "bad") : ""]]),
    h("h3", {}, "Archives"), nav,
    archive,
    h("h3", {}, "Live messages"),
    messageList(context.messages || [], p.msg, "Live messages"),
  ];
}

/** The session and archive holding message `msg`, newest sessions first (bounded). */
async function findMessage(sessions, msg) {
  for (const s of sessions.slice(0, 50)) {
    const path = `/api/v1/sessions/${encodeURIComponent(s.session_id)}`;
    const context = await get(`${path}/context`, { token_budget: 0 }).catch(() => null);
    if (context && (context.messages || []).some((m) => m.id === msg)) {
      return { sid: s.session_id, archive: "" };
    }
    for (const aid of await archiveList(s.session_id).catch(() => [])) {
      const archive = await get(`${path}/archives/${aid}`).catch(() => null);
      if (archive && (archive.messages || []).some((m) => m.id === msg)) {
        return { sid: s.session_id, archive: aid };
      }
    }
  }
  return null;
}

export async function render(main, params) {
  const list = h("nav", { class: "list-pane", "aria-label": "Sessions" });
  const detail = h("section", { class: "detail", "aria-live": "polite" });
  clear(main, h("h1", { tabindex: "-1" }, "Sessions"), h("div", { class: "split" }, list,
    detail));
  // The list and the chosen session load side by side.
  const listed = get("/api/v1/sessions").then((all) =>
    all.sort((a, b) => String(b.mod_time).localeCompare(String(a.mod_time))));

  let current = 0;
  const show = async (p) => {
    const token = ++current;
    const detailed = p.sid ? sessionDetail(p).catch((error) => errorBox(error, p.sid)) : null;
    const sessions = await listed;
    clear(list, sessions.length ? h("ul", { class: "plain" }, sessions.map((s) => h("li", {},
      h("a", { href: routeHref("sessions", { sid: s.session_id }),
        "aria-current": s.session_id === p.sid ? "page" : null }, s.session_id),
      h("div", { class: "muted small" }, formatTime(s.mod_time)))))
      : h("p", { class: "muted" }, "No sessions yet."));
    if (!p.sid && p.msg) {
      clear(detail, spinner(`Looking for message ${p.msg}…`));
      const found = await findMessage(sessions, p.msg);
      if (token !== current) return;
      if (found) {
        navigate("sessions", { ...found, msg: p.msg });
        return;
      }
      clear(detail, errorBox({ code: "NOT_FOUND", message: `No session holds ${p.msg}.` }));
      ready("sessions");
      return;
    }
    if (!p.sid) {
      clear(detail, h("p", { class: "muted" }, "Choose a session."));
      ready("sessions");
      return;
    }
    clear(detail, h("h2", {}, p.sid), spinner());
    const body = await detailed;
    if (token !== current) return;
    clear(detail, h("h2", {}, p.sid), body);
    if (p.msg) detail.querySelector(".message.focus")?.scrollIntoView({ block: "center" });
    ready("sessions");
  };
  await show(params);
  return { update: show };
}
