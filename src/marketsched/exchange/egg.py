"""Egg mode of the exchange: the market infrastructure of Kang & Parkes (2007) on live jobs.

An exchange made with ``mechanism="egg"`` (``marketsched exchange init --mechanism egg``) does not
clear periodically. It runs the library's Egg infrastructure
(:class:`marketsched.mechanisms.online.egg.Market`: the same price book, estimators, per-bid
auctioneer, escrow and reliability ledger as the simulator) on the exchange's clock, with the
exchange's providers, nodes, backends, fault table and ledger:

1. **Price tables** (Kang & Parkes 2007, section 2.4): a provider posts its table with its token
   (``POST /api/egg/prices``); the library checks definition 6 and refuses an inadmissible
   table naming every offending cell. Column 0 is the current slot. A provider's first table is
   checked as the library checks a market's initial tables (:func:`first_table`).
2. **Bids** (section 3, step 1): a user bids a value schedule (a value and a deadline, linear or
   constant, or steps), a description (one number per resource axis of the exchange's Egg
   settings: by default the run time in seconds) and a minimum reliability. The bid is stamped
   with the exchange's time. The library's auctioneer (equations 3-5) asks the providers with a
   node big enough for the job (:func:`_able`) and picks the provider, the completion time
   ``tau*`` and the price.
3. **Escrow** (step 1d): the price moves from the user's account to ``exchange:escrow`` at the
   award. A bid needs the user's available balance to cover its highest value (the most any award
   can cost), so a user with no money gets no award.
4. **The contract**: the job starts at once (at the exchange's next step) on the provider's first
   node, in id order, that has the bid's CPU units and memory free beside the Egg contracts open on
   it, contained to them like any exchange contract (:mod:`.providers`; a provider of kind
   ``agent`` has its own agent process run it, :mod:`.agent_runs`); its window ends at ``tau*``. The exchange's fault table gives the verdict (docs/exchange.md, "Who is at fault"):
   *delivered* (the job ended by itself, or ran until ``tau*``, and was given what it bought as
   measured), *failed* (the provider's side: no node with room, could not start, ended the job,
   gave less than contracted) or *lapsed* (the exchange's side: it was down through the window, or
   could not run the job as its user's account).
5. **Settlement at tau*** (steps 2a-2c): not before ``tau*`` (rule R6: the result is withheld until
   then), the escrow entry is paid to the provider if delivered and refunded to the user otherwise;
   the provider's reliability (the library's Beta ledger) records delivered as a success and failed
   as a failure.

Decisions (the exchange's; the paper leaves them open):

* A *lapsed* contract is refunded and not recorded in the provider's reliability: the exchange, not
  the provider, failed it (the fault table's rule, applied to Egg's record).
* A job still running at ``tau*`` is stopped then and counts as delivered, as in the exchange's
  fault table (the provider held the contracted resources for the whole window); Egg's "completed
  by tau*" is, live, "given what it bought until tau*".
* Providers are indexed in the order they joined; a provider that joins later enlarges the market
  (its table starts not offered, ``+inf``), which changes no earlier award.
* Estimators are the identity on the description for every provider (the exchange measures what a
  job gets; it does not learn per-provider estimates).

**Records and replay.** Every action that changes the market is an event of ``ex_egg_events`` (time,
kind, provider, data): a table posted, a bid, a settlement. The market is a function of these
events: :class:`EggMarket` keeps the library's market in memory and applies the events it has not
seen (those of another process included) before each action; :func:`replay` rebuilds it from the
events alone and returns every bid's choice and payment (micro-units), which equal the recorded
contracts' for a faithful record.
"""

from __future__ import annotations

import json
import math

import numpy as np

from marketsched.mechanisms.online.egg import (
    AdmissibilityError,
    Bid,
    BidBatch,
    EstimatorStore,
    Linear,
    LinearEstimator,
    Market,
    PriceBook,
    Steps,
)
from marketsched.mechanisms.online.egg.presets import RT_EDGES

from .egg_books import ESCROW, contracts
from .orders import MAX_COMMAND_BYTES, MAX_CPU, MAX_MEM, MAX_PRICE, check_whole
from .store import MICRO, ExchangeStore, provider_account, to_micro, user_account

EGG_KEY = "exchange.egg"  # meta: the Egg settings (JSON)
MAX_STEPS = 16  # pieces of a bid's value schedule
OPEN = ("pending", "starting", "running")
FINAL = ("delivered", "failed", "lapsed")


# ---------------------------------------------------------------------------- settings
def default_settings(patience_slots: int = 24, horizon_slots: int | None = None, edges=None,
                     runtime_dim: int | None = 0) -> dict:
    """Egg's settings: resource bucket ``edges`` (one list per axis; default the run time in
    seconds, the library's reproduction buckets), the patience bound ``Delta`` in slots, the
    number of price columns (default ``2 * Delta + 2`` so that new columns enter unlocked) and
    which axis is the run time (None: none)."""
    edges = [list(RT_EDGES)] if edges is None else [list(map(float, e)) for e in edges]
    patience_slots = check_whole("egg setting", "patience_slots", patience_slots, 1, 1000)
    horizon = 2 * patience_slots + 2 if horizon_slots is None else horizon_slots
    horizon = check_whole("egg setting", "horizon_slots", horizon, patience_slots + 1, 2000)
    if runtime_dim is not None:
        runtime_dim = check_whole("egg setting", "runtime_dim", runtime_dim, 0, len(edges) - 1)
    cfg = {"edges": edges, "patience_slots": patience_slots, "horizon_slots": horizon, "runtime_dim": runtime_dim}
    _geometry(cfg, 1.0, 1)  # the library checks the edges
    return cfg


def save_settings(store: ExchangeStore, cfg: dict) -> None:
    store.ledger.set_meta(EGG_KEY, json.dumps(cfg))


def settings_of(store: ExchangeStore) -> dict:
    raw = store.ledger.get_meta(EGG_KEY)
    if raw is None:
        raise ValueError(f"the exchange at {store.path} does not run Egg (exchange init --mechanism egg)")
    return json.loads(raw)


def _geometry(cfg: dict, slot: float, k: int, start: float = 0.0) -> Market:
    """A fresh library market of ``k`` providers with the settings' geometry, starting at ``start``."""
    delta = cfg["patience_slots"] * slot
    L = len(cfg["edges"])
    book = PriceBook(k, cfg["edges"], slot=slot, delta=delta, horizon=cfg["horizon_slots"], start=start)
    est = EstimatorStore([LinearEstimator(np.zeros(L), np.eye(L)) for _ in range(k)], delta, cfg["runtime_dim"])
    return Market(book, est)


# ---------------------------------------------------------------------------- JSON of tables and bids
def table_json(table: np.ndarray) -> list:
    """A price table as JSON: ``null`` for a cell not offered (``+inf``)."""
    return [None if np.isinf(x) else float(x) for x in np.asarray(table, float).reshape(-1)] if np.ndim(table) == 1 \
        else [table_json(row) for row in table]


def table_of(data, shape: tuple) -> np.ndarray:
    """A price table from JSON, flat in row-major order (resource buckets, then slot columns) or
    nested; ``null``: not offered. ValueError naming the problem."""
    size = int(np.prod(shape))
    try:
        arr = np.array(data, dtype=object)
    except (ValueError, TypeError):
        arr = None
    if arr is not None and arr.shape == (size,):
        arr = arr.reshape(shape)
    if arr is None or arr.shape != shape:
        got = None if arr is None else arr.shape
        raise ValueError(f"prices field 'prices' must be a list of {size} numbers (buckets {list(shape[:-1])} x "
                         f"{shape[-1]} slot columns from the current slot, row by row), got shape "
                         f"{list(got) if got else 'ragged'}")
    out = np.empty(shape)
    for idx, v in np.ndenumerate(arr):
        if v is None:
            out[idx] = np.inf
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 <= v <= MAX_PRICE):
            raise ValueError(f"prices field 'prices': cell {list(idx)} (buckets, slot column) must be a number from 0 "
                             f"to {MAX_PRICE:g} or null (not offered), got {v!r}")
        else:
            out[idx] = float(v)
    return out


def check_bid(body: dict, n_attributes: int) -> dict:
    """A user's Egg bid, checked: ``description`` (one number >= 0 per resource axis), either
    ``value`` and ``deadline`` (seconds after the arrival; ``value_end``, default ``value``: the
    value at the deadline, linear in between) or ``until`` and ``values`` (a step schedule:
    ``values[i]`` until ``until[i]`` seconds after the arrival, not increasing), ``min_reliability`` in [0, 1],
    ``cpu`` and ``mem`` of the job's containment, ``command``. ValueError naming the field."""
    desc = body.get("description")
    if not isinstance(desc, list) or len(desc) != n_attributes or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or not (math.isfinite(x) and 0 <= x <= 1e12)
            for x in desc):
        raise ValueError(f"bid field 'description' must be a list of {n_attributes} number(s) from 0 to 1e12 (one "
                         f"per resource axis of the exchange's Egg settings), got {desc!r}"[:300])
    linear = None
    if "until" in body or "values" in body:
        if "value" in body or "deadline" in body or "value_end" in body:
            raise ValueError("bid fields: give either 'until' and 'values' or 'value' and 'deadline', not both")
        until, values = body.get("until"), body.get("values")
        if not isinstance(until, list) or not isinstance(values, list) or len(until) != len(values) or \
                not 1 <= len(until) <= MAX_STEPS:
            raise ValueError(f"bid fields 'until' and 'values' must be lists of the same length, 1 to {MAX_STEPS} "
                             f"(the value is values[i] until until[i] seconds after the arrival)")
    else:
        if "value" not in body or "deadline" not in body:
            raise ValueError("bid fields 'value' and 'deadline' (seconds after the bid's arrival) are required "
                             "(or 'until' and 'values')")
        until, values = [body["deadline"]], [body["value"]]
        linear = body.get("value_end", body["value"])
    for name, xs, hi in (("until", until, 1e9), ("values", values, MAX_PRICE)):
        for i, x in enumerate(xs):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (math.isfinite(x) and 0 <= x <= hi):
                raise ValueError(f"bid field {name!r} entry {i} must be a number from 0 to {hi:g}, got {x!r}")
    until, values = [float(x) for x in until], [float(x) for x in values]
    if linear is not None and (isinstance(linear, bool) or not isinstance(linear, (int, float))
                               or not (math.isfinite(linear) and 0 <= linear <= values[0])):
        raise ValueError(f"bid field 'value_end' must be a number from 0 to the bid's 'value', got {linear!r}")
    if until[0] <= 0 or any(b <= a for a, b in zip(until, until[1:])):
        raise ValueError(f"bid field 'until' (or 'deadline'): the times must be > 0 and increase, got {until}")
    if any(b > a for a, b in zip(values, values[1:])):
        raise ValueError(f"bid field 'values': values must not increase (value is for completion by a time), "
                         f"got {values}")
    gamma = body.get("min_reliability", 0.0)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 <= gamma <= 1:
        raise ValueError(f"bid field 'min_reliability' must be a number from 0 to 1, got {gamma!r}")
    cpu = check_whole("bid", "cpu", body.get("cpu", 1), 1, MAX_CPU)
    mem = check_whole("bid", "mem", body.get("mem", 0), 0, MAX_MEM)
    command = body.get("command")
    if not isinstance(command, str) or not command.strip() or len(command.encode("utf-8", "replace")) > MAX_COMMAND_BYTES:
        raise ValueError(f"bid field 'command' must be a non-empty shell command of at most {MAX_COMMAND_BYTES} bytes")
    out = {"description": [float(x) for x in desc], "until": until, "values": values, "min_reliability": float(gamma),
           "cpu": cpu, "mem": mem, "command": command}
    if linear is not None:
        out["value_end"] = float(linear)
    return out


def library_bid(bid: dict, arrival: float) -> Bid:
    """The library's :class:`Bid` of a checked bid arriving at ``arrival``, on absolute time: a
    value and a deadline are the library's :class:`Linear` schedule from ``value`` at the arrival
    to ``value_end`` at the deadline (``ConstantDeadline`` when equal: the value counts up to
    and at the deadline); ``until`` and ``values`` its :class:`Steps` (half-open pieces)."""
    schedule: Linear | Steps
    if "value_end" in bid:
        schedule = Linear(bid["values"][0], bid["value_end"], arrival, arrival + bid["until"][0])
    else:
        schedule = Steps(tuple([arrival] + [arrival + u for u in bid["until"]]), tuple(bid["values"]))
    view = tuple(bid["view"]) if "view" in bid else None
    return Bid(np.asarray(bid["description"]), schedule, bid["min_reliability"], view)


# ---------------------------------------------------------------------------- the market and its events
class EggMarket:
    """The library's Egg market of the exchange on ``store``, kept in step with its events.

    :meth:`sync` applies the events not seen yet (in id order); a change in the number of
    providers rebuilds the market from every event. Each ``apply_*`` is the library's step for
    one event; the live exchange and :func:`replay` use the same ones.
    """

    def __init__(self, store: ExchangeStore, settings: dict):
        self.store = store
        self.slot = settings["slot_seconds"]
        self.cfg = settings_of(store)
        self.market: Market | None = None
        self.providers: list[str] = []
        self.seen = 0  # last event id applied

    def provider_names(self) -> list[str]:
        return [r[0] for r in self.store.rows("SELECT name FROM ex_providers ORDER BY rowid")]

    def sync(self) -> Market:
        names = self.provider_names()
        if not names:
            raise ValueError("no provider has joined the exchange yet")
        if self.market is None or names != self.providers:
            first = self.store.rows("SELECT MIN(t) FROM ex_egg_events")[0][0]
            self.market = _geometry(self.cfg, self.slot, len(names), 0.0 if first is None else first)
            self.providers = names
            self.seen = 0
        for eid, t, kind, k, data in self.store.rows(
                "SELECT id, t, kind, provider, data FROM ex_egg_events WHERE id > ? ORDER BY id", (self.seen,)):
            apply_event(self.market, t, kind, k, json.loads(data))
            self.seen = eid
        return self.market

    def drop(self) -> None:
        """Forget the market (rebuilt from the events at the next :meth:`sync`): after an error."""
        self.market = None

    def index(self, provider: str) -> int:
        if provider not in self.providers:
            raise ValueError(f"provider {provider!r} has not joined the exchange")
        return self.providers.index(provider)

    def now(self, clock: float) -> float:
        """The time of a new event: the clock, never before the last event (one total order)."""
        last = self.store.rows("SELECT MAX(t) FROM ex_egg_events")[0][0]
        return clock if last is None else max(clock, last)

    def record(self, t: float, kind: str, k: int | None, data: dict) -> int:
        eid = _inserted(self.store.conn.execute("INSERT INTO ex_egg_events (t, kind, provider, data) VALUES "
                                                "(?, ?, ?, ?) RETURNING id", (t, kind, k, json.dumps(data))))
        self.seen = eid
        return eid


def _inserted(cur) -> int:
    """The id an ``INSERT ... RETURNING id`` made."""
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


def first_table(book: PriceBook, k: int, table: np.ndarray) -> None:
    """Provider ``k``'s first table: checked as the library checks a book's initial tables
    (:class:`PriceBook`: rule 1 of definition 6 and the values, no earlier table to compare with
    rule 2). Decision: a provider that joins enters as the library's providers enter a market at
    its start, so it can sell from its first slot; as with a provider back from an inactive period
    (docs/egg.md, "Findings and caveats"), a user who arrived before it joined could have gained by
    arriving later."""
    viol, total = book._check(k, table, locked=np.zeros(book.horizon, bool))
    if total:
        raise AdmissibilityError(viol, total)
    book.prices[k] = table
    book.updates += 1


def apply_event(market: Market, t: float, kind: str, k: int | None, data: dict):
    """One event on the library's market (the total order of ``Market``: advance, then the step)."""
    market.advance(t)
    if kind == "prices":
        if k is None:
            raise ValueError("a price-table event names no provider")
        table = table_of(data["prices"], market.book.prices.shape[1:])
        if data.get("first"):
            first_table(market.book, int(k), table)
        else:
            market.update_prices(int(k), table)
        return None
    if kind == "bid":
        out, entry = market.submit(BidBatch.from_bids([library_bid(data, t)], t, market.n_providers))
        return out, int(entry[0])
    if kind == "settle":
        e = int(data["entry"])
        if data["outcome"] == "lapsed":  # refunded, not the provider's record (module docstring)
            market.escrow.settle([e], [False], t)
        else:
            market.settle([e], [data["outcome"] == "delivered"])
        return None
    raise ValueError(f"unknown Egg event kind {kind!r}")


# ---------------------------------------------------------------------------- actions
def post_prices(eggm: EggMarket, provider: str, prices, clock: float) -> dict:
    """Provider ``provider`` installs its price table now (call inside a transaction).
    ValueError (the library's :class:`AdmissibilityError` among them) names what is wrong; an
    inadmissible table changes nothing."""
    store = eggm.store
    p = store.provider(provider)
    if p is None or p["left_t"] is not None:
        raise ValueError(f"provider {provider!r} has not joined the exchange (or has left)")
    market = eggm.sync()
    k = eggm.index(provider)
    t = eggm.now(clock)
    data: dict = {"prices": table_json(table_of(prices, market.book.prices.shape[1:]))}
    if not store.rows("SELECT 1 FROM ex_egg_events WHERE kind = 'prices' AND provider = ? LIMIT 1", (k,)):
        data["first"] = True
    try:
        apply_event(market, t, "prices", k, data)
    except AdmissibilityError as exc:
        raise ValueError(f"prices field 'prices': {exc}") from None
    eid = eggm.record(t, "prices", k, data)
    return {"event": eid, "t": t, "base_slot": market.book.base, "provider": provider}


def withdraw(eggm: EggMarket, provider: str, clock: float, node_left: str | None = None) -> dict:
    """Provider ``provider``, which has just left (:meth:`.core.Exchange.leave`, in the same
    transaction), withdraws its table: every cell becomes not offered (``+inf``), so the auctioneer
    picks it for no later bid whatever the bid's view. Its awarded contracts stand and settle by the
    fault table (:mod:`.egg_run`: one not started fails, one running is judged at ``tau*``); its
    reliability record stays. Decision: Kang & Parkes (2007) let a provider change its table only
    within definition 6 (no decrease inside the patience window, and raising is always allowed), so
    withdrawing, the table raised to ``+inf``, is admissible: it is recorded as a price-table event
    of that table (``withdrawn``: true) and applied by the library's update, so the replay sees the
    departure at its time. ``node_left``: its last node left, not the provider (:func:`cut_to_nodes`)."""
    market = eggm.sync()
    k = eggm.index(provider)
    t = eggm.now(clock)
    data: dict = {"prices": table_json(np.full(market.book.prices.shape[1:], np.inf)), "withdrawn": True}
    if node_left is not None:
        data["node_left"] = node_left
    apply_event(market, t, "prices", k, data)
    eid = eggm.record(t, "prices", k, data)
    return {"event": eid, "t": t, "provider": provider}


def cut_to_nodes(eggm: EggMarket, provider: str, node: str, clock: float) -> dict | None:
    """Node ``node`` of ``provider`` has just left (:meth:`.core.Exchange.leave`, in the same
    transaction): the provider's table is cut to what its remaining nodes can hold, so that the
    auctioneer does not award a bid only the node that left could have run. Returns the recorded
    event (None: nothing was offered beyond the remaining nodes, or the provider has posted no
    table yet, so nothing changes and nothing is recorded).

    The rule (the exchange's; Kang & Parkes 2007 leave a provider's capacity to its own table):

    1. No node of the provider is left: the table is withdrawn as when the provider leaves
       (:func:`withdraw`; ``node_left`` names the node).
    2. Otherwise the remaining capacity is the CPU units of the provider's nodes that have not left,
       and the work already committed to them is, for each open Egg contract on one of them, its CPU
       units times the time from now to its ``tau*`` (the most it can hold them), due in the column
       of its ``tau*``.
    3. Every cell (resource buckets, slot column) where a job of the bucket no longer fits by EDF's
       test (:func:`~marketsched.mechanisms.online.egg.providers.edf_room`, the library's capped
       agent's test: the bucket's upper run-time edge above the room) becomes not offered
       (``+inf``). An award in a column may be due as early as the column's start (the
       auctioneer's ``tau*``), so the room of column ``s > 0`` is that of column ``s - 1``. Without
       a run-time axis (``runtime_dim`` None) a job's work is unknown and only the columns with no
       room at all are cut. Every other cell keeps its price.
    4. Only cells are raised, and the cut is upward closed along the run-time axis, so the cut
       table is admissible under definition 6 (rule 2 forbids lowering a locked price, never
       raising; rule 1 holds since a bigger bucket fits less). It is recorded as a price-table
       event of that table (``node_left``: the node) and applied by the library's update, so the
       replay cuts it at the same point.

    The cut is what the table offers at the leave. Later, as before the leave, keeping the table
    within the capacity is the provider's own business (the capped and load-aware agents of
    ``exchange egg prices`` price the nodes that have not left); a cut cell inside the patience
    window stays not offered until it leaves the window (definition 6)."""
    store = eggm.store
    remaining = store.rows("SELECT id, cpu FROM ex_nodes WHERE provider = ? AND left_t IS NULL", (provider,))
    market = eggm.sync()
    k = eggm.index(provider)
    if not store.rows("SELECT 1 FROM ex_egg_events WHERE kind = 'prices' AND provider = ? LIMIT 1", (k,)):
        return None  # never priced: nothing is offered (its first table stays a first table)
    if not remaining:
        return withdraw(eggm, provider, clock, node_left=node)
    from marketsched.mechanisms.online.egg.providers import ProviderAgent, edf_room

    t = eggm.now(clock)
    market.advance(t)  # the columns at the leave (the event's own advance then does nothing)
    book = market.book
    holder = ProviderAgent(int(sum(cpu for _, cpu in remaining)))
    holder.reset(k)
    ids = [nid for nid, _ in remaining]
    for c in contracts(store, OPEN, f"provider = ? AND node_id IN ({', '.join('?' * len(ids))})", (provider, *ids)):
        holder.enqueue(int(c["id"]), float(c["tau"]), c["cpu"] * max(float(c["tau"]) - t, 0.0))
    _, _, room = edf_room(holder.capacity, holder.committed_work(book, t), book, t)
    room = np.concatenate([room[:1], room[:-1]])  # an award in column s may be due at its start, s - 1's end
    table = book.prices[k]
    rd = eggm.cfg["runtime_dim"]
    work = np.zeros(1) if rd is None else book.edges[rd][k, 1:].reshape(
        [-1 if d == rd else 1 for d in range(table.ndim - 1)] + [1])  # per bucket, along the run-time axis
    cut = (work > room) | (room <= 0)
    new = np.where(cut, np.inf, table)
    if np.array_equal(new, table):
        return None
    data = {"prices": table_json(new), "node_left": node}
    apply_event(market, t, "prices", k, data)
    eid = eggm.record(t, "prices", k, data)
    return {"event": eid, "t": t, "provider": provider, "node_left": node, "cut": int((cut & ~np.isinf(table)).sum())}


def submit_bid(eggm: EggMarket, user: str, body: dict, clock: float) -> dict:
    """User ``user``'s bid now (call inside a transaction): the library's auctioneer picks the
    provider, ``tau*`` and the price; the price moves to escrow and the contract is made. Returns
    the award (``scheduled`` False: no provider's price was within the bid)."""
    store = eggm.store
    market = eggm.sync()
    bid = check_bid(body, market.estimators.n_attributes)
    need = to_micro(max(bid["values"]))
    money = store.available(user)
    if need > money["available"]:
        raise ValueError(f"bid field 'value': the bid may cost up to {need / MICRO:.6f} (its highest value), more "
                         f"than the {money['available'] / MICRO:.6f} {user!r} has available: deposit more or bid less")
    t = eggm.now(clock)
    data = {"user": user, **{k: bid[k] for k in ("description", "until", "values", "value_end", "min_reliability")
                             if k in bid}, "view": _able(eggm, bid["cpu"], bid["mem"])}
    eid = eggm.record(t, "bid", None, data)
    out, entry = apply_event(market, t, "bid", None, data)
    answer = {"event": eid, "t": t, "scheduled": bool(out.scheduled[0])}
    if not answer["scheduled"]:
        return answer
    provider = eggm.providers[int(out.provider[0])]
    price = to_micro(out.price[0])
    node = _node_with_room(store, provider, bid["cpu"], bid["mem"])
    row = {"event": eid, "user": user, "provider": provider, "node_id": node, "cpu": bid["cpu"], "mem": bid["mem"],
           "command": bid["command"], "value": float(out.value[0]), "price": price, "entry": entry, "award_t": t,
           "tau": float(out.completion[0]), "slot": int(out.slot[0]), "state": "pending",
           "note": "" if node is not None else "no node of the provider had the bid's CPU and memory free",
           "escrow": "held"}
    cols = list(row)
    cid = _inserted(store.conn.execute(f"INSERT INTO ex_egg_contracts ({', '.join(cols)}) VALUES "
                                       f"({', '.join('?' * len(cols))}) RETURNING id", [row[c] for c in cols]))
    store.ensure_account(ESCROW)
    store.ensure_account(user_account(user))
    store.post(t, "egg-escrow", user_account(user), ESCROW, price, cid, "Egg: price held in escrow until tau*")
    return {**answer, "contract": cid, "provider": provider, "tau": row["tau"], "slot": row["slot"],
            "price": price / MICRO, "value": row["value"]}


def _able(eggm: EggMarket, cpu: int, mem: int) -> list[int]:
    """The user's view of the grid (Kang & Parkes 2007, section 2.1: the providers the auctioneer
    asks): the providers with a node, not left, of at least ``cpu`` units and ``mem``. Decision:
    a job no node of a provider could ever hold is not that provider's to win, so a bid cannot
    make a provider fail (and lose reliability) by asking for more than its machines have; a
    provider that left has no node and is asked no more. Whether a node has room *now* is the
    provider's business (its table; the capped and load-aware agents close what is full)."""
    able = {r[0] for r in eggm.store.rows("SELECT DISTINCT provider FROM ex_nodes WHERE left_t IS NULL AND cpu >= ? "
                                          "AND mem >= ?", (cpu, mem))}
    return [k for k, name in enumerate(eggm.providers) if name in able]


def _node_with_room(store: ExchangeStore, provider: str, cpu: int, mem: int) -> int | None:
    """The provider's first node (id order) that has not left and has ``cpu`` units and ``mem``
    free beside the open Egg contracts on it; None if none has."""
    used = {n: (c, m) for n, c, m in store.rows(
        f"SELECT node_id, SUM(cpu), SUM(mem) FROM ex_egg_contracts WHERE state IN ({', '.join('?' * len(OPEN))}) "
        "AND node_id IS NOT NULL GROUP BY node_id", OPEN)}
    for nid, ncpu, nmem in store.rows("SELECT id, cpu, mem FROM ex_nodes WHERE provider = ? AND left_t IS NULL "
                                      "ORDER BY id", (provider,)):
        c, m = used.get(nid, (0, 0))
        if ncpu - c >= cpu and nmem - m >= mem:
            return int(nid)
    return None


def settle_escrow(eggm: EggMarket, clock: float) -> list[int]:
    """Step 2 for every contract with a verdict whose ``tau*`` has come: pay or refund its escrow
    and record the provider's reliability (call inside a transaction). Returns the contracts
    settled."""
    store = eggm.store
    due = contracts(store, FINAL, "escrow = 'held' AND tau <= ?", (clock,))
    if not due:
        return []
    market = eggm.sync()
    t = eggm.now(clock)
    for c in due:
        eggm.record(t, "settle", None, {"entry": c["entry"], "outcome": c["state"]})
        apply_event(market, t, "settle", None, {"entry": c["entry"], "outcome": c["state"]})
        if c["state"] == "delivered":
            store.ensure_account(provider_account(c["provider"]))
            store.post(t, "egg-release", ESCROW, provider_account(c["provider"]), c["price"], c["id"],
                       "Egg: result delivered, escrow paid to the provider")
            escrow = "paid"
        else:
            store.post(t, "egg-refund", ESCROW, user_account(c["user"]), c["price"], c["id"],
                       f"Egg: contract {c['state']}, escrow refunded")
            escrow = "refunded"
        store.conn.execute("UPDATE ex_egg_contracts SET escrow = ?, settled_t = ? WHERE id = ?", (escrow, t, c["id"]))
    return [c["id"] for c in due]


def reliability(eggm: EggMarket, clock: float) -> list[dict]:
    """Every provider's reliability as bidders see it (read at ``clock``), its record, whether it
    has posted a table, ``left_t`` (when it left; None: it has not), and its table (columns from the
    current slot ``base_slot``; ``None``: not offered). A provider that left lists no table
    (``prices`` None: it withdrew it, :func:`withdraw`); its reliability and record stay."""
    market = eggm.sync()
    rel = market.ledger.reliability(clock)
    posted = {r[0] for r in eggm.store.rows("SELECT DISTINCT provider FROM ex_egg_events WHERE kind = 'prices' "
                                            "AND data NOT LIKE '%\"withdrawn\": true%'")}
    left = dict(eggm.store.rows("SELECT name, left_t FROM ex_providers"))
    return [{"provider": name, "index": k, "reliability": float(rel[k]), "posted": k in posted,
             "completed": int(market.ledger.total_successes[k]), "settled": int(market.ledger.total_attempts[k]),
             "left_t": left.get(name), "base_slot": market.book.base,
             "prices": None if left.get(name) is not None else table_json(market.book.prices[k])}
            for k, name in enumerate(eggm.providers)]


# ---------------------------------------------------------------------------- replay and books
def replay(store: ExchangeStore) -> list[dict]:
    """Every bid's choice re-derived from the recorded events alone by the library: per bid event,
    ``provider`` (None: not scheduled), ``tau``, ``slot`` and ``price`` (micro-units)."""
    names = [r[0] for r in store.rows("SELECT name FROM ex_providers ORDER BY rowid")]
    settings = store.settings()
    if settings is None:
        raise ValueError(f"{store.path} holds no exchange")
    rows = store.rows("SELECT id, t, kind, provider, data FROM ex_egg_events ORDER BY id")
    if not rows:
        return []
    market = _geometry(settings_of(store), settings["slot_seconds"], len(names), rows[0][1])
    out = []
    for eid, t, kind, k, data in rows:
        got = apply_event(market, t, kind, k, json.loads(data))
        if kind == "bid":
            o, _ = got
            sched = bool(o.scheduled[0])
            out.append({"event": eid, "provider": names[int(o.provider[0])] if sched else None,
                        "tau": float(o.completion[0]) if sched else None, "slot": int(o.slot[0]) if sched else None,
                        "price": to_micro(o.price[0]) if sched else None})
    market.escrow.check()
    return out


def recorded(store: ExchangeStore) -> list[dict]:
    """Every bid's recorded choice, in the form :func:`replay` gives."""
    got = {c["event"]: c for c in contracts(store)}
    out = []
    for (eid,) in store.rows("SELECT id FROM ex_egg_events WHERE kind = 'bid' ORDER BY id"):
        c = got.get(eid)
        out.append({"event": eid, "provider": c["provider"] if c else None, "tau": c["tau"] if c else None,
                    "slot": c["slot"] if c else None, "price": c["price"] if c else None})
    return out
