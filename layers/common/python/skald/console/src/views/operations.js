// Operations: background tasks (pending, running, failed with their errors), the job queues
// with their dead letters, and adding resources: files and folders uploaded with progress
// (temp_upload, then add_resource, as the SDK does), or a URL where the server fetches them.
import { get, post } from "../api.js";
import { announce, ready, session } from "../shell.js";
import {
  badge, clear, errorBox, facts, field, formatTime, h, routeHref, spinner,
} from "../dom.js";
import { uploadPanel } from "./upload.js";

const STATUS_KIND = { failed: "bad", completed: "good", running: "warn", pending: "warn",
  cancelling: "warn", cancelled: "" };

function taskRow(task, refresh) {
  const cancel = ["pending", "running"].includes(task.status) && session.canData
    ? h("button", { type: "button", class: "link", onclick: async () => {
      try {
        await post(`/api/v1/tasks/${encodeURIComponent(task.task_id)}/cancel`, {});
        announce(`Task ${task.task_id} cancelled.`);
        refresh();
      } catch (error) {
        announce(`${error.code}: ${error.message}`);
      }
    } }, "Cancel") : null;
  return h("tr", { dataset: { status: task.status } },
    h("td", {}, h("code", {}, task.task_id.slice(0, 8))),
    h("td", {}, task.task_type),
    h("td", {}, badge(task.status, STATUS_KIND[task.status] || "")),
    h("td", {}, task.stage || ""),
    h("td", { class: "uri" }, task.resource_id && task.resource_id.startsWith("viking://")
      ? h("a", { href: routeHref(session.canData ? "browse" : "operations",
        session.canData ? { uri: task.resource_id } : {}) }, task.resource_id)
      : task.resource_id || ""),
    h("td", {}, formatTime(task.created_at)),
    h("td", {}, `${task.processing_seconds ?? ""}s`),
    h("td", { class: "error-text" }, task.error || ""),
    h("td", {}, cancel));
}

function tasksPanel() {
  const status = h("select", { name: "status" }, ["", "pending", "running", "failed",
    "completed", "cancelled"].map((s) => h("option", { value: s }, s || "any")));
  const body = h("div");
  const panel = h("section", { class: "card", "aria-labelledby": "tasks-title" },
    h("h2", { id: "tasks-title" }, "Tasks"),
    h("div", { class: "toolbar" }, field("Status", status),
      h("button", { type: "button", onclick: () => load() }, "Refresh")), body);
  let cursor = null;
  let rows = [];
  const table = () => h("table", { class: "table tasks" },
    h("caption", { class: "sr-only" }, "Background tasks, newest first"),
    h("thead", {}, h("tr", {}, ["Task", "Type", "Status", "Stage", "Resource", "Created",
      "Time", "Error", ""].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((t) => taskRow(t, () => load()))));
  const load = async (more = false) => {
    if (!more) { cursor = null; rows = []; clear(body, spinner()); }
    try {
      const page = await get("/api/v1/tasks", { status: status.value, limit: 50,
        pagination: "cursor", cursor });
      rows = rows.concat(page.items);
      cursor = page.next_cursor;
      clear(body, rows.length ? table() : h("p", { class: "muted" }, "No tasks."),
        page.has_more ? h("button", { type: "button", class: "link",
          onclick: () => load(true) }, "Show older tasks") : null);
    } catch (error) {
      clear(body, errorBox(error));
    }
  };
  status.addEventListener("change", () => load());
  return { panel, load };
}

function queuesPanel(queues) {
  const names = Object.keys(queues);
  const dead = names.flatMap((n) => (queues[n].errors || []).map((e) => ({ queue: n, ...e })));
  return h("section", { class: "card", "aria-labelledby": "queues-title" },
    h("h2", { id: "queues-title" }, "Queues"),
    h("table", { class: "table" },
      h("thead", {}, h("tr", {}, ["Queue", "Pending", "In progress", "Processed", "Retries",
        "Dead letters"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, names.map((n) => {
        const q = queues[n];
        return h("tr", {}, h("th", { scope: "row" }, n), h("td", {}, q.pending ?? ""),
          h("td", {}, q.in_progress ?? ""), h("td", {}, q.processed ?? ""),
          h("td", {}, q.requeue_count ?? ""),
          h("td", {}, q.error_count ? badge(String(q.error_count), "bad") : "0"));
      }))),
    h("h3", {}, "Dead-letter queue"),
    dead.length ? h("table", { class: "table" },
      h("thead", {}, h("tr", {}, ["Queue", "Job", "Kind", "Error"].map((c) =>
        h("th", { scope: "col" }, c)))),
      h("tbody", {}, dead.map((d) => h("tr", {}, h("td", {}, d.queue),
        h("td", {}, h("code", {}, d.job_id)), h("td", {}, d.kind),
        h("td", { class: "error-text" }, d.error)))))
      : h("p", { class: "muted" }, "No dead letters."));
}

/** Remote sources are offered only once the server says it fetches them. */
export function remoteSourcesEnabled(system) {
  const features = system && system.features;
  if (Array.isArray(features)) return features.includes("remote_sources");
  return Boolean(features && features.remote_sources);
}

function urlPanel(enabled) {
  const url = h("input", { name: "url", type: "url", disabled: !enabled,
    placeholder: "https://example.com/guide.md" });
  const to = h("input", { name: "to", disabled: !enabled, placeholder: "viking://resources/…" });
  const out = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "card", "aria-labelledby": "url-title" },
    h("h2", { id: "url-title" }, "Add from a URL"),
    enabled ? null : h("p", { class: "notice", role: "note" },
      "This server does not fetch remote sources yet: upload the files instead."),
    field("URL", url), field("Target (optional)", to),
    h("button", { type: "submit", disabled: !enabled }, "Add"), out);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const result = await post("/api/v1/resources", { path: url.value.trim(),
        to: to.value.trim() || undefined, wait: false });
      clear(out, h("p", {}, "Added: ", h("a", { href: routeHref("browse",
        { uri: result.root_uri }) }, result.root_uri)));
    } catch (error) {
      clear(out, errorBox(error));
    }
  });
  return form;
}

export async function render(main) {
  const tasks = tasksPanel();
  const loading = tasks.load();
  // The system summary carries the queues too; /observer/queue is asked only without it.
  const system = await get("/api/v1/observer/system").catch(() => null);
  const queues = system && system.queues ? system.queues
    : await get("/api/v1/observer/queue").catch((e) => e);
  clear(main, h("h1", { tabindex: "-1" }, "Operations"),
    system ? facts([["Version", system.version], ["Backend", system.backend],
      ["Auth mode", system.auth_mode]]) : null,
    session.canData ? h("div", { class: "two" }, uploadPanel(), urlPanel(
      remoteSourcesEnabled(system))) : null,
    tasks.panel,
    queues instanceof Error ? errorBox(queues, "Queues") : queuesPanel(queues));
  await loading;
  ready("operations");
  return { update: () => tasks.load() };
}
