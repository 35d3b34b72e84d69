// The console shell: who is signed in, which sections they may open, and the hash router
// (#/view?params) that renders one view at a time into <main>.
//
// These sources are bundled into ../console.js (scripts/console/build.mjs, `make
// console-assets`): one request instead of a cascade of module fetches. The vendored
// libraries stay separate and load on first use; their import paths ("./vendor/...") are
// relative to the bundle.
import { credentials, forgetCredentials, get, setUnauthenticatedHandler } from "./api.js";
import { clear, errorBox, h, routeHref, spinner } from "./dom.js";
import {
  SECTIONS, allowed, announce, homeView, identityOf, navigate, ready, session, setRouter,
} from "./shell.js";
import * as admin from "./views/admin.js";
import * as audit from "./views/audit.js";
import * as usage from "./views/usage.js";
import * as browse from "./views/browse.js";
import * as memories from "./views/memories.js";
import * as operations from "./views/operations.js";
import * as search from "./views/search.js";
import * as sessions from "./views/sessions.js";
import * as signin from "./views/signin.js";

const VIEWS = { signin, browse, search, sessions, memories, operations, admin, audit,
  usage };

const main = document.getElementById("main");

function parseHash() {
  const raw = window.location.hash.replace(/^#\/?/, "");
  const q = raw.indexOf("?");
  const view = (q < 0 ? raw : raw.slice(0, q)) || "";
  const params = Object.fromEntries(new URLSearchParams(q < 0 ? "" : raw.slice(q + 1)));
  return { view, params };
}

function renderChrome(current) {
  const nav = document.getElementById("nav");
  const who = document.getElementById("who");
  if (!session.identity) {
    clear(nav);
    clear(who);
    return;
  }
  const links = SECTIONS.filter(allowed).map((s) => h("a", {
    href: routeHref(s.view), "aria-current": s.view === current ? "page" : null,
  }, s.label));
  clear(nav, h("ul", {}, links.map((link) => h("li", {}, link))));
  const id = session.identity;
  const label = session.isRootKey ? "root key" :
    `${id.user_id} @ ${id.account_id} (${session.isDev ? "dev mode" : id.role})`;
  clear(who, h("span", { class: "muted", id: "who-label" }, label), " ",
    h("button", { type: "button", class: "link", onclick: signOut }, "Sign out"));
}

let renderToken = 0;
let mounted = null; // {name, instance}: the view on screen

function reset() {
  forgetCredentials();
  session.identity = null;
  mounted = null;
}

function signOut() {
  reset();
  announce("Signed out.");
  navigate("signin");
}

/** Reads who the stored credentials belong to; false when they no longer work. */
async function loadIdentity() {
  if (!credentials()) return false;
  const health = await get("/health");
  if (!health.account_id) return false;
  session.identity = identityOf(health);
  return true;
}

async function route() {
  const token = ++renderToken;
  const { view, params } = parseHash();
  delete document.body.dataset.ready;
  if (!session.identity && view !== "signin") {
    let known = false;
    const stored = credentials();
    if (stored && stored.identity) {
      // Who signed in is kept with the credentials, so a reload renders at once; a key
      // revoked since is refused by the first API call, and a 401 signs out.
      session.identity = stored.identity;
      known = true;
    } else {
      try {
        known = await loadIdentity();
      } catch {
        known = false;
      }
    }
    if (token !== renderToken) return;
    if (!known) {
      reset();
      const next = view ? window.location.hash.slice(1) : "";
      navigate("signin", next ? { next } : {});
      return;
    }
  }
  let name = VIEWS[view] ? view : (session.identity ? homeView() : "signin");
  const section = SECTIONS.find((s) => s.view === name);
  if (section && !allowed(section)) name = homeView();
  if (name !== view) {
    navigate(name, name === "signin" ? {} : params);
    return;
  }
  renderChrome(name);
  // Within one view (a tree click, a new query) the view updates itself in place and focus
  // stays where the person is; a new view takes focus to <main> for keyboard users.
  if (mounted && mounted.name === name && mounted.instance && mounted.instance.update) {
    try {
      await mounted.instance.update(params);
    } catch (error) {
      announce(`${error.code ? `${error.code}: ` : ""}${error.message}`);
      ready(name);
    }
    return;
  }
  const moved = mounted !== null;
  mounted = null;
  clear(main, spinner());
  try {
    const module = VIEWS[name];
    const title = SECTIONS.find((s) => s.view === name)?.label || "Sign in";
    document.title = `${title} · Skald Console`;
    const instance = await module.render(main, params,
      { isCurrent: () => token === renderToken });
    if (token !== renderToken) return;
    mounted = { name, instance };
    if (moved) main.focus({ preventScroll: true });
  } catch (error) {
    if (token !== renderToken) return;
    clear(main, errorBox(error, "This page could not load"));
    ready(name);
  }
}

function expired() {
  reset();
  announce("Your key is no longer accepted; sign in again.");
  navigate("signin");
}

setUnauthenticatedHandler(expired);

setRouter(route);
window.addEventListener("hashchange", route);
route();
