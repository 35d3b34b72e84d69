// The public HTTP API, as any client calls it. The credentials live in this tab's session
// storage only (never a cookie, never the URL): closing the tab signs out, and no other site
// can make the browser send them.

const STORAGE_KEY = "skald.console.auth";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** {key} in api_key mode, {account, user} in dev mode; null when signed out. */
export function credentials() {
  try {
    return JSON.parse(sessionStorage.getItem(STORAGE_KEY) || "null");
  } catch {
    return null;
  }
}

export function saveCredentials(creds) {
  sessionStorage.setItem(STORAGE_KEY, JSON.stringify(creds));
}

export function forgetCredentials() {
  sessionStorage.removeItem(STORAGE_KEY);
}

function authHeaders(creds = credentials()) {
  const headers = {};
  if (!creds) return headers;
  if (creds.key) headers["X-API-Key"] = creds.key;
  if (creds.account) headers["X-OpenViking-Account"] = creds.account;
  if (creds.user) headers["X-OpenViking-User"] = creds.user;
  return headers;
}

let onUnauthenticated = () => {};
/** Called when the API answers 401 (the key was revoked or rotated). */
export function setUnauthenticatedHandler(fn) {
  onUnauthenticated = fn;
}

// The API is where the console is served, below the same path prefix (a gateway stage such
// as /prod, or none): /prod/console/ calls /prod/api/v1/...
const BASE = window.location.pathname.replace(/\/console(\/.*)?$/, "");

function buildUrl(path, query) {
  const url = new URL(BASE + path, window.location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v === null || v === undefined || v === "") continue;
    if (Array.isArray(v)) v.forEach((item) => url.searchParams.append(k, item));
    else url.searchParams.set(k, String(v));
  }
  return url;
}

async function errorFrom(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not an envelope (a proxy's page): the status says enough
  }
  const err = body && body.error ? body.error : {};
  return new ApiError(response.status, err.code || `HTTP_${response.status}`,
    err.message || response.statusText || "Request failed", err.details || null);
}

/**
 * Calls an /api/v1 route and returns the envelope's `result` (or the whole body with
 * {envelope: true}). Throws ApiError with the server's code and message.
 */
export async function api(method, path, { query, body, envelope = false, creds, signal } = {}) {
  const headers = authHeaders(creds);
  const init = { method, headers, signal, credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(buildUrl(path, query), init);
  if (!response.ok) {
    const error = await errorFrom(response);
    // 401 from Skald; a gateway's authorizer may deny a bad key with a bare 403 instead
    // (no envelope, so no PERMISSION_DENIED code from the API itself).
    const refused = response.status === 401 || error.code === "HTTP_403";
    if (refused && !creds) onUnauthenticated(error);
    throw error;
  }
  const data = await response.json();
  // /health and /ready answer plain JSON; every /api/v1 route answers an envelope.
  const isEnvelope = data && typeof data === "object" && ("result" in data || "error" in data);
  if (envelope || !isEnvelope) return data;
  if (data.status === "error") {
    const err = data.error || {};
    throw new ApiError(response.status, err.code, err.message, err.details);
  }
  return data.result;
}

export const get = (path, query, opts = {}) => api("GET", path, { ...opts, query });
export const post = (path, body, opts = {}) => api("POST", path, { ...opts, body });

/** The raw bytes of a file, as a Blob (content/download). */
export async function download(uri) {
  const response = await fetch(buildUrl("/api/v1/content/download", { uri }),
    { headers: authHeaders(), credentials: "omit", cache: "no-store" });
  if (!response.ok) throw await errorFrom(response);
  return response.blob();
}

/**
 * temp_upload with upload progress (fetch reports none): resolves to the temp_file_id.
 * `onProgress(loaded, total)` is called as bytes leave the browser.
 */
export function tempUpload(blob, filename, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", buildUrl("/api/v1/resources/temp_upload"));
    for (const [k, v] of Object.entries(authHeaders())) xhr.setRequestHeader(k, v);
    xhr.responseType = "json";
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable && onProgress) onProgress(event.loaded, event.total);
    });
    xhr.addEventListener("load", () => {
      const body = xhr.response || {};
      if (xhr.status >= 200 && xhr.status < 300 && body.status === "ok") {
        resolve(body.result.temp_file_id);
      } else {
        const err = body.error || {};
        reject(new ApiError(xhr.status, err.code || `HTTP_${xhr.status}`,
          err.message || "Upload failed", err.details || null));
      }
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "NETWORK", "Upload failed")));
    const form = new FormData();
    form.append("file", blob, filename);
    xhr.send(form);
  });
}
