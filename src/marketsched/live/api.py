"""HTTP API and web page of the live market: a FastAPI application (served by
:mod:`marketsched.live.server`; its OpenAPI schema is at ``GET /openapi.json``).

Who is calling
--------------
* On the broker's **Unix socket**, the caller is the Unix account of the connecting process,
  as the kernel reports it (``SO_PEERCRED``), with no token: root and the broker's own account
  are the administrator, any other account the market user linked to it
  (``user add NAME --unix ACCOUNT``). A header ``Authorization`` is not looked at there.
* Over **TCP**, every ``/api/`` request except ``GET /api/health`` carries
  ``Authorization: Bearer TOKEN``, or, from the web page, a signed read (below).

Requests and answers are JSON; an error answers ``{"error": "..."}`` with the status of the
:class:`~marketsched.platform.validation.MarketError` (400 bad input, 401 missing or wrong token, 402
balance too low, 403 administrator only, 404 unknown user or job, 405 wrong method, 409
conflict, 413 body or command too large, 429 too many active jobs, or too many requests or
connections of the caller's at once: :class:`Gate`, 503 the database busy: :class:`Busy`, with
``Retry-After``). Bodies are at most
``MAX_BODY`` bytes (counted as they arrive, chunked or not), one JSON object whose fields are
the route's (an unknown field is refused by name), with no duplicate field, no object inside
it, no list inside a list, and no lone surrogate in a string. JSON's non-standard ``NaN`` and
``Infinity`` parse as numbers and are then refused by the field they were given for ("bid must
be a finite number, got nan"), and so is every number out of its field's bounds. Query
parameters are the route's too; ``limit`` is at most ``MAX_PAGE``, and list views page back
with ``before=ID`` (the next page's address is in the ``Link`` header, ``rel="next"``).

======  ===========================  ===========================================================
method  path                         what
======  ===========================  ===========================================================
GET     ``/``                        the web page (queue, running jobs, price, chart, balances)
GET     ``/api/health``              ``{"ok": true, "connections": N, ...}`` (no token)
GET     ``/api/me``                  who the caller is
POST    ``/api/users``               administrator: ``{"name", "deposit"?, "unix"?}`` -> ``{"name", "token", ...}``
POST    ``/api/users/NAME/deposit``  administrator: ``{"amount"}``
POST    ``/api/users/NAME/token``    a new token for NAME (administrator; or NAME): ``{"name", "token"}``
POST    ``/api/jobs``                ``{"bid", "command", "estimate"?, "procs"?}`` -> the job
GET     ``/api/jobs``                own jobs (administrator: all); ``?state=running,queued&limit=N&before=ID``
GET     ``/api/jobs/ID``             one job with its newest events, stdout and stderr tails
POST    ``/api/jobs/ID/cancel``      cancel (also ``DELETE /api/jobs/ID``)
POST    ``/api/jobs/ID/bid``         change the job's bid ``{"bid"}`` -> the job
GET     ``/api/price``               price now, counts, per-job rates
GET     ``/api/price/history``       ``?since=T&limit=N``: ``[{"t", "price", "queued", "running"}]``
GET     ``/api/balance``             own balance (administrator: all, revenue, deposits)
GET     ``/api/statement``           own ledger entries (administrator: ``?user=NAME``); ``limit``, ``before``
GET     ``/api/market``              everything the page shows, in one request (``limit`` active jobs)
POST    ``/api/dayahead/bids``       day-ahead sealed bid ``{"length", "deadline", "value", "nodes"?, "command"?}``
GET     ``/api/dayahead``            ``showres``: own bids and reservations (administrator: all), next clearing
POST    ``/api/dlgm/jobs``           DLGM and P-DLGM markets: :mod:`marketsched.live.dlgm_api`
POST    ``/api/ees/jobs``            EES and relaxed-EES markets: :mod:`marketsched.live.ees_api`
======  ===========================  ===========================================================

A submission is answered only after it is committed to the database (see the broker).

The web page's signed reads
---------------------------
The page never sends the token, nor keeps it anywhere but in the page's memory (no
``localStorage``, ``sessionStorage``, cookie or address), so neither a page served by a process
that took the broker's port while it was down (same origin: it could read all of those) nor
that process's answers to the page's requests ever get it. The page asks for the token, derives
``H = SHA-256(token)`` (what the database stores) and signs each read::

    Authorization: MarketSig kid=KID, t=MILLISECONDS, sig=HMAC-SHA256(H, "marketsched-page-v1\\nGET\\nPATH?QUERY\\nMILLISECONDS")

with ``KID = SHA-256("marketsched-kid:" + H)[:32]`` (:func:`marketsched.platform.tokens.page_key_id`). The broker accepts such a signature for
``GET`` only, within ``PAGE_SIG_WINDOW`` seconds of its clock. What an impostor can do with
what the page sends it: replay those reads of ``/api/market`` for a few minutes. It can neither
learn the token nor change anything (deposits, users, jobs need the token itself). Since the
key is what the database stores, whoever reads the database can also sign reads, which reveal
nothing the database does not.
"""


from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response

from marketsched.live.broker import Broker
from marketsched.live.dlgm_api import ROUTES as DLGM_ROUTES
from marketsched.live.ees_api import ROUTES as EES_ROUTES
from marketsched.platform.http import (
    BEFORE,
    BUSY_WAIT,
    INT,
    LIMIT,
    MAX_PAGE,
    NUM,
    STR,
    Busy,
    Gate,
    Route,
    busy_wait,
    json_errors,
    json_response,
    page_before,
    page_endpoint,
    page_limit,
    route_endpoint,
    timed,
)
from marketsched.platform.ledger import ACTIVE_STATES, BUSY_TIMEOUT, FINAL_STATES
from marketsched.platform.validation import MarketError, number, show


# ---------------------------------------------------------------------------- query parameters
def _since(q):
    if "since" not in q:
        return None
    try:
        x = float(q["since"])
    except ValueError:
        raise MarketError(f"since must be a number of market seconds, got {show(q['since'])}") from None
    x = number(x, "since")
    if abs(x) > 1e12:
        raise MarketError(f"since must be a number of market seconds of at most 1e12, got {x!r}")
    return x


# ---------------------------------------------------------------------------- routes
ROUTES: list[Route] = []
SINCE = (NUM, "market seconds: only entries from then on")


def route(method: str, path: str, summary: str, **kw):
    def deco(f):
        ROUTES.append(Route(method, path, f, summary, **kw))
        return f

    return deco


@route("GET", "/api/me", "who the caller is")
def me(b, who, q, body):
    return {"name": who[0], "admin": who[1]}


@route("POST", "/api/users", "administrator: create a user (prints their token once)", noun="a user",
       body={"name": STR, "deposit": NUM, "unix": {"type": "string", "description": "the Unix account the user is"}},
       required=("name",))
def add_user(b, who, q, body):
    return b.add_user(who[1], body.get("name"), body.get("deposit", 0.0), body.get("unix"))


@route("POST", "/api/users/{name}/token", "a new token for a user (administrator: anyone; a user: themselves); "
       "the old one stops working at once", noun="a token", body={})
def new_token(b, who, q, body, name):
    return b.new_token(who[0], who[1], name)


@route("POST", "/api/users/{name}/deposit", "administrator: add money to a user's balance", noun="a deposit",
       body={"amount": NUM}, required=("amount",))
def deposit(b, who, q, body, name):
    if "amount" not in body:
        raise MarketError("give the amount to deposit: {\"amount\": ...}")
    return b.deposit(who[1], name, body["amount"])


@route("POST", "/api/jobs", "submit a job", noun="a job", required=("bid", "command"),
       body={"bid": {"type": "number", "description": "per second of running time"},
             "command": {"oneOf": [STR, {"type": "array", "items": STR}]},
             "estimate": {"type": "number", "description": "runtime estimate, seconds"},
             "procs": {**INT, "description": "CPUs the job runs on at once (default 1); it pays per CPU"},
             "restartable": {"type": "boolean",
                             "description": "may restart from the beginning on another node (default false)"}})
def submit(b, who, q, body):
    if "bid" not in body:
        raise MarketError("bid must be a finite positive number (per second of running time); none given")
    return b.submit(who[0], who[1], body["bid"], body.get("command"), body.get("estimate"), body.get("procs", 1),
                    body.get("restartable", False))


def _jobs_of(b):
    """Where a market's jobs are: a DLGM market's in its own tables (``list``, ``show``,
    ``cancel`` and ``wait`` then work on them), an EES market's in its own (``market list``),
    else the broker's."""
    for attached in ("dlgm", "ees"):
        if getattr(b, attached, None) is not None:
            return getattr(b, attached)
    return b


@route("GET", "/api/jobs", "own jobs (administrator: all), oldest first", paged=True,
       query={"state": (STR, "comma-separated states"), "limit": LIMIT, "before": BEFORE})
def list_jobs(b, who, q, body):
    states = [s for s in q.get("state", "").split(",") if s] or None
    limit = page_limit(q, MAX_PAGE)
    jobs = _jobs_of(b).jobs(who[0], who[1], states, limit, page_before(q))
    return jobs, (jobs[0]["id"] if len(jobs) == limit and jobs[0]["id"] > 1 else None)


@route("GET", "/api/jobs/{job_id}", "one job with its newest events, stdout and stderr tails")
def show_job(b, who, q, body, job_id):
    return _jobs_of(b).job(who[0], who[1], job_id)


@route("POST", "/api/jobs/{job_id}/cancel", "cancel a job", noun="a cancellation", body={})
def cancel_job(b, who, q, body, job_id):
    return _jobs_of(b).cancel(who[0], who[1], job_id)


@route("POST", "/api/jobs/{job_id}/bid", "change a job's bid", noun="a bid change", body={"bid": NUM},
       required=("bid",))
def rebid_job(b, who, q, body, job_id):
    if "bid" not in body:
        raise MarketError("give the new bid: {\"bid\": ...}")
    return b.rebid(who[0], who[1], job_id, body["bid"])


@route("DELETE", "/api/jobs/{job_id}", "cancel a job")
def delete_job(b, who, q, body, job_id):
    return _jobs_of(b).cancel(who[0], who[1], job_id)


@route("GET", "/api/price", "the price now, counts, per-job rates")
def price(b, who, q, body):
    if getattr(b, "dlgm", None) is not None:  # `market status`: the nodes' queues
        return {**b.price(), "mechanism": b.dlgm.name, "dlgm": b.dlgm.status(who[0], who[1])["nodes"]}
    if getattr(b, "ees", None) is not None:  # `market status`: the queue, the threshold, own jobs
        return {**b.price(), "mechanism": b.ees.name, "ees": b.ees.status(who[0], who[1])}
    return b.price()


@route("GET", "/api/price/history", "the price history", query={"since": SINCE, "limit": LIMIT})
def price_history(b, who, q, body):
    return b.price_history(_since(q), page_limit(q, MAX_PAGE))


@route("GET", "/api/balance", "own balance (administrator: all, revenue, deposits)")
def balance(b, who, q, body):
    return b.balances(who[0], who[1])


@route("GET", "/api/statement", "own ledger entries (administrator: any user's)",
       query={"user": (STR, "administrator: whose"), "limit": LIMIT, "before": BEFORE})
def statement(b, who, q, body):
    return b.statement(who[0], who[1], q.get("user"), page_limit(q, 200), page_before(q))


@route("GET", "/api/market", "everything the web page shows", query={"since": SINCE, "limit": LIMIT})
def market(b, who, q, body):
    with b.lock:  # one snapshot: the price, the balances and the jobs of the same instant
        return {
            "me": {"name": who[0], "admin": who[1]},
            "price": b.price(),
            "history": b.price_history(_since(q), 500),
            "balance": b.balances(who[0], who[1]),
            "active": b.jobs(who[0], who[1], ACTIVE_STATES, page_limit(q, 500)),
            "active_total": b.count_active(who[0], who[1]),
            "recent": b.jobs(who[0], who[1], FINAL_STATES, 20),
            **({"dlgm": b.dlgm.status(who[0], who[1])} if getattr(b, "dlgm", None) is not None else {}),
            **({"ees": b.ees.status(who[0], who[1])} if getattr(b, "ees", None) is not None else {}),
        }


def _dayahead(b):
    da = getattr(b, "dayahead", None)
    if da is None:
        raise MarketError("this market runs no day-ahead auction (start it with `market serve --dayahead dpgva`)", 404)
    return da


@route("POST", "/api/dayahead/bids", "a sealed day-ahead bid", noun="a bid",
       body={"length": NUM, "deadline": NUM, "value": NUM, "nodes": INT, "command": STR},
       required=("length", "deadline", "value"))
def place_bid(b, who, q, body):
    for f in ("length", "deadline", "value"):
        if f not in body:
            raise MarketError(f"a day-ahead bid needs {f}; none given")
    return _dayahead(b).place_bid(who[0], body["length"], body["deadline"], body["value"], body.get("nodes"),
                                  body.get("command"))


@route("GET", "/api/dayahead", "day-ahead bids and reservations, the next clearing")
def show_reservations(b, who, q, body):
    return _dayahead(b).showres(who[0], who[1])


ROUTES += DLGM_ROUTES  # a DLGM or P-DLGM market's routes (404 on a market that runs neither)
ROUTES += EES_ROUTES  # an EES or relaxed-EES market's routes (404 on a market that runs neither)


# ---------------------------------------------------------------------------- the application
def bounded_write(broker: Broker, fn, write: bool):
    """Run API handler ``fn()``; a write on a SQLite market waits at most ``BUSY_WAIT`` seconds
    in all, for the broker's lock (held by its loop or another call) and then for the
    database's: the broker's connection otherwise waits up to its store's busy timeout,
    :data:`marketsched.platform.ledger.BUSY_TIMEOUT`, which suits the market's loop but not a
    caller waiting for an answer. Past it: :class:`Busy`, or SQLite's ``database is locked``,
    which the endpoint answers 503 alike. The broker is its market's only writer, so only
    another process holding ``market.db``'s lock (an operator's ``sqlite3`` shell, a backup)
    makes the database busy. A PostgreSQL market keeps its driver's waits."""
    if not write or broker.store.kind != "sqlite":
        return fn()
    deadline = time.monotonic() + BUSY_WAIT
    if not broker.lock.acquire(timeout=BUSY_WAIT):
        raise Busy("market")
    try:
        with busy_wait(broker.store.conn, max(deadline - time.monotonic(), 0.001), BUSY_TIMEOUT):
            return fn()
    finally:
        broker.lock.release()


def make_app(broker: Broker, stats=dict, max_in_flight: int = 64, per_party: int = 16) -> FastAPI:
    """The API of ``broker`` as an ASGI application; ``stats()`` adds the server's connection
    counts to the health check; at most ``max_in_flight`` requests are handled at once, at most
    ``per_party`` of one party's are in progress (:class:`Gate`)."""
    from marketsched import __version__
    from marketsched.live.web import CSP, PAGE

    app = FastAPI(title="marketsched live market", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json", redirect_slashes=False)
    app.state.broker = broker
    gate = app.state.gate = Gate(max_in_flight, per_party)
    pool = app.state.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="market-api")
    home = page_endpoint(PAGE, CSP)

    async def health(request: Request) -> Response:
        """Answered on the server's own thread (no broker lock, no worker thread)."""
        return timed(json_response(200, {"ok": True, **stats()}), request, asyncio.get_running_loop().time())

    app.add_api_route("/", home, methods=["GET"], include_in_schema=False)
    app.add_api_route("/api/health", health, methods=["GET"], summary="the server answers (no token)")
    for r in ROUTES:
        app.add_api_route(r.path, route_endpoint(broker, r, gate, pool, call=functools.partial(bounded_write, broker)),
                          methods=[r.method], summary=r.summary,
                          openapi_extra=r.openapi(), response_class=Response)

    json_errors(app)

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                                 description=(__doc__ or "").split("\n\n")[0])
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "description": "the user's token (TCP)"},
                "unixPeer": {"type": "apiKey", "in": "header", "name": "X-Unix-Socket",
                             "description": "none to send: on the broker's Unix socket the caller is its Unix account "
                                            "(SO_PEERCRED)"},
                "pageSignature": {"type": "apiKey", "in": "header", "name": "Authorization",
                                  "description": "MarketSig kid=..., t=..., sig=...: the web page's signed reads (GET)"},
            }
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
    return app
