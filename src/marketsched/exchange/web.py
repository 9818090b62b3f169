"""The exchange's market information page: one self-contained HTML document (no external
scripts, styles or fonts) served at ``/`` by :mod:`.api`, refreshing itself every two seconds
from the public ``GET /api/market`` and ``GET /api/market/history``.

In Egg mode (:mod:`.egg`) it shows too, from the public ``GET /api/egg/market``
(:func:`.info.egg_market`), each provider's reliability and record, its contracts by state, the
escrow held for them and its price table, compact (per resource bucket, runs of equal prices over
the slot columns; "withdrawn" once it left), and the exchange's contracts by state/escrow and
escrow held. It shows the exchange's settings and clock, the clearing price per CPU unit per slot of every
period over time (one line per CPU class, and the period's overall price), the last clearings
(volume, contracts, open interest) and the open book in aggregate (orders and CPU slots per
side and CPU class; no owner, no price). The market information needs no token: it is what the exchange publishes.

A party that pastes its token into the "Your orders" card also trades from the page: a user
submits requests (the bid language of Stößer 2009, section 3.4.1: value per CPU unit per slot,
CPU, memory, first and last slot, command), a provider offers one of its nodes (reserve price,
first and last slot), and either cancels its open orders. The token is kept only in the page's
memory (a reload asks for it again; never in ``localStorage``, ``sessionStorage``, a cookie or
the address). The party's own orders are refreshed with signed reads (``MarketSig``, as the
live market's page: the token is not sent), and the token itself goes only with an order or
cancellation the party submits. An order the exchange refuses shows its error, which names the
field. ``CSP``: only its own inline script and style, requests to its own origin only. The document's
frame, look and script helpers are the platform's (:mod:`marketsched.platform.web`).
"""

from marketsched.platform.web import csp, page

PAGE = page("marketsched grid exchange", r"""  #legend span { margin-right: 14px; }
  svg { width: 100%; height: 240px; }
  #trade label { display: inline-block; margin: 2px 10px 2px 0; }
  #trade input.num { width: 80px; }
  #trade input.cmd { width: 260px; }
  #token { width: 300px; }
  #order-error { color: #a50e0e; }
  #order-ok { color: #137333; }
""", r"""<header>
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
  <section class="wide" id="trade">
    <h2>Your orders <span class="muted" id="whoami"></span> <span class="muted" id="money"></span></h2>
    <div id="login">
      <input id="token" type="password" autocomplete="off" placeholder="paste your token">
      <button id="use-token">use token</button>
      <span class="muted">kept in this page's memory only (a reload asks again); sent only with an order or cancellation you submit</span>
    </div>
    <div id="request-form" hidden>
      <label>value <input id="r-value" class="num" type="number" min="0" step="any"></label>
      <label>CPU <input id="r-cpu" class="num" type="number" min="1" step="1" value="1"></label>
      <label>memory <input id="r-mem" class="num" type="number" min="0" step="1" value="0"></label>
      <label>first slot <input id="r-first" class="num" type="number" step="1"></label>
      <label>last slot <input id="r-last" class="num" type="number" step="1"></label>
      <label>command <input id="r-command" class="cmd" type="text"></label>
      <button id="submit-request">submit request</button>
      <span class="muted">value: the most you pay per CPU unit per slot</span>
    </div>
    <div id="offer-form" hidden>
      <label>node <select id="o-node"></select></label>
      <label>reserve <input id="o-reserve" class="num" type="number" min="0" step="any"></label>
      <label>first slot <input id="o-first" class="num" type="number" step="1"></label>
      <label>last slot <input id="o-last" class="num" type="number" step="1"></label>
      <button id="submit-offer">submit offer</button>
      <span class="muted">reserve: the least you take per CPU unit per slot</span>
    </div>
    <div><span id="order-error"></span><span id="order-ok"></span></div>
    <table id="mine-table" hidden><thead><tr><th>order</th><th>side</th><th>price</th><th>CPU</th><th>slots</th><th>state</th><th></th></tr></thead>
    <tbody id="mine"></tbody></table>
  </section>
  <section class="wide" id="egg" hidden>
    <h2>Egg providers <span class="muted" id="egg-summary"></span></h2>
    <table><thead><tr><th>provider</th><th>reliability</th><th>delivered / settled</th><th>contracts</th><th>escrow held</th><th>price table <span class="muted" id="egg-base"></span></th></tr></thead>
    <tbody id="egg-providers"></tbody></table>
    <div class="muted">price table: per resource bucket (one per line), runs of equal prices over the slot columns, "price x columns" ("-": not offered)</div>
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
""", r"""const COLOURS = ["#1a73e8", "#e8710a", "#188038", "#a142f4", "#d93025", "#12b5cb", "#9aa0a6"];
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
// ---- Egg mode: each provider's reliability, record, contracts by state, escrow held and table (compact)
function egg(e) {
  const states = (c) => Object.entries(c).map(([k, n]) => k + " " + n).join(", ") || "none";
  const table = (t) => t === null ? "withdrawn (left)" : t.map((row) => row.map(([p, n]) => (p === null ? "-" : fmt(p)) + " x " + n).join(", ")).join(" | ");
  rows($("egg-providers"), e.providers, (p) => [p.provider, fmt(p.reliability), p.completed + " / " + p.settled,
    states(p.contracts), fmt(p.escrow_held, 2), table(p.table)], 6);
  $("egg-base").textContent = e.providers.length ? "(from slot " + e.providers[0].base_slot + ")" : "";
  $("egg-summary").textContent = "contracts: " + states(e.contracts) + "; escrow held " + fmt(e.escrow_held.amount, 2) + " (" + e.escrow_held.count + ")";
}
// ---- the party's own orders: the token only in memory, reads signed, the token sent only with a submission
let party = null;  // {token, key, keyId, role, name}: this page's memory only
async function signedGet(path) {
  const r = await fetch(path, {headers: {"Authorization": await signature(party, path)},
                               credentials: "omit", cache: "no-store", redirect: "error"});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.status);
  return body;
}
async function send(method, path, body) {
  const r = await fetch(path, {method: method, headers: {"Authorization": "Bearer " + party.token, "Content-Type": "application/json"},
                               body: JSON.stringify(body), credentials: "omit", cache: "no-store", redirect: "error"});
  const out = await r.json();
  if (!r.ok) throw new Error(out.error || r.status);
  return out;
}
async function login() {
  const tok = $("token").value.trim();
  $("token").value = "";
  $("order-error").textContent = "";
  delete document.body.dataset.party;
  if (!tok) return;
  if (!window.crypto || !crypto.subtle) { $("order-error").textContent = "this page needs https, or http on 127.0.0.1 or localhost (the browser's Web Crypto)"; return; }
  party = {token: tok, ...(await pageKey(tok))};
  try {
    const me = await signedGet("/api/me");
    party.role = me.role; party.name = me.name;
  } catch (e) { party = null; $("order-error").textContent = String(e.message || e); return; }
  $("login").hidden = true;
  $("whoami").textContent = "(" + party.role + " " + party.name + ")";
  $("request-form").hidden = party.role !== "user";
  $("offer-form").hidden = party.role !== "provider";
  $("mine-table").hidden = false;
  if (party.role === "provider") {
    let nodes;
    try { nodes = (await signedGet("/api/nodes")).filter((n) => n.left_t === null); }
    catch (e) { $("order-error").textContent = String(e.message || e); return; }
    $("o-node").replaceChildren(...nodes.map((n) => { const o = document.createElement("option"); o.value = n.name; o.textContent = n.name + " (" + n.cpu + " CPU)"; return o; }));
  }
  const slot = Number($("slot").textContent) || 0;
  for (const p of ["r-", "o-"]) { $(p + "first").value = slot + 2; $(p + "last").value = slot + 4; }
  document.body.dataset.party = party.role + " " + party.name;  // the form is filled: the page is ready for this party
  mine();
}
$("use-token").addEventListener("click", login);
$("token").addEventListener("keydown", (e) => { if (e.key === "Enter") login(); });
const num = (id) => { const v = $(id).value.trim(); return v === "" ? null : Number(v); };
async function submit(path, body) {
  $("order-error").textContent = ""; $("order-ok").textContent = "";
  try {
    const o = await send("POST", path, body);
    $("order-ok").textContent = o.side + " " + o.id + " " + o.state;
  } catch (e) { $("order-error").textContent = String(e.message || e); }
  mine();
}
$("submit-request").addEventListener("click", () => submit("/api/requests", {value: num("r-value"), cpu: num("r-cpu"), mem: num("r-mem"),
  first_slot: num("r-first"), last_slot: num("r-last"), command: $("r-command").value}));
$("submit-offer").addEventListener("click", () => submit("/api/offers", {node: $("o-node").value, reserve: num("o-reserve"),
  first_slot: num("o-first"), last_slot: num("o-last")}));
$("mine").addEventListener("click", async (e) => {
  const id = e.target.dataset && e.target.dataset.cancel;
  if (!id) return;
  $("order-error").textContent = ""; $("order-ok").textContent = "";
  try { const o = await send("POST", "/api/orders/" + id + "/cancel", {}); $("order-ok").textContent = o.side + " " + o.id + " " + o.state; }
  catch (err) { $("order-error").textContent = String(err.message || err); }
  mine();
});
// one read of the party's orders at a time, so an older response never renders after a newer
// one: a call while one is in flight (a submission, a cancellation, the login) makes one more
// read after it, which sees what the call followed
const mine = serialized(readMine);
async function readMine() {
  const p = party;
  if (!p) return;
  try {
    const orders = (await signedGet("/api/orders?limit=20")).reverse();
    if (p.role === "user") {
      const b = await signedGet("/api/balance");
      if (party !== p) return;
      $("money").textContent = "balance " + fmt(b.balance) + ", committed " + fmt(b.committed) + ", available " + fmt(b.available) + (b.deposits_required ? " (requests must be covered)" : " (trading on credit)");
    }
    if (party !== p) return;  // another party since: its own read renders
    const el = $("mine");
    el.innerHTML = orders.length ? orders.map((o) => "<tr data-order='" + o.id + "'>" + [o.id, o.side, fmt(o.value), o.cpu, o.first_slot + "-" + o.last_slot, o.state]
      .map((c) => "<td>" + esc(c) + "</td>").join("") + "<td>" + (o.state === "open" ? "<button data-cancel='" + o.id + "'>cancel</button>" : "") + "</td></tr>").join("")
      : "<tr><td class='muted' colspan='7'>none</td></tr>";
  } catch (e) { if (party === p) $("order-error").textContent = String(e.message || e); }
}
// the market's own reads likewise one at a time: a tick while one is in flight is skipped
const market = serialized(readMarket);
function refresh() {
  if (!mine.busy()) mine();  // (a tick while the orders are being read adds no read after it)
  if (!market.busy()) market();
}
async function readMarket() {
  try {
    const [m, history] = await Promise.all([get("/api/market"), get("/api/market/history?limit=200")]);
    $("error").textContent = "";
    $("mech").textContent = m.mechanism + ", slots of " + m.slot_seconds + " s, " +
      (m.mechanism === "egg" ? "an award at each bid (no clearing)" : "clearing every " + m.period_seconds + " s");
    $("slot").textContent = m.slot;
    $("period").textContent = m.last ? m.last.period : "-";
    const traded = history.filter((h) => h.price !== null);
    $("price").textContent = traded.length ? fmt(traded[traded.length - 1].price) : "-";
    rows($("book"), m.open_book, (b) => [b.side, b.cpu, b.orders, b.cpu_slots], 4);
    rows($("periods"), history.slice(-10).reverse(), (h) => [h.period, fmt(h.t, 1), h.contracts, fmt(h.volume, 2), fmt(h.price), h.open_interest], 6);
    chart(history, m.t);
    $("egg").hidden = m.mechanism !== "egg";
    if (m.mechanism === "egg") egg(await get("/api/egg/market"));
    $("updated").textContent = new Date().toLocaleTimeString();
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (e) {
    $("error").textContent = "cannot reach the exchange: " + e;
  }
}
refresh();
setInterval(refresh, 2000);
""")

CSP = csp(PAGE)
