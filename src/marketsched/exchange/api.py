"""The exchange's HTTP API and market information page: a FastAPI application served by the live
market's server (:class:`marketsched.platform.server.Server`: uvicorn with read deadlines, a
connection cap, TLS, plain HTTP on loopback only unless forced), with the live market's request
handling (:mod:`marketsched.platform.http`: body limit, strict JSON, paging, JSON errors).

Who is calling
--------------
Every ``/api/`` request except the public market information (``/api/health``,
``/api/market``, ``/api/market/history``) carries ``Authorization: Bearer TOKEN``. A token is
a party's: a user's (requests) or a provider's (offers), issued by the operator with
``marketsched exchange token DATA NAME --user|--provider`` and stored as its SHA-256 only
(``ex_parties``). A party sees and cancels only its own orders and contracts: another party's
answers 404, exactly as an order that does not exist.

A provider's token may be issued before it has joined: it then joins (``POST /api/join``) and
registers its nodes itself, at most ``MAX_NODES_PER_PROVIDER`` (:mod:`.orders`). The provider a
joining, node or leaving is for is the token's party, never a field of the body, so no party
registers or removes nodes for another. A local provider's node names CPUs of this
machine (``cpus``), none of them backing another provider's node; a Slurm provider's names
none. The operator's ``marketsched exchange join`` and ``node`` remain, and are not bound by
the CPU rule (the operator may share CPUs on purpose).

The market information page reads a party's own orders with the live market's signed reads
(``Authorization: MarketSig ...``, GET only; :mod:`marketsched.platform.http`), so it does not send
the token to refresh; it sends the token itself (``Bearer``) only with an order or
cancellation the party submits on the page, as the command line does.

Requests and answers are JSON; an error answers ``{"error": "..."}`` with status 400 (bad
input: the message names the field), 401 (no or wrong token), 403 (the other role's route),
404 (no such order or contract of the caller's), 413 (body larger than ``MAX_BODY``), 429 (too
many alert streams, or too many requests or connections of the caller's at once), 503 (the
database is busy: another process, such as ``exchange run`` committing a clearing, held its
write lock for longer than the API waits, ``BUSY_WAIT`` seconds; the answer carries
``Retry-After`` and nothing was done; see :class:`ExchangeService`). Every
number is bounded (:mod:`.orders`), and prices are in currency units per CPU unit per slot.

======  ==============================  ========================================================
method  path                            what
======  ==============================  ========================================================
GET     ``/``                           the market information page (prices over time, open book)
GET     ``/api/health``                 ``{"ok": true, ...}``
GET     ``/api/market``                 now: time, slot, settings, last clearing, open book in aggregate
GET     ``/api/market/history``         ``?after=PERIOD&limit=N``: per period volume, price per CPU class, open interest
GET     ``/api/me``                     who the caller is: ``{"role", "name"}`` (a provider: also ``joined``, ``kind``, ...)
POST    ``/api/join``                   provider: ``{"kind": "local"|"slurm"|"agent", "partition"?}``
POST    ``/api/nodes``                  provider: ``{"name", "cpu", "mem", "cpus"?}`` (a local provider's CPUs of the machine)
GET     ``/api/nodes``                  provider: own nodes (``left_t``: when one left)
POST    ``/api/nodes/NAME/leave``       provider: the node leaves (open offers cancelled; contracts stand)
POST    ``/api/leave``                  provider: leave with every node
POST    ``/api/requests``               user: ``{"value", "cpu", "mem"?, "first_slot", "last_slot", "command"}``
POST    ``/api/offers``                 provider: ``{"node", "reserve", "first_slot", "last_slot"}``
GET     ``/api/balance``                user: ``{"balance", "committed", "available", "deposits_required"}``
GET     ``/api/statement``              own ledger entries and balance; ``?limit=N&before=ID``
GET     ``/api/orders``                 own orders; ``?state=open,filled&limit=N&before=ID``
GET     ``/api/orders/ID``              one own order
POST    ``/api/orders/ID/cancel``       withdraw an own open order (also ``DELETE /api/orders/ID``)
GET     ``/api/contracts``              own contracts (a user's or a provider's); ``?state=&limit=&before=``
GET     ``/api/contracts/ID``           one own contract
GET     ``/api/alerts``                 ``?below=X&above=Y&cpu=C&after=PERIOD``: price alerts, server-sent events
GET     ``/api/provider/ask``           provider agent: its open ask of a distributed clearing (:mod:`.provider_protocol`)
POST    ``/api/provider/answer``        provider agent: ``{"ask", "answer"}``, one answer per ask before its deadline
GET     ``/api/provider/runs``          agent provider: the contracts its agent runs now (:mod:`.agent_runs`)
POST    ``/api/provider/runs/ID/*``     agent provider: ``.../started`` (recorded only); ``.../ended``, its one report
GET     ``/api/contracts/ID/output``    a run's reported output (to its user or provider)
======  ==============================  ========================================================

An exchange in Egg mode also answers the routes under ``/api/egg/`` (:mod:`.egg_api`).

List views return the newest ``limit`` (at most ``MAX_PAGE``) items below ``before``, oldest
first; the next page's address is in the ``Link`` header (``rel="next"``).

Price alerts
------------
``GET /api/alerts`` answers ``text/event-stream`` (server-sent events) and stays open. After
every clearing whose price (of CPU class ``cpu``, or of the whole period) is below ``below``
or above ``above`` (at least one of them), the stream carries::

    id: PERIOD
    event: price
    data: {"period": ..., "t": ..., "cpu": C or null, "price": ..., "contracts": ..., "volume": ...}

Clearings with no trade in the class have no price and no alert. A subscriber that comes back
with ``after=PERIOD`` (or the header ``Last-Event-ID``, as a browser's ``EventSource`` sends)
gets the alerts of the clearings it missed first. One party holds at most
``MAX_STREAMS_PER_PARTY`` streams, the server at most ``MAX_STREAMS``.
"""

from __future__ import annotations

import asyncio
import bisect
import hmac
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

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
    authenticate_caller,
    error_response,
    is_busy,
    json_errors,
    json_response,
    page_before,
    page_endpoint,
    page_limit,
    query_params,
    route_endpoint,
)
from marketsched.platform.query import select
from marketsched.platform.server import Limits, Server
from marketsched.platform.tokens import hash_token, page_key_id
from marketsched.platform.validation import MAX_ID, MarketError, number, show, whole

from .agent_runs import RUN_ROUTES
from .core import Exchange
from .egg_api import ROUTES as EGG_ROUTES
from .info import market_info, open_book
from .orders import MAX_CPU, MAX_PRICE, PROVIDER_KINDS, check_name
from .provider_protocol import PROVIDER_ROUTES
from .store import CONTRACT_COLUMNS, MICRO, ORDER_COLUMNS, ExchangeStore, provider_account, user_account

MAX_STREAMS = 256  # alert streams the server holds at once
MAX_STREAMS_PER_PARTY = 4
ALERT_POLL = 0.5  # seconds between looks for a new clearing
BUSY_POLL = 0.05  # seconds of one try of a busy database, and of the pause between tries (ExchangeService)
KEEP_ALIVE = 15.0  # seconds between comments on a quiet alert stream (a dead client is found on write)
ORDER_STATES = ("open", "filled", "expired", "cancelled")
CONTRACT_STATES = ("pending", "starting", "running", "delivered", "failed", "lapsed")
ROLES = ("user", "provider")
_SIDE = {"user": "request", "provider": "offer"}


def issue_token(store: ExchangeStore, role: str, name: str, t: float) -> str:
    """A new token for party ``(role, name)`` (its old one stops working); only its hash is
    stored. A provider may join with it (``POST /api/join``) or have joined by the operator's
    ``marketsched exchange join``."""
    if role not in ROLES:
        raise ValueError(f"party role must be one of {', '.join(ROLES)}, got {role!r}")
    check_name(role, "name", name)
    token = secrets.token_urlsafe(32)
    store.set_token_hash(role, name, hash_token(token), t)
    return token


class ExchangeService:
    """What the API does, on the exchange of ``store`` at ``clock()``: one call at a time (the
    database connection is shared by the server's worker threads). Tokens are looked up on a
    read-only connection of their own, so that the server's thread, which checks them, never
    waits for a write. Market information of past periods does not change, so each period's
    row is computed once and kept.

    A busy database (another process, ``exchange run`` committing a clearing or an operator's
    command, holds the write lock): each call tries for ``BUSY_POLL`` seconds, then lets the
    other calls have the connection for as long, and so on for at most ``busy_wait`` seconds
    (default :data:`marketsched.platform.http.BUSY_WAIT`); then :class:`~marketsched.platform.http.Busy`,
    answered 503 with ``Retry-After``. So a waiting write never holds up reads (the write-ahead
    log lets them read meanwhile) for more than one try. ``store``'s connection is the
    service's own (``exchange serve`` opens it): its busy timeout becomes ``BUSY_POLL``."""

    def __init__(self, store: ExchangeStore, clock: Callable[[], float], busy_wait: float = BUSY_WAIT):
        self.exchange = Exchange(store, clock)
        self.store = store
        self.busy_wait = busy_wait
        store.conn.execute(f"PRAGMA busy_timeout = {round(BUSY_POLL * 1000)}")
        self.lock = threading.Lock()
        self._tokens = sqlite3.connect(f"{store.path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
        self._tokens_lock = threading.Lock()
        self._info: list[dict] = []  # market_info rows of the periods so far, in order

    def close(self) -> None:
        self._tokens.close()

    def authenticate(self, token: str | None) -> tuple[str, str]:
        if not token:
            raise MarketError("no token: send the header 'Authorization: Bearer TOKEN'", 401)
        with self._tokens_lock:
            rows = self._tokens.execute("SELECT role, name FROM ex_parties WHERE token_hash = ?",
                                        (hash_token(token),)).fetchall()
        if not rows:
            raise MarketError("wrong token: no party has this token", 401)
        return rows[0][0], rows[0][1]

    def page_user(self, key_id: str) -> tuple[str, str, str] | None:
        """``(role, name, token hash)`` of the party whose web-page key id is ``key_id``
        (:func:`marketsched.platform.tokens.page_key_id`), or None: the live market's signed reads
        (``MarketSig``, GET only) are checked by the platform (:mod:`marketsched.platform.http`)."""
        with self._tokens_lock:
            rows = self._tokens.execute("SELECT role, name, token_hash FROM ex_parties").fetchall()
        for role, name, token_hash in rows:  # few parties: the key ids are not stored
            if hmac.compare_digest(page_key_id(token_hash), key_id):
                return role, name, token_hash
        return None

    def _locked(self, fn, *args):
        """``fn(*args)`` under the service's lock, tried again while the database is busy (the
        lock released between tries) for at most ``busy_wait`` seconds; then :class:`Busy`.
        Each write of the exchange is one transaction, which a busy database refuses when it
        begins, before anything is written: trying it again cannot do it twice."""
        deadline = time.monotonic() + self.busy_wait
        while True:
            with self.lock:
                try:
                    return fn(*args)
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise
                    if time.monotonic() >= deadline:
                        raise Busy("exchange's database") from None
            time.sleep(BUSY_POLL)

    def _do(self, fn, *args):
        try:
            return self._locked(fn, *args)
        except ValueError as exc:
            raise MarketError(str(exc)) from None

    # ------------------------------------------------------------------ orders
    def submit_request(self, who, body: dict) -> dict:
        _role(who, "user", "submit requests")
        _need(body, ("value", "cpu", "first_slot", "last_slot", "command"), "a request")
        oid = self._do(self.exchange.submit_request, who[1], body["value"], body["cpu"], body.get("mem", 0),
                       body["first_slot"], body["last_slot"], body["command"])
        return self.order(who, oid)

    def submit_offer(self, who, body: dict) -> dict:
        _role(who, "provider", "submit offers")
        _need(body, ("node", "reserve", "first_slot", "last_slot"), "an offer")
        oid = self._do(self.exchange.submit_offer, who[1], body["node"], body["reserve"], body["first_slot"],
                       body["last_slot"])
        return self.order(who, oid)

    def order(self, who, order_id) -> dict:
        oid = whole(order_id, "order id", 1, MAX_ID)
        o = self._locked(self.store.order, oid)
        if o is None or o["owner"] != who[1] or o["side"] != _SIDE[who[0]]:
            raise MarketError(f"no order {oid} of yours", 404)
        return _order_view(o)

    def cancel(self, who, order_id) -> dict:
        oid = self.order(who, order_id)["id"]  # 404 unless it is the caller's
        self._do(self.exchange.cancel, who[1], oid)
        return self.order(who, oid)

    def orders(self, who, states, limit: int, before: int | None) -> list[dict]:
        rows = self._page(ORDER_COLUMNS, "ex_orders", [("owner = ? AND side = ?", (who[1], _SIDE[who[0]]))],
                          _states(states, ORDER_STATES), limit, before)
        return [_order_view(o) for o in rows]

    # ------------------------------------------------------------------ providers
    def join(self, who, body: dict) -> dict:
        _role(who, "provider", "join")
        _need(body, ("kind",), "a joining")
        self._do(self.exchange.join, who[1], body["kind"], body.get("partition"), True)
        return self.me(who)

    def add_node(self, who, body: dict) -> dict:
        _role(who, "provider", "register nodes")
        _need(body, ("name", "cpu", "mem"), "a node")
        if self._locked(self.store.provider, who[1]) is None:
            raise MarketError(f"provider {who[1]!r} has not joined: POST /api/join first")
        node_id = self._do(self.exchange.add_node, who[1], body["name"], body["cpu"], body["mem"], body.get("cpus"),
                           True)
        return _node_view(self._locked(self.store.nodes, node_id)[node_id])

    def nodes(self, who) -> list[dict]:
        _role(who, "provider", "have nodes")
        return [_node_view(n) for n in self._locked(self.store.nodes).values() if n["provider"] == who[1]]

    def leave(self, who, node: str | None) -> dict:
        _role(who, "provider", "leave")
        cancelled = self._do(self.exchange.leave, who[1], node)
        return {**self.me(who), "cancelled_offers": cancelled}

    def balance(self, who) -> dict:
        """A user's money in currency units: ``balance``, ``committed``, ``available``
        (:meth:`.store.ExchangeStore.available`), and whether requests must be covered."""
        _role(who, "user", "have deposits")
        money = self._locked(self.store.available, who[1])
        return {**{k: v / MICRO for k, v in money.items()}, "deposits_required": bool(self.exchange.settings["deposits"])}

    def statement(self, who, q: dict) -> dict:
        """The caller's ledger entries and balance (:meth:`.store.ExchangeStore.statement`), a
        user's or a provider's. ``?user=NAME`` or ``?provider=NAME`` may name the caller, as the
        market's ``/api/statement?user=`` does for its administrator; naming another party is
        refused (403): a party sees only its own money."""
        named = [(role, q[role]) for role in ROLES if role in q]
        if len(named) > 1:
            raise MarketError("give user or provider, not both")
        if named and named[0] != tuple(who):
            raise MarketError(f"a party sees only its own statement; this token is {who[0]} {who[1]!r}'s", 403)
        account = (user_account if who[0] == "user" else provider_account)(who[1])
        out = self._locked(self.store.statement, account, page_limit(q, 200), page_before(q))
        return {"role": who[0], "name": who[1], **out}

    def me(self, who) -> dict:
        """Who the caller is; a provider's kind, partition and when it joined and left."""
        out = {"role": who[0], "name": who[1]}
        if who[0] == "provider":
            p = self._locked(self.store.provider, who[1])
            out.update({"joined": p is not None, **({k: p[k] for k in ("kind", "partition", "left_t")} if p else {})})
        return out

    # ------------------------------------------------------------------ contracts
    def contract(self, who, contract_id) -> dict:
        cid = whole(contract_id, "contract id", 1, MAX_ID)
        try:
            c = self._locked(self.store.contract, cid)
        except KeyError:
            c = None
        if c is None or c[who[0]] != who[1]:
            raise MarketError(f"no contract {cid} of yours", 404)
        return _contract_view(c)

    def contracts(self, who, states, limit: int, before: int | None) -> list[dict]:
        rows = self._page(CONTRACT_COLUMNS, "ex_contracts", [(f"{who[0]} = ?", (who[1],))],
                          _states(states, CONTRACT_STATES), limit, before)
        return [_contract_view(c) for c in rows]

    def _page(self, columns, table: str, conds: list, states, limit: int, before):
        """The newest ``limit`` rows of ``table`` passing ``conds`` (the caller's own: each a
        tuple of values, so never left out), in ``states``, ids below ``before``; oldest first."""
        sql, params = select(table, columns, conds, states, before, limit)
        return self._locked(self.store.dicts, columns, sql, params)

    # ------------------------------------------------------------------ market information
    def market(self) -> dict:
        ex = self.exchange
        info, book = self._locked(lambda: (self._market_info(), open_book(self.store)))
        s = ex.settings
        return {"t": ex.clock(), "slot": ex.slot(), "mechanism": s["mechanism"], "slot_seconds": s["slot_seconds"],
                "period_seconds": s["period_seconds"], "last": info[-1] if info else None, "open_book": book}

    def history(self, after: int | None, limit: int) -> list[dict]:
        """``market_info(store, after, limit)``, from the rows kept."""
        info = self._locked(self._market_info)
        if after is None:
            return info[-limit:]
        start = bisect.bisect_right([r["period"] for r in info], after)
        return info[start:start + limit]

    def _market_info(self) -> list[dict]:
        self._info += market_info(self.store, after=self._info[-1]["period"] if self._info else 0)
        return self._info


def _role(who, role: str, what: str) -> None:
    if who[0] != role:
        raise MarketError(f"only {role}s {what}; this token is {who[0]} {who[1]!r}'s", 403)


def _need(body: dict, fields, noun: str) -> None:
    missing = [f for f in fields if f not in body]
    if missing:
        raise MarketError(f"{noun} needs {', '.join(missing)}; not given")


def _states(text: str | None, known) -> list[str] | None:
    states = [s for s in (text or "").split(",") if s]
    bad = [s for s in states if s not in known]
    if bad:
        raise MarketError(f"state must be among {', '.join(known)}, got {show(bad[0])}")
    return states or None


def _order_view(o: dict) -> dict:
    """An order as its party sees it: a request with its command (a cancelled or expired one:
    only its SHA-256 and length, ``command_sha256``, ``command_bytes``), an offer with its
    node's id."""
    return {k: o[k] for k in ("id", "side", "owner", "node_id", "value", "cpu", "mem", "first_slot", "last_slot",
                              "command", "command_sha256", "command_bytes", "submit_t", "state", "closed_t")
            if k not in ("command", "command_sha256", "command_bytes", "node_id")
            or (k != "node_id") == (o["side"] == "request")}


def _node_view(n: dict) -> dict:
    return {k: n[k] for k in ("id", "name", "cpu", "mem", "cpus", "left_t")}


def _contract_view(c: dict) -> dict:
    out = {k: c[k] for k in CONTRACT_COLUMNS}
    for k in ("user_price", "provider_price", "penalty"):
        out[k] = c[k] / MICRO
    return out


def _bound(q: dict, name: str, lo: float, hi: float) -> float | None:
    if name not in q:
        return None
    try:
        x = float(q[name])
    except ValueError:
        raise MarketError(f"{name} must be a number, got {show(q[name])}") from None
    x = number(x, name)
    if not lo <= x <= hi:
        raise MarketError(f"{name} must be a number from {lo:g} to {hi:g}, got {x!r}")
    return x


# ---------------------------------------------------------------------------- routes
STATE = (STR, "comma-separated states")


def _paged(items: list[dict], limit: int):
    return items, (items[0]["id"] if len(items) == limit and items[0]["id"] > 1 else None)


ROUTES = [
    Route("GET", "/api/me", lambda s, who, q, body: s.me(who), "who the caller is"),
    Route("POST", "/api/join", lambda s, who, q, body: s.join(who, body), "provider: join the exchange",
          noun="a joining", required=("kind",),
          body={"kind": {**STR, "enum": list(PROVIDER_KINDS)}, "partition": STR}),
    Route("POST", "/api/leave", lambda s, who, q, body: s.leave(who, None),
          "provider: leave with every node (open offers cancelled; contracts stand)", noun="a leaving", body={}),
    Route("GET", "/api/balance", lambda s, who, q, body: s.balance(who),
          "user: deposited balance, committed, available"),
    Route("GET", "/api/statement", lambda s, who, q, body: s.statement(who, q),
          "own ledger entries and balance (a user's or a provider's)",
          query={"user": (STR, "must be the caller"), "provider": (STR, "must be the caller"), "limit": LIMIT,
                 "before": BEFORE}),
    Route("GET", "/api/nodes", lambda s, who, q, body: s.nodes(who), "provider: own nodes"),
    Route("POST", "/api/nodes", lambda s, who, q, body: s.add_node(who, body), "provider: register a node",
          noun="a node", required=("name", "cpu", "mem"),
          body={"name": STR, "cpu": INT, "mem": INT,
                "cpus": {"type": "array", "items": INT, "description": "local provider: CPUs of the machine"}}),
    Route("POST", "/api/nodes/{name}/leave", lambda s, who, q, body, name: s.leave(who, name),
          "provider: a node leaves (its open offers cancelled; contracts stand)", noun="a leaving", body={}),
    Route("POST", "/api/requests", lambda s, who, q, body: s.submit_request(who, body), "user: submit a request",
          noun="a request", required=("value", "cpu", "first_slot", "last_slot", "command"),
          body={"value": {**NUM, "description": "most paid per CPU unit per slot"}, "cpu": INT, "mem": INT,
                "first_slot": INT, "last_slot": INT, "command": STR}),
    Route("POST", "/api/offers", lambda s, who, q, body: s.submit_offer(who, body), "provider: offer a node",
          noun="an offer", required=("node", "reserve", "first_slot", "last_slot"),
          body={"node": STR, "reserve": {**NUM, "description": "reserve price per CPU unit per slot"},
                "first_slot": INT, "last_slot": INT}),
    Route("GET", "/api/orders", lambda s, who, q, body: _paged(
        s.orders(who, q.get("state"), page_limit(q, MAX_PAGE), page_before(q)), page_limit(q, MAX_PAGE)),
          "own orders, oldest first", paged=True, query={"state": STATE, "limit": LIMIT, "before": BEFORE}),
    Route("GET", "/api/orders/{order_id}", lambda s, who, q, body, order_id: s.order(who, order_id), "one own order"),
    Route("POST", "/api/orders/{order_id}/cancel", lambda s, who, q, body, order_id: s.cancel(who, order_id),
          "withdraw an own open order", noun="a cancellation", body={}),
    Route("DELETE", "/api/orders/{order_id}", lambda s, who, q, body, order_id: s.cancel(who, order_id),
          "withdraw an own open order"),
    Route("GET", "/api/contracts", lambda s, who, q, body: _paged(
        s.contracts(who, q.get("state"), page_limit(q, MAX_PAGE), page_before(q)), page_limit(q, MAX_PAGE)),
          "own contracts, oldest first", paged=True, query={"state": STATE, "limit": LIMIT, "before": BEFORE}),
    Route("GET", "/api/contracts/{contract_id}", lambda s, who, q, body, contract_id: s.contract(who, contract_id),
          "one own contract"),
    Route("GET", "/api/market", lambda s, who, q, body: s.market(), "now: settings, last clearing, open book",
          auth=False),
    Route("GET", "/api/market/history", lambda s, who, q, body: s.history(
        whole(q["after"], "after", 0, MAX_ID) if "after" in q else None, page_limit(q, MAX_PAGE)),
          "per period: volume, price per CPU class, open interest", auth=False,
          query={"after": ({"type": "integer", "minimum": 0}, "only periods after this one (the oldest first)"),
                 "limit": LIMIT}),
]




# ---------------------------------------------------------------------------- price alerts
class AlertHub:
    """Alert streams: one watcher looks for new clearings every ``ALERT_POLL`` seconds and hands
    each to every stream (each filters by its own condition)."""

    def __init__(self, service: ExchangeService, pool: ThreadPoolExecutor):
        self.service = service
        self.pool = pool
        self.streams: dict[asyncio.Queue, tuple[str, str]] = {}
        self.closed = False
        self._task: asyncio.Task | None = None
        self._last = 0

    def open(self, who, latest: int) -> asyncio.Queue:
        """A new stream of party ``who``, opened when ``latest`` was the last clearing."""
        if len(self.streams) >= MAX_STREAMS:
            raise MarketError(f"the exchange holds {MAX_STREAMS} alert streams, its most: try again later", 429)
        if sum(1 for p in self.streams.values() if p == who) >= MAX_STREAMS_PER_PARTY:
            raise MarketError(f"{who[1]} has {MAX_STREAMS_PER_PARTY} alert streams open, the most one party may: "
                              "close one", 429)
        q: asyncio.Queue = asyncio.Queue()
        self.streams[q] = who
        if self._task is None or self._task.done():
            self._last = latest
            self._task = asyncio.get_running_loop().create_task(self._watch())
        return q

    def close(self, q: asyncio.Queue) -> None:
        self.streams.pop(q, None)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while self.streams and not self.closed:
            await asyncio.sleep(ALERT_POLL)
            try:
                rows = await loop.run_in_executor(self.pool, self.service.history, self._last, MAX_PAGE)
            except Busy:
                continue  # the database is busy: look again at the next poll
            for row in rows:
                for q in list(self.streams):
                    q.put_nowait(row)
            if rows:
                self._last = rows[-1]["period"]


def _alert(row: dict, cpu: int | None, below: float | None, above: float | None) -> str | None:
    if cpu is None:
        price = row["price"]
    else:
        price = row["classes"].get(cpu, {}).get("price")
    if price is None or not ((below is not None and price < below) or (above is not None and price > above)):
        return None
    data = {"period": row["period"], "t": row["t"], "cpu": cpu, "price": price, "contracts": row["contracts"],
            "volume": row["volume"]}
    return f"id: {row['period']}\nevent: price\ndata: {json.dumps(data)}\n\n"


def _alerts_endpoint(service: ExchangeService, hub: AlertHub, pool: ThreadPoolExecutor):
    query = {"below": (NUM, "alert when the price is below this"), "above": (NUM, "alert when above this"),
             "cpu": (INT, "the CPU class (default: the period's price)"),
             "after": (INT, "first the alerts of the clearings after this period")}
    route = Route("GET", "/api/alerts", None, "price alerts (server-sent events)", query=query)  # type: ignore[arg-type]

    async def alerts(request: Request) -> Response:
        loop = asyncio.get_running_loop()
        try:
            q = query_params(request, route)
            header = request.headers.get("authorization", "")
            who = await loop.run_in_executor(pool, service.authenticate,
                                             header[7:].strip() if header.startswith("Bearer ") else None)
            below, above = _bound(q, "below", 0, MAX_PRICE), _bound(q, "above", 0, MAX_PRICE)
            if below is None and above is None:
                raise MarketError("give the alert's condition: below=PRICE, above=PRICE or both")
            cpu = whole(q["cpu"], "cpu", 1, MAX_CPU) if "cpu" in q else None
            resume = q.get("after", request.headers.get("last-event-id"))
            after = whole(resume, "after", 0, MAX_ID) if resume is not None else None
            latest = (await loop.run_in_executor(pool, service.history, None, 1) or [{"period": 0}])[-1]["period"]
            stream = hub.open(who, latest)
        except MarketError as exc:
            return error_response(exc)

        async def events():
            try:
                yield f": price alerts for {who[1]}\nretry: 2000\n\n"
                seen = latest  # the watcher brings the clearings after it
                if after is not None:
                    seen = after
                    while True:  # the clearings missed, a page at a time
                        rows = await loop.run_in_executor(pool, service.history, seen, MAX_PAGE)
                        for row in rows:
                            seen = row["period"]
                            msg = _alert(row, cpu, below, above)
                            if msg:
                                yield msg
                        if len(rows) < MAX_PAGE:
                            break
                quiet = time.monotonic()
                while not hub.closed:
                    try:
                        row = await asyncio.wait_for(stream.get(), timeout=1.0)
                    except TimeoutError:
                        if time.monotonic() - quiet >= KEEP_ALIVE:
                            quiet = time.monotonic()
                            yield ": keep-alive\n\n"
                        continue
                    if row["period"] <= seen:
                        continue
                    seen = row["period"]
                    msg = _alert(row, cpu, below, above)
                    if msg:
                        quiet = time.monotonic()
                        yield msg
            finally:
                hub.close(stream)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store", "x-accel-buffering": "no"})

    return alerts, route


# ---------------------------------------------------------------------------- the application
def make_app(service: ExchangeService, stats=dict, max_in_flight: int = 64, per_party: int = 16) -> FastAPI:
    """The exchange's API on ``service`` as an ASGI application (see the module docstring)."""
    from marketsched import __version__

    from .web import CSP, PAGE

    app = FastAPI(title="marketsched grid exchange", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json", redirect_slashes=False)
    gate = Gate(max_in_flight, per_party)
    pool = app.state.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="exchange-api")
    hub = app.state.alerts = AlertHub(service, pool)
    home = page_endpoint(PAGE, CSP)

    async def health(request: Request) -> Response:
        return json_response(200, {"ok": True, **stats()})

    app.add_api_route("/", home, methods=["GET"], include_in_schema=False)
    app.add_api_route("/api/health", health, methods=["GET"], summary="the server answers (no token)")
    alerts, alerts_route = _alerts_endpoint(service, hub, pool)
    for r in ROUTES + EGG_ROUTES + PROVIDER_ROUTES + RUN_ROUTES:  # Egg mode's (:mod:`.egg_api`) and the provider agents' (:mod:`.provider_protocol`)
        app.add_api_route(r.path, route_endpoint(service, r, gate, pool, authenticate_caller), methods=[r.method],
                          summary=r.summary, openapi_extra=r.openapi(), response_class=Response)
    app.add_api_route("/api/alerts", alerts, methods=["GET"], summary=alerts_route.summary,
                      openapi_extra=alerts_route.openapi(), response_class=Response)
    json_errors(app)
    return app


class ExchangeServer(Server):
    """The exchange's API on ``host:port`` (loopback by default; TLS with ``tls_cert`` and
    ``tls_key``), on the live market's server; :meth:`serve_in_thread` until :meth:`shutdown`."""

    def __init__(self, service: ExchangeService, host: str = "127.0.0.1", port: int = 8766, *, tls_cert=None,
                 tls_key=None, insecure_http: bool = False, limits: Limits | None = None):
        super().__init__(service, host, port, tls_cert=tls_cert, tls_key=tls_key, insecure_http=insecure_http,
                         limits=limits, identity_dir=service.store.path.parent)

    def build_app(self):
        return make_app(self.broker, self.stats, max_in_flight=self.limits.max_in_flight,
                        per_party=self.limits.max_party_requests)

    def shutdown(self) -> None:
        self.app.state.alerts.closed = True  # open alert streams end (within a second)
        super().shutdown()
        self.broker.close()
