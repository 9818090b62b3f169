"""The exchange's market information page: one self-contained HTML document (no external
scripts, styles or fonts) served at ``/`` by :mod:`.api`, refreshing itself every two seconds
from the public ``GET /api/market`` and ``GET /api/market/history``.

It shows the exchange's settings and clock, the clearing price per CPU unit per slot of every
period over time (one line per CPU class, and the period's overall price), the last clearings
(volume, contracts, open interest) and the open book in aggregate (orders and CPU slots per
side and CPU class; no owner, no price). It needs no token: it shows only what the exchange
publishes. ``CSP``: only its own inline script and style, requests to its own origin only.
"""

from marketsched.live.web import STYLE, csp

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>marketsched grid exchange</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
""" + STYLE + r"""  #legend span { margin-right: 14px; }
  svg { width: 100%; height: 240px; }
</style>
</head>
<body>
<header>
  <h1>marketsched grid exchange</h1>
  <span>last price <span id="price" class="big">-</span> <span class="muted">per CPU unit per slot</span></span>
  <span id="mech"></span>
  <span>slot <b id="slot">-</b></span>
  <span>period <b id="period">-</b></span>
  <span class="muted">updated <span id="updated">never</span></span>
</header>
<main>
  <section class="wide"><div id="error"></div>
    <h2>Clearing prices over time</h2>
    <svg id="chart" viewBox="0 0 800 240" preserveAspectRatio="none" aria-label="clearing prices over time"></svg>
    <div id="legend" class="muted"></div>
  </section>
  <section>
    <h2>Open orders <span class="muted">(in aggregate)</span></h2>
    <table><thead><tr><th>side</th><th>CPU class</th><th>orders</th><th>CPU slots</th></tr></thead>
    <tbody id="book"></tbody></table>
  </section>
  <section>
    <h2>Last clearings</h2>
    <table><thead><tr><th>period</th><th>time s</th><th>contracts</th><th>volume</th><th>price</th><th>open interest</th></tr></thead>
    <tbody id="periods"></tbody></table>
  </section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const COLOURS = ["#1a73e8", "#e8710a", "#188038", "#a142f4", "#d93025", "#12b5cb", "#9aa0a6"];
const fmt = (x, d = 3) => (x === null || x === undefined) ? "-" : Number(x).toFixed(d);
function esc(s) { return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c])); }
function rows(el, items, cells, span) {
  el.innerHTML = items.length ? items.map((it) => "<tr>" + cells(it).map((c) => "<td>" + esc(c) + "</td>").join("") + "</tr>").join("")
    : "<tr><td class='muted' colspan='" + span + "'>none</td></tr>";
}
async function get(path) {
  const r = await fetch(path, {credentials: "omit", cache: "no-store", redirect: "error"});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.status);
  return body;
}
function chart(history, now) {
  const svg = $("chart");
  const series = {"all": []};
  for (const h of history) {
    if (h.price !== null) series["all"].push([h.t, h.price]);
    for (const [cpu, c] of Object.entries(h.classes)) (series[cpu] = series[cpu] || []).push([h.t, c.price]);
  }
  const points = Object.values(series).flat();
  if (!points.length) { svg.innerHTML = "<text x='400' y='120' text-anchor='middle' fill='#778'>no trade yet</text>"; $("legend").replaceChildren(); return; }
  const t0 = Math.min(...points.map((p) => p[0])), t1 = Math.max(now, t0 + 1);
  const pmax = Math.max(...points.map((p) => p[1]), 1e-9) * 1.15;
  const X = (t) => 45 + (t - t0) / (t1 - t0) * 745, Y = (p) => 220 - p / pmax * 205;
  let out = [0, pmax / 2, pmax].map((p) => "<text x='2' y='" + (Y(p) + 4) + "' font-size='11' fill='#778'>" + p.toFixed(2) + "</text>"
    + "<line x1='45' x2='790' y1='" + Y(p) + "' y2='" + Y(p) + "' stroke='#eceef2'/>").join("");
  const names = Object.keys(series).filter((k) => series[k].length);
  names.forEach((name, i) => {
    const pts = series[name], colour = name === "all" ? "#1d2330" : COLOURS[i % COLOURS.length];
    const d = pts.map((p, j) => (j ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join(" ");
    out += "<path class='series' data-series='" + esc(name) + "' d='" + d + "' fill='none' stroke='" + colour + "' stroke-width='" + (name === "all" ? 2.5 : 1.5) + "'" + (name === "all" ? " stroke-dasharray='5 3'" : "") + "/>";
    out += pts.map((p) => "<circle cx='" + X(p[0]).toFixed(1) + "' cy='" + Y(p[1]).toFixed(1) + "' r='2.5' fill='" + colour + "'/>").join("");
  });
  out += "<text x='790' y='238' font-size='11' fill='#778' text-anchor='end'>exchange time " + t1.toFixed(0) + " s</text>";
  svg.innerHTML = out;
  $("legend").replaceChildren(...names.map((name, i) => {  // colours set through the DOM: the CSP allows no style attribute
    const el = document.createElement("span");
    el.style.color = name === "all" ? "#1d2330" : COLOURS[i % COLOURS.length];
    el.textContent = "\u2501 " + (name === "all" ? "all classes (mean)" : name + " CPU");
    return el;
  }));
}
async function refresh() {
  try {
    const [m, history] = await Promise.all([get("/api/market"), get("/api/market/history?limit=200")]);
    $("error").textContent = "";
    $("mech").textContent = m.mechanism + ", slots of " + m.slot_seconds + " s, clearing every " + m.period_seconds + " s";
    $("slot").textContent = m.slot;
    $("period").textContent = m.last ? m.last.period : "-";
    const traded = history.filter((h) => h.price !== null);
    $("price").textContent = traded.length ? fmt(traded[traded.length - 1].price) : "-";
    rows($("book"), m.open_book, (b) => [b.side, b.cpu, b.orders, b.cpu_slots], 4);
    rows($("periods"), history.slice(-10).reverse(), (h) => [h.period, fmt(h.t, 1), h.contracts, fmt(h.volume, 2), fmt(h.price), h.open_interest], 6);
    chart(history, m.t);
    $("updated").textContent = new Date().toLocaleTimeString();
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (e) {
    $("error").textContent = "cannot reach the exchange: " + e;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
"""

CSP = csp(PAGE)
