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
:class:`~marketsched.live.broker.MarketError` (400 bad input, 401 missing or wrong token, 402
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

with ``KID = SHA-256("marketsched-kid:" + H)[:32]`` (:func:`marketsched.live.broker.page_key_id`). The broker accepts such a signature for
``GET`` only, within ``PAGE_SIG_WINDOW`` seconds of its clock. What an impostor can do with
what the page sends it: replay those reads of ``/api/market`` for a few minutes. It can neither
learn the token nor change anything (deposits, users, jobs need the token itself). Since the
key is what the database stores, whoever reads the database can also sign reads, which reveal
nothing the database does not.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import json
import logging
import re
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from marketsched.live.broker import MAX_ID, Broker, MarketError, _number, _show, _utf8, _whole
from marketsched.live.ledger import ACTIVE_STATES, BUSY_TIMEOUT, FINAL_STATES
from marketsched.live.server import CONN_STATE, PEER_STATE, MarketServer  # noqa: F401 - MarketServer lived here

log = logging.getLogger("marketsched.live.api")

MAX_BODY = 1 << 20
MAX_PAGE = 1000  # the most items one list request returns
PAGE_SIG_WINDOW = 300.0  # seconds a web-page signature is valid either side of the broker's clock
BUSY_WAIT = 2.0  # seconds an API write waits for the database's write lock before answering 503
RETRY_AFTER = 1  # seconds: the Retry-After of a 503 for a busy database
_PAGE_AUTH = re.compile(r"MarketSig kid=([0-9a-f]{32}), t=([0-9]{1,15}), sig=([0-9a-f]{64})")


# ---------------------------------------------------------------------------- a busy database
class Busy(MarketError):
    """The database's write lock was held by another connection (another process's
    transaction: a clearing being committed, an operator's command) for longer than the API
    waits for it, ``BUSY_WAIT`` seconds: answered 503 with ``Retry-After: RETRY_AFTER``, never
    500. Nothing of the request was done (the write failed when its transaction began)."""

    status = 503

    def __init__(self, what: str = "database"):
        super().__init__(f"the {what} is busy (another writer has held its lock for more than {BUSY_WAIT:g} s): "
                         f"nothing was done; try again in {RETRY_AFTER} s")


def is_busy(exc: BaseException) -> bool:
    """True for SQLite's busy and locked errors (its busy timeout passed), which a retry may
    cure; other database errors (a damaged file, a full disk) are not."""
    return isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(
        ("database is locked", "database table is locked", "database is busy"))


@contextmanager
def busy_wait(conn, seconds: float, restore: float):
    """SQLite connection ``conn`` waits at most ``seconds`` for a lock (its busy timeout) inside
    the block, ``restore`` seconds after it. The caller holds whatever lock serializes the
    connection's users."""
    conn.execute(f"PRAGMA busy_timeout = {round(seconds * 1000)}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA busy_timeout = {round(restore * 1000)}")


def error_response(exc: MarketError, unread: bool = False) -> Response:
    """``{"error": ...}`` with the error's status; a busy database's 503 carries ``Retry-After``
    (and ``retry_after`` in the body, for clients that read only the body)."""
    headers = {"connection": "close"} if unread else {}
    body: dict = {"error": str(exc)}
    if isinstance(exc, Busy):
        headers["retry-after"] = str(RETRY_AFTER)
        body["retry_after"] = RETRY_AFTER
    return _json(exc.status, body, headers or None)


# ---------------------------------------------------------------------------- web page signatures
def page_signature(token_hash: str, method: str, target: str, t_ms: int) -> str:
    msg = f"marketsched-page-v1\n{method}\n{target}\n{t_ms}".encode()
    return hmac.new(token_hash.encode(), msg, hashlib.sha256).hexdigest()


def _authenticate(b: Broker, peer, header: str, method: str, target: str) -> tuple[str, bool]:
    """Who is calling (see the module docstring); from the broker's in-memory user index, so
    it runs on the server's own thread, without the broker's lock."""
    if peer is not None:
        return b.authenticate_unix(peer[0])
    if header.startswith("Bearer "):
        return b.authenticate(header[7:].strip())
    if header.startswith("MarketSig "):
        m = _PAGE_AUTH.fullmatch(header)
        if m is None:
            raise MarketError("malformed MarketSig authorization (kid=32 hex, t=milliseconds, sig=64 hex)", 401)
        if method != "GET":
            raise MarketError("the web page's signed requests only read (GET); send the token (Bearer) to change "
                              "anything", 403)
        kid, t_ms, sig = m.group(1), int(m.group(2)), m.group(3)
        skew = t_ms / 1000 - time.time()
        if abs(skew) > PAGE_SIG_WINDOW:
            raise MarketError(f"signed request's time is {skew:+.0f} s from the broker's clock (at most "
                              f"{PAGE_SIG_WINDOW:g} s): check the clock", 401)
        found = b.page_user(kid)
        if found is None or not hmac.compare_digest(page_signature(found[2], method, target, t_ms), sig):
            raise MarketError("wrong token: no user has this token", 401)
        return found[0], found[1]
    return b.authenticate(None)


# ---------------------------------------------------------------------------- request parsing
def parse_body(raw: bytes, fields: dict, noun: str) -> dict:
    """The request body as a JSON object with only ``fields`` (see the module docstring)."""
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MarketError(f"request body is not UTF-8 text (byte {exc.start})") from None
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise MarketError("request body is nested too deeply (a job's fields are numbers, strings and a list "
                          "of strings)") from None
    except ValueError as exc:  # also an integer of more than 4,300 digits
        raise MarketError(f"request body is not valid JSON: {_show(str(exc), 200)}") from None
    if not isinstance(obj, dict):
        raise MarketError("request body must be a JSON object")
    unknown = set(obj) - set(fields)
    if unknown:
        shown = ", ".join(_show(k) for k in sorted(unknown))
        raise MarketError(f"unknown field(s) [{shown}]: {noun} has {', '.join(fields)}")
    for k, v in obj.items():
        _check_value(v, k, 0)
    return obj


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"field {_show(dup)} is given twice")
    return dict(pairs)


def _check_value(v, where: str, depth: int) -> None:
    if isinstance(v, str):
        _utf8(v, where)
    elif isinstance(v, dict):
        raise MarketError(f"{where} must not be a JSON object")
    elif isinstance(v, list):
        if depth >= 1:
            raise MarketError(f"{where} is nested too deeply (a list inside a list)")
        for i, x in enumerate(v):
            _check_value(x, f"{where}[{i}]", depth + 1)


async def _read_body(request: Request) -> bytes:
    """The body, refused (413) as soon as it passes ``MAX_BODY`` bytes: by its declared length
    before reading anything, else counted as it streams in."""
    headers = request.headers
    if "transfer-encoding" in headers and "content-length" in headers:
        raise MarketError("request has both Transfer-Encoding and Content-Length: give one")
    declared = headers.get("content-length")
    if declared is not None and (len(declared) > 12 or int(declared) > MAX_BODY):
        raise MarketError(f"request body too large ({_show(int(declared))} bytes, at most {MAX_BODY})", 413)
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > MAX_BODY:
            raise MarketError(f"request body too large (more than {MAX_BODY} bytes)", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _limit(q, default: int, most: int = MAX_PAGE) -> int:
    return _whole(q["limit"], "limit", 1, most) if "limit" in q else default


def _before(q):
    return _whole(q["before"], "before", 1, MAX_ID) if "before" in q else None


def _since(q):
    if "since" not in q:
        return None
    try:
        x = float(q["since"])
    except ValueError:
        raise MarketError(f"since must be a number of market seconds, got {_show(q['since'])}") from None
    x = _number(x, "since")
    if abs(x) > 1e12:
        raise MarketError(f"since must be a number of market seconds of at most 1e12, got {x!r}")
    return x


# ---------------------------------------------------------------------------- routes
@dataclass
class Route:
    method: str
    path: str
    handler: Callable[..., Any]
    summary: str
    auth: bool = True
    body: dict | None = None  # field -> JSON schema; None: the route reads no body
    noun: str = ""  # "a job": for "unknown field(s) ...: a job has ..."
    required: tuple = ()
    query: dict = field(default_factory=dict)  # name -> (JSON schema, description)
    paged: bool = False  # returns (items, next "before" or None): a Link header for the next page

    def openapi(self) -> dict:
        params = [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                  for n in re.findall(r"{(\w+)}", self.path)]
        params += [{"name": n, "in": "query", "required": False, "schema": s, "description": d}
                   for n, (s, d) in self.query.items()]
        extra: dict = {"parameters": params,
                       "responses": {"400": {"description": "bad input: {\"error\": \"...\"} names the problem"}}}
        if self.body is not None:
            extra["requestBody"] = {"required": bool(self.required), "content": {"application/json": {"schema": {
                "type": "object", "properties": self.body, "required": list(self.required),
                "additionalProperties": False}}}}
        if self.auth:
            extra["security"] = [{"bearer": []}, {"unixPeer": []}, {"pageSignature": []}]
        return extra


ROUTES: list[Route] = []
NUM, INT, STR = {"type": "number"}, {"type": "integer"}, {"type": "string"}
LIMIT = ({"type": "integer", "minimum": 1, "maximum": MAX_PAGE}, "at most this many (the newest)")
BEFORE = ({"type": "integer", "minimum": 1}, "only ids below this one (the next page back)")
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
             "estimate": {"type": "number", "description": "runtime estimate, seconds"}, "procs": INT})
def submit(b, who, q, body):
    if "bid" not in body:
        raise MarketError("bid must be a finite positive number (per second of running time); none given")
    return b.submit(who[0], who[1], body["bid"], body.get("command"), body.get("estimate"), body.get("procs", 1))


@route("GET", "/api/jobs", "own jobs (administrator: all), oldest first", paged=True,
       query={"state": (STR, "comma-separated states"), "limit": LIMIT, "before": BEFORE})
def list_jobs(b, who, q, body):
    states = [s for s in q.get("state", "").split(",") if s] or None
    limit = _limit(q, MAX_PAGE)
    jobs = b.jobs(who[0], who[1], states, limit, _before(q))
    return jobs, (jobs[0]["id"] if len(jobs) == limit and jobs[0]["id"] > 1 else None)


@route("GET", "/api/jobs/{job_id}", "one job with its newest events, stdout and stderr tails")
def show_job(b, who, q, body, job_id):
    return b.job(who[0], who[1], job_id)


@route("POST", "/api/jobs/{job_id}/cancel", "cancel a job", noun="a cancellation", body={})
def cancel_job(b, who, q, body, job_id):
    return b.cancel(who[0], who[1], job_id)


@route("POST", "/api/jobs/{job_id}/bid", "change a job's bid", noun="a bid change", body={"bid": NUM},
       required=("bid",))
def rebid_job(b, who, q, body, job_id):
    if "bid" not in body:
        raise MarketError("give the new bid: {\"bid\": ...}")
    return b.rebid(who[0], who[1], job_id, body["bid"])


@route("DELETE", "/api/jobs/{job_id}", "cancel a job")
def delete_job(b, who, q, body, job_id):
    return b.cancel(who[0], who[1], job_id)


@route("GET", "/api/price", "the price now, counts, per-job rates")
def price(b, who, q, body):
    return b.price()


@route("GET", "/api/price/history", "the price history", query={"since": SINCE, "limit": LIMIT})
def price_history(b, who, q, body):
    return b.price_history(_since(q), _limit(q, MAX_PAGE))


@route("GET", "/api/balance", "own balance (administrator: all, revenue, deposits)")
def balance(b, who, q, body):
    return b.balances(who[0], who[1])


@route("GET", "/api/statement", "own ledger entries (administrator: any user's)",
       query={"user": (STR, "administrator: whose"), "limit": LIMIT, "before": BEFORE})
def statement(b, who, q, body):
    return b.statement(who[0], who[1], q.get("user"), _limit(q, 200), _before(q))


@route("GET", "/api/market", "everything the web page shows", query={"since": SINCE, "limit": LIMIT})
def market(b, who, q, body):
    with b.lock:  # one snapshot: the price, the balances and the jobs of the same instant
        return {
            "me": {"name": who[0], "admin": who[1]},
            "price": b.price(),
            "history": b.price_history(_since(q), 500),
            "balance": b.balances(who[0], who[1]),
            "active": b.jobs(who[0], who[1], ACTIVE_STATES, _limit(q, 500)),
            "active_total": b.count_active(who[0], who[1]),
            "recent": b.jobs(who[0], who[1], FINAL_STATES, 20),
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


# ---------------------------------------------------------------------------- the application
def _json(status: int, obj, headers: dict | None = None) -> Response:
    return Response(json.dumps(obj, allow_nan=False, default=str), status_code=status, media_type="application/json",
                    headers={"cache-control": "no-store", **(headers or {})})


def _query(request: Request, r: Route) -> dict:
    q: dict[str, str] = {}
    for k, v in request.query_params.multi_items():
        if k not in r.query:
            known = ", ".join(r.query) or "none"
            raise MarketError(f"unknown query parameter {_show(k)} (this path takes: {known})")
        if k in q:
            raise MarketError(f"query parameter {k} is given twice")
        q[k] = v
    return q


def _timed(resp: Response, request: Request, t0: float) -> Response:
    """``Server-Timing``: ``wait``, from the request's last bytes arriving to its handler
    starting (the server's own queueing); ``app``, the handler (ms)."""
    conn = (request.scope.get("state") or {}).get(CONN_STATE)
    wait = t0 - conn.received_at if conn is not None else 0.0
    app = asyncio.get_running_loop().time() - t0
    resp.headers["server-timing"] = f"wait;dur={1000 * max(wait, 0.0):.3f}, app;dur={1000 * app:.3f}"
    return resp


class Gate:
    """Who may take a request slot: at most ``max_in_flight`` requests are handled at once
    (their bodies read in full: a body is read before its request takes a slot, within the
    server's body deadline), and one party has at most ``per_party`` requests in progress,
    waiting for their bodies included; one more is answered 429 at once. Used on the event
    loop's thread only."""

    def __init__(self, max_in_flight: int = 64, per_party: int = 16):
        self.slots = asyncio.Semaphore(max_in_flight)
        self.per_party = per_party
        self.active: dict[object, int] = {}

    def enter(self, party) -> None:
        n = self.active.get(party, 0)
        if n >= self.per_party:
            raise MarketError(f"too many requests at once from {_party_name(party)} (at most {self.per_party} in progress): "
                              "wait for an answer before sending more", 429)
        self.active[party] = n + 1

    def leave(self, party) -> None:
        n = self.active.pop(party) - 1
        if n:
            self.active[party] = n


def _party_name(who) -> str:
    """A caller for a message: ``alice`` (the market), ``user alice`` (the exchange)."""
    return " ".join(str(x) for x in who if isinstance(x, str))


def _endpoint(b, r: Route, gate: Gate, pool: ThreadPoolExecutor, authenticate=_authenticate, call=None):
    """The ASGI endpoint of route ``r`` on ``b`` (the broker, or another service with the same
    kind of routes: the grid exchange's API); ``authenticate(b, peer, header, method, target)``
    names the caller; ``call(fn, write)``, if given, runs the handler ``fn()`` (``write``: not a
    GET), e.g. bounding how long it waits for the database (:func:`bounded_write`).

    Steps: check the query; name the caller from the headers (no body read yet); count the
    connection and the request as that party's (429 past the party's limits, :class:`Gate`,
    :class:`marketsched.live.server.Registry`); read the body (the server cuts it at its
    deadline; while waiting the connection may be evicted to make room); only then take a
    request slot and run the handler on a worker thread. A database busy past the handler's
    wait answers 503 with ``Retry-After`` (:class:`Busy`), logged in one line; any other
    unexpected error is a bug, answered 500 and logged with its traceback."""

    async def endpoint(request: Request) -> Response:
        t0 = asyncio.get_running_loop().time()
        state = request.scope.get("state") or {}
        conn = state.get(CONN_STATE)
        unread = r.body is not None
        party = None
        try:
            q = _query(request, r)
            who = None
            if r.auth:
                target = request.scope["raw_path"].decode("latin-1")
                if request.scope["query_string"]:
                    target += "?" + request.scope["query_string"].decode("latin-1")
                who = authenticate(b, state.get(PEER_STATE), request.headers.get("authorization", ""),
                                   request.method, target)
                if conn is not None and not conn.claim(who):
                    raise MarketError(f"too many connections from {_party_name(who)}, each with a request in progress: "
                                      "wait for an answer before opening more", 429)
                gate.enter(who)
                party = who
            body = {}
            if r.body is not None:
                if conn is not None:
                    conn.waiting_body = True
                try:
                    raw = await _read_body(request)
                finally:
                    if conn is not None:
                        conn.waiting_body = False
                unread = False
                body = parse_body(raw, r.body, r.noun)
            handler = functools.partial(r.handler, b, who, q, body, **request.path_params)
            if call is not None:
                handler = functools.partial(call, handler, r.method != "GET")
            async with gate.slots:
                # the broker's calls block (its lock, the database): on a worker thread
                result = await asyncio.get_running_loop().run_in_executor(pool, handler)
            headers = {}
            if r.paged:
                result, nxt = result
                if nxt is not None:
                    link = urlencode({**q, "before": nxt})
                    headers["link"] = f'<{request.url.path}?{link}>; rel="next"'
            resp = _json(200, result, headers)
        except MarketError as exc:
            if isinstance(exc, Busy):
                log.warning("%s %s: %s", request.method, request.url.path, exc)
            resp = error_response(exc, unread)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening
        except Exception as exc:  # a bug: answer 500 with the message rather than hang up
            if is_busy(exc):  # not a bug: another writer held the database past the wait
                busy = Busy()
                log.warning("%s %s: %s (%s)", request.method, request.url.path, busy, exc)
                resp = error_response(busy, unread)
            else:
                log.exception("internal error on %s %s", request.method, request.url.path)
                resp = _json(500, {"error": f"internal error: {exc!r}"})
        finally:
            if party is not None:
                gate.leave(party)
        return _timed(resp, request, t0)

    endpoint.__name__ = r.handler.__name__
    return endpoint


def bounded_write(broker: Broker, fn, write: bool):
    """Run API handler ``fn()``; a write on a SQLite market waits at most ``BUSY_WAIT`` seconds
    in all, for the broker's lock (held by its loop or another call) and then for the
    database's: the broker's connection otherwise waits up to its store's busy timeout,
    :data:`marketsched.live.ledger.BUSY_TIMEOUT`, which suits the market's loop but not a
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


def page_endpoint(page: str, csp: str):
    """An endpoint serving the self-contained web ``page`` under its Content-Security-Policy."""
    body = page.encode()

    async def home(request: Request) -> Response:
        return Response(body, media_type="text/html; charset=utf-8", headers={
            "cache-control": "no-store", "content-security-policy": csp, "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer", "x-frame-options": "DENY"})

    return home


def json_errors(app: FastAPI) -> None:
    """Starlette's own errors (no such path, method not allowed) answered as ``{"error": ...}``."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        path = _show(request.url.path, 200)
        msg = {404: f"no such path: {path}", 405: f"{request.method} is not allowed on {path}"}.get(
            exc.status_code, str(exc.detail))
        return _json(exc.status_code, {"error": msg}, dict(exc.headers or {}))


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
        return _timed(_json(200, {"ok": True, **stats()}), request, asyncio.get_running_loop().time())

    app.add_api_route("/", home, methods=["GET"], include_in_schema=False)
    app.add_api_route("/api/health", health, methods=["GET"], summary="the server answers (no token)")
    for r in ROUTES:
        app.add_api_route(r.path, _endpoint(broker, r, gate, pool, call=functools.partial(bounded_write, broker)),
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
