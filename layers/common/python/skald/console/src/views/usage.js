// Usage: what the meters recorded, as charts. Everyone sees today's cards and the daily LLM
// tokens (OpenViking's console views: a user their own, an admin the account); admins and
// root also see the account's series by day (requests, bytes, texts embedded) and can
// download the billing CSV. The range and root's account live in the hash
// (#/usage?days=30&account=acme), so a reload shows the same charts.
import { credentials, get } from "../api.js";
import { navigate, ready, session } from "../shell.js";
import { clear, errorBox, facts, field, formatBytes, h, spinner } from "../dom.js";

const RANGES = [["7", "7 days"], ["30", "30 days"], ["90", "90 days"]];
const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const HEIGHT = 160;
const PAD = 28;

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) if (c) el.append(c);
  return el;
}

function isoDay(date) {
  return date.toISOString().slice(0, 10);
}

function daysBack(n) {
  const today = new Date();
  const out = [];
  for (let i = n - 1; i >= 0; i -= 1) out.push(isoDay(new Date(today.getTime() - i * 864e5)));
  return out;
}

const plain = (n) => Number(n || 0).toLocaleString("en");

/** A bar chart of one value per day, with the numbers in a table for screen readers. */
function barChart(id, title, days, values, format = plain) {
  const max = Math.max(1, ...values);
  const step = (WIDTH - PAD) / days.length;
  const bars = days.map((day, i) => {
    const height = Math.round((values[i] / max) * (HEIGHT - PAD));
    return svg("rect", { class: "bar", x: (PAD + i * step + 1).toFixed(1),
      y: HEIGHT - PAD / 2 - height, width: Math.max(1, step - 2).toFixed(1), height,
      "data-day": day, "data-value": values[i] },
    svg("title", {}, document.createTextNode(`${day}: ${format(values[i])}`)));
  });
  const axis = svg("line", { class: "axis", x1: PAD, y1: HEIGHT - PAD / 2,
    x2: WIDTH, y2: HEIGHT - PAD / 2 });
  const top = svg("text", { class: "tick", x: 0, y: 12 }, document.createTextNode(format(max)));
  const first = svg("text", { class: "tick", x: PAD, y: HEIGHT },
    document.createTextNode(days[0] || ""));
  const last = svg("text", { class: "tick", x: WIDTH, y: HEIGHT, "text-anchor": "end" },
    document.createTextNode(days[days.length - 1] || ""));
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img",
    "aria-labelledby": `${id}-title` }, axis, top, first, last, ...bars);
  const total = values.reduce((a, b) => a + b, 0);
  return h("figure", { class: "card usage-chart", id },
    h("figcaption", { id: `${id}-title` }, title, h("span", { class: "muted small" },
      ` total ${format(total)}`)),
    chart,
    h("table", { class: "sr-only" }, h("caption", {}, title),
      h("tbody", {}, days.map((d, i) => h("tr", {}, h("th", { scope: "row" }, d),
        h("td", {}, format(values[i])))))));
}

function perDay(items, days, pick) {
  const by = Object.fromEntries(days.map((d) => [d, 0]));
  for (const item of items) {
    if (item.period in by && pick(item)) by[item.period] += item.value;
  }
  return days.map((d) => by[d]);
}

function cards(summary) {
  const c = summary.context_counts;
  const t = summary.today_tokens;
  const r = summary.today_retrievals;
  return h("div", { class: "usage-cards" },
    h("section", { class: "card", id: "usage-context", "aria-label": "Context" },
      h("h3", {}, "Context"), facts([["Files", plain(c.files)], ["Memories", plain(c.memories)],
        ["Skills", plain(c.skills)], ["Total", plain(c.total)]])),
    h("section", { class: "card", id: "usage-today-tokens", "aria-label": "Tokens today" },
      h("h3", {}, "Tokens today"), facts([["LLM in", plain(t.vlm_input)],
        ["LLM out", plain(t.vlm_output)], ["Texts embedded", plain(t.embedding_input)],
        ["Total", plain(t.total)]])),
    h("section", { class: "card", id: "usage-today-retrievals", "aria-label": "Retrievals today" },
      h("h3", {}, "Retrievals today"), facts([["Find", plain(r.find)],
        ["Search", plain(r.search)], ["Total", plain(r.total)]])));
}

async function downloadCsv(account, days) {
  const path = `/api/v1/admin/accounts/${encodeURIComponent(account)}/usage.csv`;
  const url = new URL(window.location.pathname.replace(/\/console(\/.*)?$/, "") + path,
    window.location.origin);
  url.searchParams.set("from", `${days}d`);
  url.searchParams.set("granularity", "day");
  const headers = {};
  const creds = credentials();
  if (creds && creds.key) headers["X-API-Key"] = creds.key;
  if (creds && creds.account) headers["X-OpenViking-Account"] = creds.account;
  if (creds && creds.user) headers["X-OpenViking-User"] = creds.user;
  const response = await fetch(url, { headers, credentials: "omit", cache: "no-store" });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const link = h("a", { href: URL.createObjectURL(await response.blob()),
    download: `usage-${account}.csv` });
  document.body.append(link);
  link.click();
  link.remove();
}

function controls(params, account) {
  const range = h("select", { name: "days" }, RANGES.map(([value, label]) =>
    h("option", { value, selected: value === (params.days || "30") }, label)));
  const who = session.isRootKey
    ? h("input", { name: "account", value: account || "", autocomplete: "off" }) : null;
  const form = h("form", { class: "inline-form", "aria-label": "What to show" },
    field("Range", range), who ? field("Account", who) : null,
    h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    navigate("usage", { days: range.value, account: who ? who.value.trim() : "" });
  });
  return form;
}

export async function render(main, params) {
  const top = h("div");
  const body = h("div");
  clear(main, h("h1", { tabindex: "-1" }, "Usage"),
    h("p", { class: "muted" }, session.identity.role === "user"
      ? "Your usage, as the meters recorded it (UTC days)."
      : "The account's usage, as the meters recorded it (UTC days)."),
    top, body);

  const show = async (p) => {
    const days = Number(p.days || 30);
    const account = session.isRootKey ? (p.account || "") : session.identity.account_id;
    const canSeries = session.isRootKey || session.isDev || session.identity.role === "admin";
    clear(top, controls(p, account));
    if (session.isRootKey && !account) {
      clear(body, h("p", { class: "muted" }, "Name an account to see its usage."));
      ready("usage");
      return;
    }
    clear(body, spinner());
    const range = daysBack(days);
    const scope = session.isRootKey ? { account_id: account } : {};
    try {
      const [summary, tokens, usage] = await Promise.all([
        get("/api/v1/console/dashboard/summary", scope),
        get("/api/v1/console/tokens", { start_date: range[0],
          end_date: range[range.length - 1], ...scope }),
        canSeries ? get(`/api/v1/admin/accounts/${encodeURIComponent(account)}/usage`,
          { from: `${days}d`, granularity: "day" }) : null,
      ]);
      const tokenDays = tokens.items.map((i) => i.date);
      const charts = [
        barChart("chart-llm-tokens", "LLM tokens (in + out) per day", tokenDays,
          tokens.items.map((i) => i.vlm_input + i.vlm_output)),
      ];
      let totals = null;
      let csv = null;
      if (usage && usage.series) {
        const items = usage.series.items;
        charts.push(
          barChart("chart-requests", "Requests per day", range,
            perDay(items, range, (i) => i.unit === "requests")),
          barChart("chart-bytes-stored", "Bytes stored: change per day", range,
            perDay(items, range, (i) => i.unit === "bytes_stored"), formatBytes),
          barChart("chart-transfer", "Bytes uploaded and downloaded per day", range,
            perDay(items, range, (i) => i.unit === "bytes_uploaded" ||
              i.unit === "bytes_downloaded"), formatBytes),
          barChart("chart-embedded", "Texts embedded per day", range,
            perDay(items, range, (i) => i.unit === "texts_embedded")));
        const t = usage.series.totals;
        totals = h("section", { class: "card", id: "usage-totals", "aria-label": "Totals" },
          h("h3", {}, `Totals over ${days} days`),
          h("table", { class: "table" }, h("thead", {}, h("tr", {},
            h("th", { scope: "col" }, "Unit"), h("th", { scope: "col" }, "Value"))),
          h("tbody", {}, Object.keys(t).sort().map((unit) => h("tr", { dataset: { unit } },
            h("th", { scope: "row" }, unit),
            h("td", {}, unit.startsWith("bytes") ? formatBytes(t[unit]) : plain(t[unit])))))));
        csv = h("button", { type: "button", id: "usage-csv", onclick: async () => {
          try { await downloadCsv(account, days); } catch (error) {
            clear(body, errorBox(error, "The CSV could not download"));
          }
        } }, "Download CSV");
      }
      clear(body, cards(summary), csv, h("div", { class: "usage-charts" }, charts), totals);
    } catch (error) {
      clear(body, errorBox(error, "Usage could not load"));
    }
    ready("usage");
  };
  await show(params);
  return { update: show };
}
