"""HTTP API and web page of the live market (standard library ``http.server``, threaded).

Every ``/api/`` request except ``GET /api/health`` carries ``Authorization: Bearer TOKEN``.
Requests and answers are JSON; an error answers ``{"error": "..."}`` with the status of the
:class:`~marketsched.live.broker.MarketError` (400 bad input, 401 missing or wrong token, 402
balance too low, 403 administrator only, 404 unknown user or job, 405 wrong method, 409
conflict). JSON's non-standard ``NaN`` and ``Infinity`` parse as numbers and are then refused by
the field they were given for ("bid must be a finite number, got nan").

======  ==========================  ============================================================
method  path                        what
======  ==========================  ============================================================
GET     ``/``                       the web page (queue, running jobs, price, chart, balances)
GET     ``/api/health``             ``{"ok": true}`` (no token)
GET     ``/api/me``                 who the token belongs to
POST    ``/api/users``              administrator: ``{"name", "deposit"}`` -> ``{"name", "token", ...}``
POST    ``/api/users/NAME/deposit`` administrator: ``{"amount"}``
POST    ``/api/jobs``               ``{"bid", "command", "estimate"?, "procs"?}`` -> the job
GET     ``/api/jobs``               own jobs (administrator: all); ``?state=running,queued&limit=N``
GET     ``/api/jobs/ID``            one job with events, stdout and stderr tails
POST    ``/api/jobs/ID/cancel``     cancel (also ``DELETE /api/jobs/ID``)
POST    ``/api/jobs/ID/bid``        change the job's bid ``{"bid"}`` -> the job
GET     ``/api/price``              price now, counts, per-job rates
GET     ``/api/price/history``      ``?since=T&limit=N``: ``[{"t", "price", "queued", "running"}]``
GET     ``/api/balance``            own balance (administrator: all, revenue, deposits)
GET     ``/api/statement``          own ledger entries (administrator: ``?user=NAME``)
GET     ``/api/market``             everything the page shows, in one request
POST    ``/api/dayahead/bids``      day-ahead sealed bid ``{"length", "deadline", "value", "nodes"?, "command"?}``
GET     ``/api/dayahead``           ``showres``: own bids and reservations (administrator: all), next clearing
======  ==========================  ============================================================

A submission is answered only after it is committed to the database (see the broker).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from marketsched.live.broker import Broker, MarketError
from marketsched.live.ledger import ACTIVE_STATES, FINAL_STATES

MAX_BODY = 1 << 20


def _page() -> bytes:
    from marketsched.live.web import PAGE

    return PAGE.encode()


class MarketServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, broker: Broker, host: str = "127.0.0.1", port: int = 8765):
        self.broker = broker
        super().__init__((host, port), Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="http", daemon=True)
        t.start()
        return t


# (method, path pattern, needs a token, handler), in the order they are tried
ROUTES: list[tuple[str, re.Pattern[str], bool, Callable]] = []


def route(method: str, pattern: str, auth: bool = True):
    rx = re.compile("^" + pattern + "$")

    def deco(f):
        ROUTES.append((method, rx, auth, f))
        return f

    return deco


class Handler(BaseHTTPRequestHandler):
    server: MarketServer
    protocol_version = "HTTP/1.1"
    quiet = True

    def log_message(self, format, *args):  # noqa: A002 - the standard signature
        if not self.quiet:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj, allow_nan=False, default=str).encode())

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise MarketError(f"request body too large ({n} bytes, at most {MAX_BODY})", 413)
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        try:
            obj = json.loads(raw)  # NaN / Infinity parse to floats, which the broker refuses by name
        except (ValueError, UnicodeDecodeError) as exc:
            raise MarketError(f"request body is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise MarketError("request body must be a JSON object")
        return obj

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        try:
            for m, rx, auth, f in ROUTES:
                if m != method:
                    continue
                match = rx.match(url.path)
                if match is None:
                    continue
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                who = None
                if auth:
                    header = self.headers.get("Authorization", "")
                    token = header[7:].strip() if header.startswith("Bearer ") else None
                    who = self.server.broker.authenticate(token)
                body = self._body() if method in ("POST", "PUT") else {}
                result = f(self, who, query, body, *match.groups())
                if result is not None:
                    self._json(200, result)
                return
            if any(rx.match(url.path) for _, rx, _, _ in ROUTES):
                raise MarketError(f"{method} is not allowed on {url.path}", 405)
            raise MarketError(f"no such path: {url.path}", 404)
        except MarketError as exc:
            self._json(exc.status, {"error": str(exc)})
        except Exception as exc:  # a bug: answer 500 with the message rather than hang up
            self._json(500, {"error": f"internal error: {exc!r}"})

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")


def _limit(q, default=None):
    if "limit" not in q:
        return default
    try:
        n = int(q["limit"])
    except ValueError:
        raise MarketError(f"limit must be a whole number, got {q['limit']!r}") from None
    if n < 1:
        raise MarketError(f"limit must be at least 1, got {n}")
    return n


def _since(q):
    if "since" not in q:
        return None
    try:
        return float(q["since"])
    except ValueError:
        raise MarketError(f"since must be a number of market seconds, got {q['since']!r}") from None


@route("GET", "/", auth=False)
def page(h, who, q, body):
    h._send(200, _page(), "text/html; charset=utf-8")


@route("GET", "/api/health", auth=False)
def health(h, who, q, body):
    return {"ok": True}


@route("GET", "/api/me")
def me(h, who, q, body):
    return {"name": who[0], "admin": who[1]}


@route("POST", "/api/users")
def add_user(h, who, q, body):
    return h.server.broker.add_user(who[1], body.get("name"), body.get("deposit", 0.0))


@route("POST", "/api/users/([^/]+)/deposit")
def deposit(h, who, q, body, name):
    if "amount" not in body:
        raise MarketError("give the amount to deposit: {\"amount\": ...}")
    return h.server.broker.deposit(who[1], name, body["amount"])


@route("POST", "/api/jobs")
def submit(h, who, q, body):
    unknown = set(body) - {"bid", "command", "estimate", "procs"}
    if unknown:
        raise MarketError(f"unknown field(s) {sorted(unknown)}: a job has bid, command, estimate, procs")
    if "bid" not in body:
        raise MarketError("bid must be a finite positive number (per second of running time); none given")
    return h.server.broker.submit(who[0], who[1], body["bid"], body.get("command"), body.get("estimate"),
                                  body.get("procs", 1))


@route("GET", "/api/jobs")
def list_jobs(h, who, q, body):
    states = [s for s in q.get("state", "").split(",") if s] or None
    return h.server.broker.jobs(who[0], who[1], states, _limit(q))


@route("GET", r"/api/jobs/([^/]+)")
def show_job(h, who, q, body, job_id):
    return h.server.broker.job(who[0], who[1], job_id)


@route("POST", r"/api/jobs/([^/]+)/cancel")
def cancel_job(h, who, q, body, job_id):
    return h.server.broker.cancel(who[0], who[1], job_id)


@route("POST", r"/api/jobs/([^/]+)/bid")
def rebid_job(h, who, q, body, job_id):
    unknown = set(body) - {"bid"}
    if unknown:
        raise MarketError(f"unknown field(s) {sorted(unknown)}: a bid change has only bid")
    if "bid" not in body:
        raise MarketError("give the new bid: {\"bid\": ...}")
    return h.server.broker.rebid(who[0], who[1], job_id, body["bid"])


@route("DELETE", r"/api/jobs/([^/]+)")
def delete_job(h, who, q, body, job_id):
    return h.server.broker.cancel(who[0], who[1], job_id)


@route("GET", "/api/price")
def price(h, who, q, body):
    return h.server.broker.price()


@route("GET", "/api/price/history")
def price_history(h, who, q, body):
    return h.server.broker.price_history(_since(q), _limit(q, 1000))


@route("GET", "/api/balance")
def balance(h, who, q, body):
    return h.server.broker.balances(who[0], who[1])


@route("GET", "/api/statement")
def statement(h, who, q, body):
    return h.server.broker.statement(who[0], who[1], q.get("user"), _limit(q, 200))


@route("GET", "/api/market")
def market(h, who, q, body):
    b = h.server.broker
    return {
        "me": {"name": who[0], "admin": who[1]},
        "price": b.price(),
        "history": b.price_history(_since(q), 500),
        "balance": b.balances(who[0], who[1]),
        "active": b.jobs(who[0], who[1], ACTIVE_STATES, _limit(q, 500)),
        "recent": b.jobs(who[0], who[1], FINAL_STATES, 20),
    }


# ---------------------------------------------------------------- day-ahead reservations (marketsched.live.dayahead)
def _dayahead(h):
    da = getattr(h.server.broker, "dayahead", None)
    if da is None:
        raise MarketError("this market runs no day-ahead auction (start it with `market serve --dayahead dpgva`)", 404)
    return da


@route("POST", "/api/dayahead/bids")
def place_bid(h, who, q, body):
    unknown = set(body) - {"length", "deadline", "value", "nodes", "command"}
    if unknown:
        raise MarketError(f"unknown field(s) {sorted(unknown)}: a bid has length, deadline, value, nodes, command")
    for f in ("length", "deadline", "value"):
        if f not in body:
            raise MarketError(f"a day-ahead bid needs {f}; none given")
    return _dayahead(h).place_bid(who[0], body["length"], body["deadline"], body["value"], body.get("nodes"),
                                  body.get("command"))


@route("GET", "/api/dayahead")
def show_reservations(h, who, q, body):
    return _dayahead(h).showres(who[0], who[1])
