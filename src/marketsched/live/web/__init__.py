"""The live market's web page: one self-contained HTML document (no external scripts, styles
or fonts), refreshing itself every second from ``GET /api/market``.

It is a Python string rather than a data file so that it ships with every kind of install
(package data would need a packaging rule).

The token is pasted into the page's form and kept only in the page's memory, as a
non-extractable Web Crypto key derived from it: never in ``localStorage``, ``sessionStorage``,
a cookie or the address, and never sent. Each refresh is a read signed with that key
(``MarketSig``, see :mod:`marketsched.platform.http`), so a process that takes the broker's port
while the broker is down neither receives the token from an open page nor finds it in the
browser when it serves its own page at that address. A reload asks for the token again.
``CSP`` is the page's Content-Security-Policy: only its own inline script and style (by hash),
requests to its own origin only. The document's frame, look and script helpers are the
platform's (:mod:`marketsched.platform.web`).
"""

from marketsched.platform.web import csp, page

PAGE = page("marketsched live market", r"""  td.cmd { font-family: ui-monospace, monospace; max-width: 260px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  .state-running { color: #137333; font-weight: 600; }
  .state-preempted { color: #b06000; }
  .state-held { color: #a50e0e; }
  #login input { width: 360px; }
  svg { width: 100%; height: 200px; }
""", r"""<header>
  <h1>marketsched live market</h1>
  <span>price <span id="price" class="big">-</span> <span class="muted">per second</span></span>
  <span id="mech"></span>
  <span>running <b id="nrunning">-</b> / <span id="slots">-</span> slots</span>
  <span>queued <b id="nqueued">-</b></span>
  <span class="muted">user <b id="me">-</b></span>
  <span class="muted">updated <span id="updated">never</span></span>
</header>
<main>
  <section class="wide" id="login" hidden>
    <h2>Token</h2>
    <input id="token" type="password" autocomplete="off" placeholder="paste your token">
    <button id="save">use token</button>
    <p class="muted">The token stays in this page's memory (a reload asks again) and is never sent: each refresh is signed with it.</p>
  </section>
  <section class="wide"><div id="error"></div>
    <h2>Price history</h2>
    <svg id="chart" viewBox="0 0 800 200" preserveAspectRatio="none" aria-label="price history"></svg>
  </section>
  <section class="wide" id="dlgm" hidden>
    <h2>Nodes <span class="muted">(each node's running job and its queue, WSPT order; on Slurm, each node's Slurm host)</span></h2>
    <table><thead><tr><th>node</th><th>running</th><th>until</th><th>queue (job, user, weight per second of run time)</th></tr></thead>
    <tbody id="nodes"></tbody></table>
  </section>
  <section class="wide" id="ees" hidden>
    <h2>Queue, head first <span class="muted">(the head runs if its value is at least the delay it causes the waiting jobs; else it is discarded)</span></h2>
    <p>discard threshold of the head: <b id="threshold">-</b> <span class="muted" id="eesnote"></span></p>
    <table><thead><tr><th>job</th><th>user</th><th>value</th><th>delay cost/s</th><th>run time s</th><th>CPUs</th></tr></thead>
    <tbody id="eesqueue"></tbody></table>
    <h2>Jobs <span class="muted">(running: <span id="eesrunning">-</span>)</span></h2>
    <table><thead><tr><th>job</th><th>user</th><th>value</th><th>state</th><th>note</th><th>command</th></tr></thead>
    <tbody id="eesjobs"></tbody></table>
  </section>
  <section>
    <h2>Running</h2>
    <table><thead><tr><th>job</th><th>user</th><th>bid</th><th>pays/s</th><th>ran s</th><th>charged</th><th>command</th></tr></thead>
    <tbody id="running"></tbody></table>
  </section>
  <section>
    <h2>Queue <span id="qnote" class="muted"></span></h2>
    <table><thead><tr><th>job</th><th>user</th><th>bid</th><th>state</th><th>ran s</th><th>command</th></tr></thead>
    <tbody id="queue"></tbody></table>
  </section>
  <section>
    <h2>Balances</h2>
    <table><thead><tr><th>account</th><th>balance</th><th>accruing</th></tr></thead>
    <tbody id="balances"></tbody></table>
  </section>
  <section>
    <h2>Recently ended</h2>
    <table><thead><tr><th>job</th><th>user</th><th>state</th><th>exit</th><th>charged</th><th>command</th></tr></thead>
    <tbody id="recent"></tbody></table>
  </section>
</main>
""", r"""let key = null;  // {key, keyId}: the signing key (not extractable) and its id; the token itself is not kept
async function useToken(tok) {
  key = null;
  if (!tok) return;
  if (!window.crypto || !crypto.subtle) {
    $("error").textContent = "this page needs https, or http on 127.0.0.1 or localhost (the browser's Web Crypto)";
    return;
  }
  key = await pageKey(tok);
}
async function signedGet(path) {
  return fetch(path, {headers: {"Authorization": await signature(key, path)},
                      credentials: "omit", cache: "no-store", redirect: "error"});
}
async function login() {
  const tok = $("token").value.trim();
  $("token").value = "";
  await useToken(tok);
  refresh();
}
$("save").onclick = login;
$("token").onkeydown = (e) => { if (e.key === "Enter") login(); };
function rows(el, items, cells) {
  el.innerHTML = items.length ? items.map((it) => "<tr data-job='" + (it.id ?? "") + "'>" + cells(it).map((c) => "<td" + (c.cls ? " class='" + c.cls + "'" : "") + ">" + esc(c.v ?? c) + "</td>").join("") + "</tr>").join("")
    : "<tr><td class='muted' colspan='7'>none</td></tr>";
}
function chart(history, now) {
  const svg = $("chart");
  if (!history.length) { svg.innerHTML = ""; return; }
  const t0 = history[0].t, t1 = Math.max(now, history[history.length - 1].t, t0 + 1);
  const pmax = Math.max(...history.map((h) => h.price), 1) * 1.15;
  const X = (t) => 40 + (t - t0) / (t1 - t0) * 750, Y = (p) => 185 - p / pmax * 170;
  let d = "M" + X(history[0].t) + "," + Y(history[0].price);
  for (let i = 1; i < history.length; i++) d += " H" + X(history[i].t) + " V" + Y(history[i].price);
  d += " H" + X(t1);
  const ticks = [0, pmax / 2, pmax].map((p) => "<text x='2' y='" + (Y(p) + 4) + "' font-size='11' fill='#778'>" + p.toFixed(2) + "</text>"
    + "<line x1='40' x2='790' y1='" + Y(p) + "' y2='" + Y(p) + "' stroke='#eceef2'/>").join("");
  svg.innerHTML = ticks + "<path id='price-line' d='" + d + "' fill='none' stroke='#1a73e8' stroke-width='2'/>"
    + "<text x='790' y='198' font-size='11' fill='#778' text-anchor='end'>market time " + t1.toFixed(0) + " s</text>";
}
const refresh = serialized(readMarket);  // one read at a time (see marketsched.platform.web)
async function readMarket() {
  if (!key) { $("login").hidden = false; return; }
  const used = key;
  try {
    const r = await signedGet("/api/market");
    const m = await r.json();
    if (used !== key) return;  // the token changed meanwhile: the next read uses the new one
    if (!r.ok) {
      $("error").textContent = m.error;
      if (r.status === 401) { key = null; $("login").hidden = false; }
      return;
    }
    $("error").textContent = ""; $("login").hidden = true;
    const p = m.price;
    $("price").textContent = fmt(p.price, 3);
    $("mech").textContent = p.mechanism.toUpperCase() + " / " + (p.pricing === "kth" ? "k-th price" : "first price");
    $("nrunning").textContent = p.running; $("slots").textContent = p.slots; $("nqueued").textContent = p.queued;
    $("me").textContent = m.me.name + (m.me.admin ? " (admin)" : "");
    const running = m.active.filter((j) => j.state === "running");
    const queue = m.active.filter((j) => j.state !== "running").sort((a, b) => b.bid - a.bid || a.id - b.id);
    rows($("running"), running, (j) => [j.id, j.owner, fmt(j.bid, 2), fmt(j.rate, 3), fmt(j.run_seconds, 1), fmt(j.accrued, 3), {v: j.command, cls: "cmd"}]);
    const shown = m.active.length, total = m.active_total;
    $("qnote").textContent = shown < total ? "(the newest " + shown + " of " + total + " active jobs)" : "";
    rows($("queue"), queue, (j) => [j.id, j.owner, fmt(j.bid, 2), {v: j.state, cls: "state-" + j.state}, fmt(j.run_seconds, 1), {v: j.command, cls: "cmd"}]);
    rows($("recent"), m.recent.slice().reverse(), (j) => [j.id, j.owner, j.state, j.exit_code ?? "-", fmt(j.charged, 3), {v: j.command, cls: "cmd"}]);
    const b = m.balance;
    const bal = b.users ? Object.entries(b.users).map(([u, v]) => ({id: "", name: u, ...v})).concat([{id: "", name: "provider revenue", balance: b.revenue, accruing: null}, {id: "", name: "total deposits", balance: b.deposits, accruing: null}])
      : [{id: "", name: b.user, balance: b.balance, accruing: b.accruing}];
    rows($("balances"), bal, (x) => [x.name, fmt(x.balance, 3), fmt(x.accruing, 3)]);
    $("dlgm").hidden = !m.dlgm;
    if (m.dlgm) {  // a DLGM or P-DLGM market: its nodes' queues
      $("mech").textContent = m.dlgm.mechanism.toUpperCase() + " / compensations";
      rows($("nodes"), m.dlgm.nodes, (n) => [n.host ? n.node + " (Slurm node " + n.host + ")" : n.node, n.running ? n.running.id + " (" + n.running.owner + ", weight " + fmt(n.running.weight, 2) + ")" : "idle",
        n.running ? fmt(n.running.ends, 1) : "-", n.queue.map((x) => x.id + " (" + x.owner + ", " + fmt(x.ratio, 3) + ")").join(", ") || "-"]);
    }
    $("ees").hidden = !m.ees;
    if (m.ees) {  // an EES or relaxed-EES market: its queue and the head's discard threshold
      const q = m.ees;
      $("mech").textContent = q.mechanism.toUpperCase() + " / expected externality";
      $("threshold").textContent = q.head_threshold === null ? "-" : fmt(q.head_threshold, 3);
      $("eesnote").textContent = q.head_threshold === null && q.queue.length ? "(relaxed EES: the delays of two greedy schedules, decided at each decision)" : "";
      $("eesrunning").textContent = q.running.join(", ") || "-";
      rows($("eesqueue"), q.queue, (x) => [x.id, x.owner, fmt(x.value, 2), fmt(x.delay_cost, 3), fmt(x.runtime, 1), x.cpus]);
      rows($("eesjobs"), q.jobs.slice().reverse(), (j) => [j.id, j.owner, fmt(j.bid, 2), {v: j.state, cls: "state-" + j.state}, j.note, {v: j.command, cls: "cmd"}]);
    }
    chart(m.history, p.t);
    $("updated").textContent = new Date().toLocaleTimeString();
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (e) {
    $("error").textContent = "cannot reach the market: " + e;
  }
}
refresh();
setInterval(() => { if (!refresh.busy()) refresh(); }, 1000);  // a tick while a read is in flight is skipped
""")

CSP = csp(PAGE)
