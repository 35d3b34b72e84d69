// Sign in: an API key (api_key mode), or in dev mode (a loopback server with no keys) the
// account and user the headers name. The credentials go to session storage only.
import { get, saveCredentials } from "../api.js";
import { announce, homeView, identityOf, navigate, ready, session } from "../shell.js";
import { clear, errorBox, field, h } from "../dom.js";

export async function render(main, params) {
  // Behind a gateway /health may need a key too: then this is api_key mode.
  const health = await get("/health").catch(() => ({ auth_mode: "api_key" }));
  const dev = health.auth_mode === "dev";
  const errorSlot = h("div", { "aria-live": "assertive" });
  const controls = dev ? {
    account: h("input", { name: "account", value: "default", autocomplete: "off",
      required: true, pattern: "[A-Za-z0-9_.@\\-]+" }),
    user: h("input", { name: "user", value: "default", autocomplete: "off", required: true,
      pattern: "[A-Za-z0-9_.@\\-]+" }),
  } : {
    key: h("input", { name: "key", type: "password", autocomplete: "off", required: true,
      spellcheck: "false" }),
  };
  const form = h("form", { class: "card narrow", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title", tabindex: "-1" }, "Sign in"),
    dev
      ? h("p", {}, "This server runs in dev mode (loopback only, no keys). Choose the account " +
          "and user to act as; every request carries them as headers.")
      : h("p", {}, "Paste an API key: a user key shows your data; an account admin's key " +
          "also manages the account; the root key manages accounts only."),
    dev ? [field("Account", controls.account), field("User", controls.user)]
      : field("API key", controls.key, "Kept in this tab only, until you sign out or close it."),
    errorSlot,
    h("button", { type: "submit", class: "primary" }, "Sign in"));

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(errorSlot);
    const creds = dev
      ? { account: controls.account.value.trim(), user: controls.user.value.trim() }
      : { key: controls.key.value.trim() };
    try {
      const who = await get("/health", {}, { creds });
      if (!who.account_id) {
        clear(errorSlot, errorBox({ code: "UNAUTHENTICATED",
          message: "The key was not accepted." }));
        return;
      }
      session.identity = identityOf(who);
      saveCredentials({ ...creds, identity: session.identity });
      announce(`Signed in as ${who.user_id} @ ${who.account_id}.`);
      const next = params.next && params.next.startsWith("/") ? params.next : null;
      if (next && !next.startsWith("/signin")) window.location.hash = next;
      else navigate(homeView());
    } catch (error) {
      clear(errorSlot, errorBox(error, "Sign-in failed"));
    }
  });
  clear(main, form);
  (dev ? controls.account : controls.key).focus();
  ready("signin");
  return null;
}
