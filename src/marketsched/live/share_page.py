"""The page of a running share market (``marketsched market share --serve HOST:PORT``): each job's
bid, the CPUs the rule gives it, the rule's and the delivered fraction of the jobs' CPU time, and
its payments, refreshed every second, on the platform's server
(:class:`marketsched.platform.server.Server`) as the live market's page is.

Routes: ``GET /`` the page; ``GET /api/health`` (no token); ``GET /api/share`` the market's state
(:meth:`marketsched.live.share.ShareMarket.status`). There is nothing to write: every other
method is refused.

Who may read
------------
The bids are private to the bidders (Stößer 2009, section 6.2.1: a user's bid is her strategy),
so the state is not public. The market draws a random **viewer token** when it starts and prints
it once; a caller reads with ``Authorization: Bearer TOKEN``, the page with the live market's
signed reads (``MarketSig``, derived from the token, which the page never sends;
:mod:`marketsched.platform.http`), and on the Unix socket the market's own Unix account (or
root). Anyone else gets 401. The platform's server adds its read deadlines, connection caps,
per-party limits and its refusal of plain HTTP on an address that is not loopback (use TLS).
"""

from __future__ import annotations

import hmac
import os
import secrets
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.responses import Response

from marketsched.platform.http import Gate, Route, json_errors, json_response, page_endpoint, route_endpoint
from marketsched.platform.server import Server
from marketsched.platform.tokens import hash_token, page_key_id
from marketsched.platform.validation import MarketError
from marketsched.platform.web import csp, page

VIEWER = "viewer"


class ShareView:
    """What the server serves: the market and its viewer token (see the module docstring)."""

    def __init__(self, market, token: str | None = None):
        self.market = market
        self.token = token or secrets.token_urlsafe(24)
        self._hash = hash_token(self.token)
        self._kid = page_key_id(self._hash)

    def authenticate(self, token: str | None) -> tuple[str, bool]:
        if not token:
            raise MarketError("no token: send the header 'Authorization: Bearer TOKEN' (the viewer token the "
                              "share market printed)", 401)
        if not hmac.compare_digest(hash_token(token), self._hash):
            raise MarketError("wrong token: not this share market's viewer token", 401)
        return VIEWER, False

    def authenticate_unix(self, uid: int) -> tuple[str, bool]:
        if uid not in (0, os.geteuid()):
            raise MarketError(f"uid {uid} may not read this share market (only its own account and root)", 401)
        return VIEWER, False

    def page_user(self, key_id: str) -> tuple[str, bool, str] | None:
        return (VIEWER, False, self._hash) if hmac.compare_digest(key_id, self._kid) else None


def share_state(v: ShareView, who, q, body) -> dict:
    return v.market.status()


ROUTES = [Route("GET", "/api/share", share_state, "the share market: each job's bid, CPUs, rule and delivered "
                                                  "shares, payments")]


def make_share_app(view: ShareView, stats=dict, max_in_flight: int = 16, per_party: int = 8) -> FastAPI:
    """The share market's page and API as an ASGI application."""
    app = FastAPI(title="marketsched share market", docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)
    gate = app.state.gate = Gate(max_in_flight, per_party)
    pool = app.state.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="share-api")

    async def health(request: Request) -> Response:
        return json_response(200, {"ok": True, **stats()})

    app.add_api_route("/", page_endpoint(PAGE, CSP), methods=["GET"], include_in_schema=False)
    app.add_api_route("/api/health", health, methods=["GET"])
    for r in ROUTES:
        app.add_api_route(r.path, route_endpoint(view, r, gate, pool), methods=[r.method], response_class=Response)
    json_errors(app)
    return app


class ShareServer(Server):
    """The share market's page on ``host:port`` (and a Unix socket with ``socket_path``); the
    ``broker`` argument is the :class:`ShareView`."""

    def build_app(self):
        return make_share_app(self.broker, self.stats, max_in_flight=self.limits.max_in_flight,
                              per_party=self.limits.max_party_requests)


PAGE = page("marketsched share market", r"""  #login input { width: 360px; }
  td.num { text-align: right; }
""", r"""<header>
  <h1>marketsched share market</h1>
  <span id="rule" class="big">-</span>
  <span>CPUs <b id="cpus">-</b></span>
  <span>period <b id="rounds">-</b></span>
  <span class="muted">enforcement <span id="enforcement">-</span></span>
  <span class="muted">updated <span id="updated">never</span></span>
</header>
<main>
  <section class="wide" id="login" hidden>
    <h2>Viewer token</h2>
    <input id="token" type="password" autocomplete="off" placeholder="paste the token the share market printed">
    <button id="save">use token</button>
    <p class="muted">The token stays in this page's memory (a reload asks again) and is never sent: each refresh is signed with it.</p>
  </section>
  <section class="wide"><div id="error"></div>
    <h2>Jobs <span class="muted" id="window"></span></h2>
    <table><thead><tr><th>job</th><th>owner</th><th>bid</th><th>CPUs (rule)</th><th>rule share</th><th>delivered share</th>
      <th>CPUs received</th><th>CPU s</th><th>paid</th><th>on CPU</th></tr></thead>
    <tbody id="jobs"></tbody></table>
    <p class="muted">Rule share: the rule's fraction of the jobs' CPU time; delivered share: each job's cgroup's
    fraction of it, over the same periods. Payments are pay-as-bid, every period.</p>
  </section>
</main>
""", r"""let key = null;
const names = {ps: "Proportional Share", sh: "Sanghavi-Hajek"};
async function login() {
  const tok = $("token").value.trim();
  $("token").value = "";
  if (!tok) return;
  if (!window.crypto || !crypto.subtle) {
    $("error").textContent = "this page needs https, or http on 127.0.0.1 or localhost (the browser's Web Crypto)";
    return;
  }
  key = await pageKey(tok);
  refresh();
}
$("save").onclick = login;
$("token").onkeydown = (e) => { if (e.key === "Enter") login(); };
const refresh = serialized(readShare);
async function readShare() {
  if (!key) { $("login").hidden = false; return; }
  const used = key;
  try {
    const r = await fetch("/api/share", {headers: {"Authorization": await signature(key, "/api/share")},
                                         credentials: "omit", cache: "no-store", redirect: "error"});
    const m = await r.json();
    if (used !== key) return;
    if (!r.ok) {
      $("error").textContent = m.error;
      if (r.status === 401) { key = null; $("login").hidden = false; }
      return;
    }
    $("error").textContent = ""; $("login").hidden = true;
    $("rule").textContent = names[m.rule] || m.rule;
    $("cpus").textContent = m.cpus.join(",");
    $("rounds").textContent = m.rounds;
    $("enforcement").textContent = m.enforcement;
    $("window").textContent = "(shares over the last " + m.window + " periods" + (m.books ? "; books " + m.books : "") + ")";
    $("jobs").innerHTML = m.jobs.map((j) => "<tr data-job='" + j.job + "'>" + [j.job, j.owner ?? "-", fmt(j.bid, 3),
      fmt(j.cpus, 4), fmt(j.rule, 4), fmt(j.delivered, 4), fmt(j.received, 3), fmt(j.cpu_seconds, 1), fmt(j.paid, 6), j.on ?? "-"]
      .map((c) => "<td>" + esc(c) + "</td>").join("") + "</tr>").join("");
    $("updated").textContent = new Date().toLocaleTimeString();
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (e) {
    $("error").textContent = "cannot reach the share market: " + e;
  }
}
refresh();
setInterval(() => { if (!refresh.busy()) refresh(); }, 1000);
""")

CSP = csp(PAGE)
