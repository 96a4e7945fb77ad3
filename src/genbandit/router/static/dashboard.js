// The router's dashboard: polls /dashboard/data and draws it. No framework, nothing loaded from elsewhere.
"use strict";

const POLL_MS = 2000;
const RECENT_ROWS = 15;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
const SVG_NS = "http://www.w3.org/2000/svg";
const W = 480, H = 220, LEFT = 52, RIGHT = 10, TOP = 10, BOTTOM = 26;

const colorOf = {};
function color(name) {
  if (!(name in colorOf)) colorOf[name] = COLORS[Object.keys(colorOf).length % COLORS.length];
  return colorOf[name];
}

// ---------------------------------------------------------------- the key
function takeKeyFromAddress() {
  const match = /(?:^#|&)key=([^&]*)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem("genbandit-key", decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function askForKey(message) {
  document.getElementById("status").textContent = message;
  document.getElementById("key-form").hidden = false;
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("genbandit-key", document.getElementById("key-input").value.trim());
    document.getElementById("key-form").hidden = true;
    poll();
  });
  takeKeyFromAddress();
  poll();
});

// ---------------------------------------------------------------- polling
let timer = null;
async function poll() {
  clearTimeout(timer);
  const key = sessionStorage.getItem("genbandit-key");
  if (!key) {
    askForKey("Enter a key that may read the router's stats.");
    return;
  }
  try {
    const response = await fetch("/dashboard/data", { headers: { authorization: "Bearer " + key }, cache: "no-store" });
    const body = await response.json();
    if (!response.ok) {
      const message = (body.error && body.error.message) || response.statusText;
      if (response.status === 401) {
        askForKey(`${response.status}: ${message}`);
        return;
      }
      throw new Error(`${response.status}: ${message}`);
    }
    document.getElementById("status").textContent = "";
    render(body);
  } catch (error) {
    document.getElementById("status").textContent = `Could not read the router: ${error.message}`;
  }
  timer = setTimeout(poll, POLL_MS);
}

// ---------------------------------------------------------------- formatting
function fixed(x, digits) { return x === null || x === undefined ? "-" : x.toFixed(digits); }
function amount(x) {
  if (x === null || x === undefined) return "-";
  const a = Math.abs(x);
  return a === 0 ? "0" : a >= 100 ? x.toFixed(0) : a >= 1 ? x.toFixed(2) : x.toPrecision(3);
}
function clock(t) {
  const d = new Date(t * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((v) => String(v).padStart(2, "0")).join(":");
}

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function modelCell(name) {
  const td = el("td", undefined, { "data-k": "name" });
  const swatch = el("span", undefined, { class: "swatch" });
  swatch.style.background = color(name);
  td.append(swatch, document.createTextNode(name));
  return td;
}

// ---------------------------------------------------------------- the page
function render(data) {
  const s = data.stats;
  const summary = { policy: s.policy, policy_rounds: String(s.policy_rounds), decisions: String(s.decisions), feedback: String(s.feedback),
    store: s.store, replica: s.replica, updated: clock(data.now) };
  for (const [k, v] of Object.entries(summary)) document.querySelector(`#summary [data-k="${k}"]`).textContent = v;
  document.getElementById("interval-head").textContent = `${Math.round(data.confidence * 100)}% interval`;

  const rows = s.models.map((m) => {
    const extra = data.models[m.name];
    const tr = el("tr", undefined, { "data-model": m.name });
    const share = s.decisions ? `${((100 * m.pulls) / s.decisions).toFixed(1)}%` : "-";
    const interval = extra.interval ? `[${fixed(extra.interval[0], 4)}, ${fixed(extra.interval[1], 4)}]` : "-";
    tr.append(modelCell(m.name), el("td", String(m.pulls), { "data-k": "pulls" }), el("td", share, { "data-k": "share" }),
      el("td", String(m.feedback), { "data-k": "feedback" }), el("td", fixed(m.mean_reward, 4), { "data-k": "mean_reward" }),
      el("td", interval, { "data-k": "interval" }), el("td", amount(m.cost), { "data-k": "cost" }), el("td", amount(extra.spend), { "data-k": "spend" }));
    return tr;
  });
  document.querySelector("#models tbody").replaceChildren(...rows);

  const names = s.models.map((m) => m.name);
  const [low, high] = data.reward_range;
  chart("chart-decisions", data.series, names, (p) => p.pulls, null, null);
  chart("chart-reward", data.series, names, (p) => p.mean_reward, (p) => p.interval, [low, high]);
  chart("chart-spend", data.series, names, (p) => p.spend, null, null);

  const recent = s.recent.slice(0, RECENT_ROWS).map((r) => {
    const tr = el("tr", undefined, { "data-decision": r.decision_id });
    tr.append(el("td", clock(r.created)), modelCell(r.model), el("td", r.forced ? "forced" : "routed"),
      el("td", fixed(r.reward, 4), { "data-k": "reward" }), el("td", r.decision_id));
    return tr;
  });
  document.querySelector("#recent tbody").replaceChildren(...recent);
}

// ---------------------------------------------------------------- charts (inline SVG)
function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function chart(id, series, names, value, band, yRange) {
  const root = document.getElementById(id);
  const nodes = [];
  const t0 = series.length ? series[0].t : 0;
  const t1 = series.length ? Math.max(series[series.length - 1].t, t0 + 1) : 1;
  let [y0, y1] = yRange || [0, 0];
  if (yRange) {  // from the lowest point drawn (to a tenth of the range) to the top of the range
    let lowest = y1;
    for (const p of series) for (const n of names) if (p.models[n]) for (const v of [value(p.models[n])].concat(band(p.models[n]) || [])) if (v !== null) lowest = Math.min(lowest, v);
    const step = (y1 - y0) / 10;
    y0 = Math.min(y1 - step, y0 + Math.floor((lowest - y0) / step) * step);
  } else {
    for (const p of series) for (const n of names) if (p.models[n]) y1 = Math.max(y1, value(p.models[n]) || 0);
    y1 = y1 > 0 ? y1 * 1.05 : 1;
  }
  const x = (t) => LEFT + ((t - t0) / (t1 - t0)) * (W - LEFT - RIGHT);
  const y = (v) => TOP + (1 - (v - y0) / (y1 - y0)) * (H - TOP - BOTTOM);

  for (const f of [0, 0.5, 1]) {
    const v = y0 + f * (y1 - y0);
    nodes.push(svg("line", { class: "axis", x1: LEFT, x2: W - RIGHT, y1: y(v), y2: y(v) }));
    const label = svg("text", { x: LEFT - 4, y: y(v) + 3, "text-anchor": "end" });
    label.textContent = amount(v);
    nodes.push(label);
  }
  if (series.length) {
    for (const [t, anchor] of [[t0, "start"], [t1, "end"]]) {
      const label = svg("text", { x: x(t), y: H - 8, "text-anchor": anchor });
      label.textContent = clock(t);
      nodes.push(label);
    }
  }
  for (const name of names) {
    const points = series.filter((p) => p.models[name] && value(p.models[name]) !== null);
    if (!points.length) continue;
    if (band) {
      const withBand = points.filter((p) => band(p.models[name]));
      if (withBand.length > 1) {
        const upper = withBand.map((p) => `${x(p.t).toFixed(1)},${y(band(p.models[name])[1]).toFixed(1)}`);
        const lower = withBand.map((p) => `${x(p.t).toFixed(1)},${y(band(p.models[name])[0]).toFixed(1)}`).reverse();
        nodes.push(svg("polygon", { class: "band", fill: color(name), points: upper.concat(lower).join(" "), "data-model": name }));
      }
    }
    const coords = points.map((p) => `${x(p.t).toFixed(1)},${y(value(p.models[name])).toFixed(1)}`);
    const line = svg("polyline", { class: "series", stroke: color(name), points: coords.join(" "), "data-model": name, "data-points": coords.length });
    const title = svg("title", {});
    title.textContent = name;
    line.append(title);
    nodes.push(line);
    const last = points[points.length - 1];
    nodes.push(svg("circle", { cx: x(last.t), cy: y(value(last.models[name])), r: 3, fill: color(name) }));
  }
  root.replaceChildren(...nodes);
}
