"""One clearing in three steps, so that no write and no read waits on the mechanism.

1. :func:`snapshot`: one *read* transaction (SQLite's write-ahead log lets other parties commit
   meanwhile) takes the period number, the last order id ``upto``, the open orders up to it, the
   providers, the nodes and the capacity already sold.
2. :func:`compute`: the capacity the offered nodes can sell now (:mod:`.capacity`), the book
   (:func:`.book.build_book`) and the library's mechanism on it, outside any transaction (the
   exchange's loop runs it in a worker thread, :class:`Worker`, and keeps enforcing contract
   windows meanwhile).
3. :func:`commit`: one short write transaction records the period, the contracts, the filled
   and the expired orders, after checking that the snapshot still holds: no other clearing
   committed since, and every order that was open up to ``upto`` is still open.

**Orders during a clearing.** An order submitted after the snapshot has an id above ``upto``: it
is not in this clearing and waits for the next one. An order cancelled between the snapshot and
the commit (a node leaving cancels its offers), or a contract moved off lost capacity
(:meth:`.core.Exchange.move_lost`), makes the result *stale*: it is discarded and the
clearing computed again from a new snapshot, which no longer holds the order. So a cancellation
that returned before a clearing committed always took effect before it, exactly as a replay
assumes (:mod:`.replay` cancels an order before the first clearing after its cancellation), and
a clearing never fills an order its owner has withdrawn. After ``STALE_RETRIES`` stale results
in a row the clearing is computed inside the write transaction: writes then wait for one
computation (at most about a second at 2,500 orders per side with the compiled critical values,
``benchmarks/bench_exchange_clearing.py``), which takes a cancellation during each of the
previous computations.

``MARKETSCHED_TEST_CLEARING_GATE`` is a test hook: when it names a file, :func:`compute` first
writes the period and the last order id of its snapshot to ``<file>.waiting``, waits until the
file exists, and removes ``<file>.waiting``, so that a test can check what
happens while a clearing is being computed, in event order rather than on wall-clock margins.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from marketsched.mechanisms.clearing.greedex import Allocation, Payments

from . import capacity, distributed
from .book import EXACT_MAX_ORDERS, ClearingBook, build_book, contracts_of, period_rng, run_mechanism
from .provider_protocol import AgentGathers, record_messages
from .store import ExchangeStore

STALE_RETRIES = 3
GATE_ENV = "MARKETSCHED_TEST_CLEARING_GATE"


@dataclass(frozen=True)
class Snapshot:
    """What one clearing reads: the book and what it must still find at its commit."""

    period: int
    t: float
    base_slot: int
    upto: int  # the last order id the clearing sees
    open_ids: tuple[int, ...]  # orders open at the snapshot with id <= upto
    expire: tuple[int, ...]  # those this clearing expires (first or last slot passed)
    owners: dict[int, str]  # order id -> owner, for the book's orders
    requests: list[dict]  # the book's rows
    offers: list[dict]
    nodes: dict[int, dict]
    sold: list[dict]  # contracts already made on the offered nodes
    providers: list[dict]
    moves: int = 0  # contracts moved between nodes so far (a move since makes the result stale)


@dataclass(frozen=True)
class Outcome:
    """What the mechanism decided: contracts (without their period), welfare, the mechanism used."""

    mechanism: str
    legs: list[dict]
    welfare: float
    latency: float  # wall seconds of the mechanism
    book: ClearingBook
    messages: distributed.Messages | None = None  # the distributed mode's messages with the providers
    agents: bool = False  # the providers answered over the API (their answers are recorded for the replay)


# a period -> the gather that carries that period's requests to the providers (distributed mode)
Gathers = Callable[[int], distributed.Gather]


@contextmanager
def read_snapshot(store: ExchangeStore) -> Iterator[None]:
    """A consistent view of the database for the reads inside: one deferred read transaction
    (writers commit meanwhile and the reads do not see it). Inside a write transaction, or on a
    database other than SQLite, the reads join a (write) transaction."""
    ledger = store.ledger
    with ledger._lock:
        if ledger._depth or ledger.kind != "sqlite":
            with store.transaction():
                yield
            return
        store.conn.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            store.conn.execute("COMMIT")


def snapshot(store: ExchangeStore, t: float, base_slot: int, last_order: int | None = None) -> Snapshot:
    """Step 1: the book of the orders open up to id ``last_order`` (default: all committed), from
    slot ``base_slot`` on, read in one read transaction."""
    with read_snapshot(store):
        period = int(store.rows("SELECT COALESCE(MAX(id), 0) FROM ex_periods")[0][0]) + 1
        upto = store.last_order_id() if last_order is None else last_order
        open_orders = store.orders(state="open", upto=upto)
        nodes = store.nodes()
        sold = store.contracts(ending_from=base_slot)
        providers = store.providers()
        moves = store.move_count()
    expire = [o["id"] for o in open_orders
              if (o["side"] == "request" and o["first_slot"] < base_slot) or o["last_slot"] < base_slot]
    gone = set(expire)
    requests = [o for o in open_orders if o["side"] == "request" and o["id"] not in gone]
    offers = [o for o in open_orders if o["side"] == "offer" and o["id"] not in gone]
    touched = {o["node_id"] for o in offers}
    return Snapshot(period, t, base_slot, upto, tuple(o["id"] for o in open_orders), tuple(expire),
                    {o["id"]: o["owner"] for o in requests + offers}, requests, offers, nodes,
                    [c for c in sold if c["node_id"] in touched], providers, moves)


def compute(snap: Snapshot, settings: dict, mechanism: str | None = None, caps: dict[int, int] | None = None,
            gathers: Gathers | None = None) -> Outcome:
    """Step 2: the capacity each offered node can sell now (``caps``: a replay's recorded one;
    default: checked now, :func:`.capacity.capacity_now`), the book, and the library's mechanism
    on it; no database of its own. ``mechanism``: the one to use (a replay's recorded one;
    default: the exchange's, with the fallback of the exact clearing, :mod:`.book`).
    ``gathers``: how the distributed mode reaches the providers (their agents over the API,
    :mod:`.provider_protocol`, or a replay's recorded answers; default: in this process)."""
    _wait_for_gate(snap)
    why: dict[int, str] = {}
    if caps is None:
        caps, why = capacity.capacity_now(snap.providers, snap.nodes, {o["node_id"] for o in snap.offers})
    cb = build_book(snap.requests, snap.offers, snap.nodes, snap.sold, snap.base_slot, caps, why)
    t0 = time.perf_counter()
    legs: list[dict] = []
    welfare = 0.0
    replayed = mechanism is not None
    mechanism = mechanism or settings["mechanism"]
    msgs: distributed.Messages | None = None
    if mechanism == "exact" and not replayed and cb.book.n_jobs + cb.book.n_nodes > EXACT_MAX_ORDERS:
        mechanism = "k-pricing"
    if cb.book.n_jobs and cb.book.n_nodes:
        rng = period_rng(settings["seed"], snap.period)
        if mechanism == distributed.MECHANISM:  # each provider computes its runs (fig. 4.4)
            res, msgs = distributed.clear_distributed(cb.book, [snap.owners[o] for o in cb.piece_offer],
                                                      settings["alpha"], rng,
                                                      gather=gathers(snap.period) if gathers else None)
            cb = distributed.clearing_book_without(cb, msgs.left_out)  # capacity of the silent not sold
            out: tuple[Allocation, Payments] | None = (res.allocation, res.payments)
        else:
            out = run_mechanism(cb.book, mechanism, settings["k"], settings["alpha"], rng)
        if out is None and not replayed:  # the exact clearing proved no optimum in time
            mechanism = "k-pricing"
            out = run_mechanism(cb.book, mechanism, settings["k"], settings["alpha"], None)
        if out is None:
            raise RuntimeError(f"the replay of period {snap.period} proved no optimum in time: it cannot be compared")
        alloc, pay = out
        legs, welfare = contracts_of(cb, alloc, pay), alloc.welfare()
    return Outcome(mechanism, legs, welfare, time.perf_counter() - t0, cb, msgs, gathers is not None)


def commit(store: ExchangeStore, snap: Snapshot, out: Outcome, settings: dict) -> int | None:
    """Step 3: record the clearing in one write transaction; the period number, or None when
    the snapshot no longer holds (another clearing committed, an order it saw open was
    cancelled, or a contract moved between nodes, which changes the capacity sold): then
    nothing is written."""
    with store.transaction():
        last = int(store.rows("SELECT COALESCE(MAX(id), 0) FROM ex_periods")[0][0])
        still_open = tuple(r[0] for r in store.rows(
            "SELECT id FROM ex_orders WHERE state = 'open' AND id <= ? ORDER BY id", (snap.upto,)))
        if last != snap.period - 1 or still_open != snap.open_ids or store.move_count() != snap.moves:
            return None
        for oid in snap.expire:
            store.close_order(oid, "expired", snap.t)
        cb = out.book
        store.insert_period({"id": snap.period, "t": snap.t, "base_slot": snap.base_slot, "last_order": snap.upto,
                             "mechanism": out.mechanism, "k": settings["k"], "seed": settings["seed"],
                             "book": cb.to_json(), "requests": cb.book.n_jobs, "offers": len(snap.offers),
                             "welfare": out.welfare, "latency": out.latency})
        if out.messages is not None:
            record_messages(store, snap.period, out.messages, out.agents)
        filled = set()
        slot_s = settings["slot_seconds"]
        for leg in out.legs:
            store.insert_contract({**leg, "period": snap.period, "user": snap.owners[leg["request_id"]],
                                   "provider": snap.owners[leg["offer_id"]], "start_t": leg["first_slot"] * slot_s,
                                   "end_t": (leg["last_slot"] + 1) * slot_s,
                                   "penalty": int(round(settings["penalty"] * leg["user_price"])),
                                   "state": "pending", "note": ""})
            filled.add(leg["request_id"])
        for rid in sorted(filled):
            store.close_order(rid, "filled", snap.t)
        return snap.period


def clear_now(store: ExchangeStore, settings: dict, t: float, base_slot: int, last_order: int | None = None,
              mechanism: str | None = None, stale_retries: int = STALE_RETRIES, caps: dict[int, int] | None = None,
              gathers: Gathers | None = None) -> int:
    """Snapshot, compute and commit; a stale result is recomputed, and after ``stale_retries``
    stale results the last attempt runs inside the write transaction (it cannot be stale).
    Provider agents (``gathers`` of :mod:`.provider_protocol`) cannot be asked from inside the
    write transaction (their answers are written by the API): the locked attempt asks none
    (:class:`.distributed.NotAsked`: their capacity stays), and enforces the exchange's own
    deterministic run with critical values."""
    for attempt in range(stale_retries + 1):
        locked = attempt == stale_retries
        with store.transaction() if locked else nullcontext():
            snap = snapshot(store, t, base_slot, last_order)
            asks = _nobody if locked and isinstance(gathers, AgentGathers) else gathers
            period = commit(store, snap, compute(snap, settings, mechanism, caps, asks), settings)
        if period is not None:
            return period
    raise AssertionError("a clearing inside the write transaction cannot be stale")


def _nobody(period: int) -> distributed.Gather:
    """A gather that reaches no provider (the locked clearing, :func:`clear_now`)."""
    def gather(requests: dict[str, str]) -> dict[str, str | Exception]:
        return {p: distributed.NotAsked("the clearing ran inside the write transaction") for p in requests}
    return gather


class Worker:
    """:func:`compute` of one snapshot in a daemon thread (the mechanism releases the
    interpreter in its compiled parts and NumPy; the exchange's loop keeps running)."""

    def __init__(self, snap: Snapshot, settings: dict, gathers: Gathers | None = None):
        self.snap = snap
        self._gathers = gathers
        self._out: Outcome | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(settings,), name=f"clearing-{snap.period}",
                                        daemon=True)
        self._thread.start()

    def _run(self, settings: dict) -> None:
        try:
            self._out = compute(self.snap, settings, gathers=self._gathers)
        except BaseException as exc:  # handed to the loop by result()
            self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> Outcome:
        """The outcome (after :meth:`done`); the mechanism's exception if it raised one."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out


def _wait_for_gate(snap: Snapshot) -> None:
    gate = os.environ.get(GATE_ENV)
    if not gate:
        return
    path, waiting = Path(gate), Path(f"{gate}.waiting")
    waiting.write_text(f"{snap.period} {snap.upto}\n")
    while not path.exists():
        time.sleep(0.01)
    waiting.unlink()
