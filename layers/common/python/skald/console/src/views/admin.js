// Admin: accounts (root), users and roles, key creation and rotation (a new key is shown
// once and never stored), and usage per account. Account admins see their own account.
import { api, get, post } from "../api.js";
import { announce, navigate, ready, session } from "../shell.js";
import {
  badge, clear, errorBox, facts, field, formatTime, h, routeHref, spinner,
} from "../dom.js";

const ID_PATTERN = "[A-Za-z0-9_.@\\-]+";

/** The one place a new key appears: copy it now, it is not shown again. */
function keyReveal(slot, who, key) {
  const input = h("input", { readonly: true, value: key, class: "key", "aria-label":
    `New API key for ${who}`, spellcheck: "false" });
  const copy = h("button", { type: "button", onclick: async () => {
    try {
      await navigator.clipboard.writeText(key);
      announce("Key copied.");
    } catch {
      input.select();
      announce("Select the key and copy it.");
    }
  } }, "Copy");
  const done = h("button", { type: "button", onclick: () => clear(slot) }, "Done");
  clear(slot, h("div", { class: "keybox", role: "alert" },
    h("strong", {}, `New key for ${who}. `),
    "It is shown once: copy it now; Skald keeps only its hash.",
    h("div", { class: "row" }, input, copy, done)));
  input.focus();
  input.select();
}

/** A button that asks for a second press instead of a dialog. */
function confirmButton(label, action) {
  const button = h("button", { type: "button", class: "danger" }, label);
  let armed = false;
  button.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      button.textContent = `Confirm: ${label.toLowerCase()}`;
      return;
    }
    button.disabled = true;
    await action();
  });
  button.addEventListener("blur", () => {
    armed = false;
    button.textContent = label;
  });
  return button;
}

function usageView(usage) {
  const u = usage.users || {};
  const s = usage.sessions;
  const r = usage.records;
  return h("section", { class: "card", "aria-label": "Usage" }, h("h3", {}, "Usage"),
    facts([
      ["Users", `${u.total ?? 0} (${u.admin ?? 0} admin, ${u.user ?? 0} user)`],
      ["Sessions", s ? `${s.total} sessions, ${s.messages} messages, ${s.commits} commits`
        : ""],
      ["Index records", r ? `${r.total} (${r.resource} resource, ${r.memory} memory, ` +
        `${r.skill} skill)` : ""],
    ]));
}

function usersTable(account, users, keySlot, reload) {
  const base = `/api/v1/admin/accounts/${encodeURIComponent(account)}/users`;
  return h("table", { class: "table users" },
    h("caption", { class: "sr-only" }, `Users of ${account}`),
    h("thead", {}, h("tr", {}, ["User", "Role", "Created", "Key", "Actions"].map((c) =>
      h("th", { scope: "col" }, c)))),
    h("tbody", {}, users.map((user) => {
      const path = `${base}/${encodeURIComponent(user.user_id)}`;
      const role = h("select", { "aria-label": `Role of ${user.user_id}` },
        ["user", "admin"].map((r) => h("option", { value: r, selected: r === user.role }, r)));
      role.addEventListener("change", async () => {
        try {
          await api("PUT", `${path}/role`, { body: { role: role.value } });
          announce(`${user.user_id} is now ${role.value}.`);
        } catch (error) {
          announce(`${error.code}: ${error.message}`);
          role.value = user.role;
        }
      });
      const rotate = h("button", { type: "button", onclick: async () => {
        try {
          const result = await post(`${path}/key`, {});
          keyReveal(keySlot, `${user.user_id} @ ${account}`, result.user_key);
        } catch (error) {
          clear(keySlot, errorBox(error, "Key rotation failed"));
        }
      } }, user.has_key ? "Rotate key" : "Create key");
      const remove = confirmButton("Remove", async () => {
        try {
          await api("DELETE", path);
          announce(`${user.user_id} removed.`);
        } catch (error) {
          announce(`${error.code}: ${error.message}`);
        }
        reload();
      });
      return h("tr", { dataset: { user: user.user_id } }, h("th", { scope: "row" }, user.user_id),
        h("td", {}, role), h("td", {}, formatTime(user.created_at)),
        h("td", {}, user.has_key ? badge("active", "good") : badge("none")),
        h("td", { class: "actions" }, rotate, " ", remove));
    })));
}

function registerForm(account, keySlot, reload) {
  const userId = h("input", { name: "user_id", required: true, pattern: ID_PATTERN,
    autocomplete: "off" });
  const role = h("select", { name: "role" }, h("option", { value: "user" }, "user"),
    h("option", { value: "admin" }, "admin"));
  const form = h("form", { class: "inline-form", "aria-label": "Add a user" },
    field("New user id", userId), field("Role", role),
    h("button", { type: "submit" }, "Add user"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const result = await post(`/api/v1/admin/accounts/${encodeURIComponent(account)}/users`,
        { user_id: userId.value.trim(), role: role.value });
      await reload();
      keyReveal(keySlot, `${result.user_id} @ ${account}`, result.user_key);
    } catch (error) {
      clear(keySlot, errorBox(error, "Adding the user failed"));
    }
  });
  return form;
}

async function accountDetail(container, account) {
  const keySlot = h("div", { class: "key-slot" });
  const path = `/api/v1/admin/accounts/${encodeURIComponent(account)}`;
  const usersBox = h("div");
  const reload = async (loaded = null) => {
    try {
      const users = await (loaded || get(`${path}/users`));
      clear(usersBox, usersTable(account, users, keySlot, () => reload()));
    } catch (error) {
      clear(usersBox, errorBox(error));
    }
  };
  const users = get(`${path}/users`);
  users.catch(() => null); // reported by reload()
  const usage = await get(`${path}/usage`).catch((e) => e);
  clear(container, h("h2", {}, `Account ${account}`), keySlot,
    usage instanceof Error ? errorBox(usage, "Usage") : usageView(usage),
    h("section", { class: "card", "aria-label": "Users" }, h("h3", {}, "Users"), usersBox,
      registerForm(account, keySlot, () => reload())),
    session.identity.role === "root" ? h("section", { class: "card danger-zone",
      "aria-label": "Delete the account" }, h("h3", {}, "Delete the account"),
    h("p", {}, "Removes its users, keys, files, index records and sessions."),
    confirmButton("Delete account", async () => {
      try {
        await api("DELETE", path);
        announce(`Account ${account} deleted.`);
        navigate("admin");
      } catch (error) {
        announce(`${error.code}: ${error.message}`);
      }
    })) : null);
  await reload(users);
}

function createAccountForm(keySlot, reload) {
  const accountId = h("input", { name: "account_id", required: true, pattern: ID_PATTERN,
    autocomplete: "off" });
  const adminId = h("input", { name: "admin_user_id", required: true, pattern: ID_PATTERN,
    autocomplete: "off" });
  const form = h("form", { class: "inline-form", "aria-label": "Create an account" },
    field("Account id", accountId), field("Admin user id", adminId),
    h("button", { type: "submit", class: "primary" }, "Create account"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const result = await post("/api/v1/admin/accounts", {
        account_id: accountId.value.trim(), admin_user_id: adminId.value.trim() });
      await reload(result.account_id);
      keyReveal(keySlot, `${result.admin_user_id} @ ${result.account_id}`, result.user_key);
      form.reset();
    } catch (error) {
      clear(keySlot, errorBox(error, "Creating the account failed"));
    }
  });
  return form;
}

export async function render(main, params) {
  const isRoot = session.identity.role === "root";
  const list = h("nav", { class: "list-pane", "aria-label": "Accounts" });
  const detail = h("section", { class: "detail" });
  const keySlot = h("div", { class: "key-slot" });
  clear(main, h("h1", { tabindex: "-1" }, "Admin"), keySlot,
    h("div", { class: "split" }, list, detail));

  let accounts = [];
  const loadAccounts = async () => {
    accounts = isRoot ? await get("/api/v1/admin/accounts")
      : [{ account_id: session.identity.account_id }];
  };
  const renderList = (selected) => clear(list,
    isRoot ? h("section", { "aria-label": "New account" }, createAccountForm(keySlot,
      async (created) => {
        await loadAccounts();
        renderList(created);
        navigate("admin", { account: created });
      })) : null,
    h("ul", { class: "plain accounts" }, accounts.map((a) => h("li", {},
      h("a", { href: routeHref("admin", { account: a.account_id }),
        "aria-current": a.account_id === selected ? "page" : null }, a.account_id),
      a.user_count !== undefined ? h("span", { class: "muted small" },
        ` ${a.user_count} users`) : null))));

  let listed = loadAccounts();
  const show = async (p) => {
    const selected = p.account || (isRoot ? "" : session.identity.account_id);
    // the account's detail loads alongside the list of accounts
    const detailed = selected ? accountDetail(detail, selected).catch((error) =>
      clear(detail, errorBox(error, selected))) : null;
    await listed;
    listed = null;
    renderList(selected);
    if (!selected) {
      clear(detail, h("p", { class: "muted" }, accounts.length
        ? "Choose an account." : "No accounts yet: create one."));
    } else {
      await detailed;
    }
    ready("admin");
  };
  clear(detail, spinner());
  await show(params);
  return { update: show };
}
