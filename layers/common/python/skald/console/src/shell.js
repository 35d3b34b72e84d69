// What the views share with the shell (src/app.js): who is signed in and what they may do,
// the status line, the ready signal, and navigation. The views import this module, never the
// shell itself: the shell imports every view, so the views importing it back would make a
// circle.
import { routeHref } from "./dom.js";

// Which sections a caller sees follows what the API lets them do: the root key of api_key
// mode reaches admin, task and observer routes only; user keys reach their own data; account
// admins also manage their account; dev mode (loopback, no keys) reaches everything.
export const SECTIONS = [
  { view: "browse", label: "Browse", data: true },
  { view: "search", label: "Search", data: true },
  { view: "sessions", label: "Sessions", data: true },
  { view: "memories", label: "Memories", data: true },
  { view: "operations", label: "Operations", data: true, root: true },
  { view: "admin", label: "Admin", admin: true, root: true },
  { view: "audit", label: "Audit", admin: true, root: true },
  { view: "usage", label: "Usage", data: true, root: true },
];

/** Shared by the views: the identity /health reported and what the caller may do. */
export const session = {
  identity: null, // {account_id, user_id, role, auth_mode}
  get isRootKey() {
    return Boolean(this.identity) && this.identity.role === "root" &&
      this.identity.auth_mode !== "dev";
  },
  get isDev() {
    return Boolean(this.identity) && this.identity.auth_mode === "dev";
  },
  get canData() {
    return Boolean(this.identity) && !this.isRootKey;
  },
  get canAdmin() {
    return Boolean(this.identity) &&
      (this.identity.role === "root" || this.identity.role === "admin");
  },
};

export function allowed(section) {
  if (session.isRootKey) return Boolean(section.root);
  if (section.admin) return session.canAdmin;
  return Boolean(section.data);
}

export function homeView() {
  return session.isRootKey ? "admin" : "browse";
}

/** A short polite announcement for screen readers and a visible status line. */
export function announce(text) {
  document.getElementById("status").textContent = text;
}

/** Views call this once their first data is on screen; tests and the load bench wait on it. */
export function ready(view) {
  document.body.dataset.ready = view;
  document.body.dataset.readyMs = String(Math.round(performance.now()));
}

export function identityOf(health) {
  return { account_id: health.account_id, user_id: health.user_id, role: health.role,
    auth_mode: health.auth_mode };
}

// The shell's router, which renders the current hash again (set by the shell at start).
let rerender = () => {};

export function setRouter(route) {
  rerender = route;
}

export function navigate(view, params = {}) {
  const href = routeHref(view, params);
  // Not ready from this moment: the hashchange that renders the next view fires later, and
  // whoever waits on `ready` must not see the previous view's.
  delete document.body.dataset.ready;
  if (window.location.hash === href) rerender();
  else window.location.hash = href;
}
