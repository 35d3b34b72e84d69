// Audit: the audit trail (GET /api/v1/console/audit), newest first, for root (every account)
// and account admins (their own): who acted, from where, in which request, what, on what, and
// how it ended. The filters and the page live in the hash (#/audit?action=fs.rm&page=2), so a
// reload or a shared link shows the same rows.
import { get } from "../api.js";
import { navigate, ready, session } from "../shell.js";
import { badge, clear, errorBox, field, formatTime, h, spinner } from "../dom.js";

const PAGE_SIZE = 25;
const ACTIONS = ["account.create", "account.delete", "user.register", "user.remove",
  "user.role", "key.create", "key.revoke", "key.regenerate", "fs.rm", "fs.mv",
  "memory.forget", "skill.delete", "pack.import", "pack.restore", "session.delete",
  "watch.create", "watch.update", "watch.cancel"];
const STATUSES = [["", "any"], ["success", "succeeded"], ["error", "failed"],
  ["pending", "pending"], ["4xx", "4xx"], ["5xx", "5xx"]];
const OUTCOME_KIND = { ok: "good", error: "bad", pending: "warn" };
const FILTERS = ["action", "status", "user_id", "request_id", "account_id"];

function principal(item) {
  const who = `${item.user_id} @ ${item.account_id} (${item.role})`;
  const acting = item.actor_account_id && item.actor_account_id !== item.account_id
    ? ` acting from ${item.actor_account_id}` : "";
  return h("span", {}, who + acting,
    item.key_id ? h("span", { class: "muted small" }, ` key ${item.key_id}`) : null);
}

function outcome(item) {
  const label = item.outcome === "pending" ? "pending" : `${item.outcome} ${item.status_code}`;
  return h("span", {}, badge(label, OUTCOME_KIND[item.outcome] || ""),
    item.error_code ? h("div", { class: "error-text small" },
      `${item.error_code}: ${item.error_message || ""}`) : null);
}

function detailText(detail) {
  const pairs = Object.entries(detail || {});
  return pairs.length ? pairs.map(([k, v]) => `${k}=${typeof v === "string" ? v
    : JSON.stringify(v)}`).join(", ") : "";
}

function row(item) {
  return h("tr", { dataset: { action: item.action, outcome: item.outcome } },
    h("td", {}, formatTime(item.created_at)),
    h("td", {}, principal(item)),
    h("td", {}, item.source_ip || ""),
    h("td", {}, h("code", { class: "small" }, item.request_id || "")),
    h("td", {}, h("code", {}, item.action)),
    h("td", { class: "uri" }, item.target,
      item.detail && Object.keys(item.detail).length
        ? h("div", { class: "muted small" }, detailText(item.detail)) : null),
    h("td", {}, outcome(item)));
}

function filtersForm(params) {
  const action = h("select", { name: "action" }, h("option", { value: "" }, "any"),
    ACTIONS.map((a) => h("option", { value: a, selected: a === params.action }, a)));
  const status = h("select", { name: "status" }, STATUSES.map(([value, label]) =>
    h("option", { value, selected: value === (params.status || "") }, label)));
  const user = h("input", { name: "user_id", value: params.user_id || "",
    autocomplete: "off" });
  const request = h("input", { name: "request_id", value: params.request_id || "",
    autocomplete: "off", spellcheck: "false" });
  const account = session.identity.role === "root"
    ? h("input", { name: "account_id", value: params.account_id || "", autocomplete: "off" })
    : null;
  const form = h("form", { class: "inline-form", "aria-label": "Filter the audit trail" },
    field("Action", action), field("Status", status), field("User", user),
    field("Request id", request), account ? field("Account", account) : null,
    h("button", { type: "submit" }, "Filter"),
    h("button", { type: "button", class: "link", onclick: () => navigate("audit") },
      "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    navigate("audit", { action: action.value, status: status.value,
      user_id: user.value.trim(), request_id: request.value.trim(),
      account_id: account ? account.value.trim() : "" });
  });
  return form;
}

function pager(params, result) {
  const pages = Math.max(1, Math.ceil(result.total / result.page_size));
  const go = (page) => () => navigate("audit", { ...params, page: String(page) });
  return h("nav", { class: "toolbar pager", "aria-label": "Pages" },
    h("button", { type: "button", disabled: result.page <= 1, onclick: go(result.page - 1) },
      "Newer"),
    h("span", { class: "muted", id: "audit-page" }, `Page ${result.page} of ${pages}`),
    h("button", { type: "button", disabled: result.page >= pages,
      onclick: go(result.page + 1) }, "Older"));
}

export async function render(main, params) {
  const body = h("div");
  const filters = h("div");
  clear(main, h("h1", { tabindex: "-1" }, "Audit"),
    h("p", { class: "muted" }, session.identity.role === "root"
      ? "Admin, security and destructive actions of every account, newest first."
      : `Admin, security and destructive actions in ${session.identity.account_id}, ` +
        "newest first."),
    filters, body);

  const show = async (p) => {
    clear(filters, filtersForm(p));
    clear(body, spinner());
    const query = { page: p.page || 1, page_size: PAGE_SIZE };
    for (const name of FILTERS) if (p[name]) query[name] = p[name];
    try {
      const result = await get("/api/v1/console/audit", query);
      const share = result.total ? ` (${Math.round(result.success_rate * 100)}% succeeded)`
        : "";
      clear(body, h("p", { id: "audit-total" }, `${result.total} records${share}`),
        result.items.length ? h("table", { class: "table audit" },
          h("caption", { class: "sr-only" }, "Audit records, newest first"),
          h("thead", {}, h("tr", {}, ["Time", "Principal", "Source IP", "Request id",
            "Action", "Target", "Outcome"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, result.items.map(row)))
          : h("p", { class: "muted" }, "No records."),
        pager(p, result));
    } catch (error) {
      clear(body, errorBox(error, "The audit trail could not load"));
    }
    ready("audit");
  };
  await show(params);
  return { update: show };
}
