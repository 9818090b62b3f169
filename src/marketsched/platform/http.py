"""The HTTP plumbing every live market's API is built with (FastAPI routes served by
:mod:`marketsched.platform.server`): who is calling, strict request bodies and query
parameters, per-party request limits, a busy database answered 503, JSON errors, the web page.

A market declares its routes as :class:`Route` objects (method, path, handler, the body's
fields as JSON schema, the query parameters it takes) and turns each into an endpoint with
:func:`route_endpoint`. The endpoint, in order: checks the query (an unknown or repeated
parameter is refused by name); names the caller from the headers
(:func:`authenticate_caller`: the Unix socket's peer credentials, ``Bearer TOKEN``, or the web
page's signed read ``MarketSig kid=..., t=..., sig=...``); counts the request as that party's
(:class:`Gate`, and the server's per-party connection limit); reads the body (at most
``MAX_BODY`` bytes) and parses it (:func:`parse_body`: one JSON object of the route's fields,
no duplicate field, no object inside it, no list inside a list, no lone surrogate); runs the
handler ``handler(service, who, query, body, **path_params)`` on a worker thread; answers JSON.
A handler refuses a request by raising :class:`~marketsched.platform.validation.MarketError`
with the HTTP status to answer.

The web page's signed reads: the page derives ``H = SHA-256(token)`` (what the database
stores) and signs each read (GET only) with ``HMAC-SHA256(H, "marketsched-page-v1\\nGET\\nPATH?QUERY\\nMILLISECONDS")``
under the key id ``SHA-256("marketsched-kid:" + H)[:32]``
(:mod:`marketsched.platform.tokens`), valid ``PAGE_SIG_WINDOW`` seconds either side of the
server's clock. The live market's API (:mod:`marketsched.live.api`) documents what an
impostor can and cannot do with it.
"""

from __future__ import annotations

import asyncio
import functools
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
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from marketsched.platform.server import CONN_STATE, PEER_STATE
from marketsched.platform.tokens import page_signature
from marketsched.platform.validation import MAX_ID, MarketError, show, utf8, whole

log = logging.getLogger("marketsched.platform.http")

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
    return json_response(exc.status, body, headers or None)


# ---------------------------------------------------------------------------- who is calling
def authenticate_caller(b, peer, header: str, method: str, target: str) -> tuple[str, bool]:
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
        raise MarketError(f"request body is not valid JSON: {show(str(exc), 200)}") from None
    if not isinstance(obj, dict):
        raise MarketError("request body must be a JSON object")
    unknown = set(obj) - set(fields)
    if unknown:
        shown = ", ".join(show(k) for k in sorted(unknown))
        raise MarketError(f"unknown field(s) [{shown}]: {noun} has {', '.join(fields)}")
    for k, v in obj.items():
        _check_value(v, k, 0)
    return obj


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"field {show(dup)} is given twice")
    return dict(pairs)


def _check_value(v, where: str, depth: int) -> None:
    if isinstance(v, str):
        utf8(v, where)
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
        raise MarketError(f"request body too large ({show(int(declared))} bytes, at most {MAX_BODY})", 413)
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > MAX_BODY:
            raise MarketError(f"request body too large (more than {MAX_BODY} bytes)", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def page_limit(q, default: int, most: int = MAX_PAGE) -> int:
    return whole(q["limit"], "limit", 1, most) if "limit" in q else default


def page_before(q):
    return whole(q["before"], "before", 1, MAX_ID) if "before" in q else None


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



NUM, INT, STR = {"type": "number"}, {"type": "integer"}, {"type": "string"}
LIMIT = ({"type": "integer", "minimum": 1, "maximum": MAX_PAGE}, "at most this many (the newest)")
BEFORE = ({"type": "integer", "minimum": 1}, "only ids below this one (the next page back)")


# ---------------------------------------------------------------------------- the application
def json_response(status: int, obj, headers: dict | None = None) -> Response:
    return Response(json.dumps(obj, allow_nan=False, default=str), status_code=status, media_type="application/json",
                    headers={"cache-control": "no-store", **(headers or {})})


def query_params(request: Request, r: Route) -> dict:
    q: dict[str, str] = {}
    for k, v in request.query_params.multi_items():
        if k not in r.query:
            known = ", ".join(r.query) or "none"
            raise MarketError(f"unknown query parameter {show(k)} (this path takes: {known})")
        if k in q:
            raise MarketError(f"query parameter {k} is given twice")
        q[k] = v
    return q


def timed(resp: Response, request: Request, t0: float) -> Response:
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


def route_endpoint(b, r: Route, gate: Gate, pool: ThreadPoolExecutor, authenticate=authenticate_caller, call=None):
    """The ASGI endpoint of route ``r`` on ``b`` (the broker, or another service with the same
    kind of routes: the grid exchange's API); ``authenticate(b, peer, header, method, target)``
    names the caller; ``call(fn, write)``, if given, runs the handler ``fn()`` (``write``: not a
    GET), e.g. bounding how long it waits for the database (:func:`bounded_write`).

    Steps: check the query; name the caller from the headers (no body read yet); count the
    connection and the request as that party's (429 past the party's limits, :class:`Gate`,
    :class:`marketsched.platform.server.Registry`); read the body (the server cuts it at its
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
            q = query_params(request, r)
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
            resp = json_response(200, result, headers)
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
                resp = json_response(500, {"error": f"internal error: {exc!r}"})
        finally:
            if party is not None:
                gate.leave(party)
        return timed(resp, request, t0)

    endpoint.__name__ = r.handler.__name__
    return endpoint


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
        path = show(request.url.path, 200)
        msg = {404: f"no such path: {path}", 405: f"{request.method} is not allowed on {path}"}.get(
            exc.status_code, str(exc.detail))
        return json_response(exc.status_code, {"error": msg}, dict(exc.headers or {}))

