"""The Egg market infrastructure: one object holding the rules of section 3 of Kang & Parkes (2007).

Source: Kang & Parkes 2007, sections 2.1 and 3. The infrastructure is trusted by users and
providers. It holds every provider's price table (:class:`PriceBook`, definition 6 checked
on every update) and estimator (:class:`EstimatorStore`, definitions 4-5), the reliability
ledger, the escrow and the result gate, and it creates a single-use auctioneer for each bid
(:func:`~marketsched.mechanisms.online.egg.auctioneer.clear`, equations 3-5).

It is free of I/O and has no clock of its own: the caller advances it (:meth:`Market.advance`)
with simulated time (the engine policy in :mod:`.providers`, the benchmark, the tests) or
with wall-clock time in a live service.

One total order (decision; the paper gives none): at each instant ``t``

1. :meth:`advance` rolls the tables and activates estimators whose inactive period ended;
2. settlements due at ``t`` (:meth:`settle`: escrow release or refund, reliability record);
3. price-table and estimator updates (:meth:`update_prices`, :meth:`install_estimator`);
4. bids arriving at ``t`` (:meth:`submit`): all bids of one instant are priced against the
   same tables (providers update only *between* bids, and may choose not to between bids
   of the same instant).
"""

from __future__ import annotations

import numpy as np

from marketsched.mechanisms.online.egg.auctioneer import Outcome, clear
from marketsched.mechanisms.online.egg.bids import BidBatch
from marketsched.mechanisms.online.egg.escrow import Escrow, ReliabilityLedger, column
from marketsched.mechanisms.online.egg.estimators import EstimatorStore
from marketsched.mechanisms.online.egg.price_table import PriceBook


class Market:
    """Price tables, estimators, reliability, escrow and the per-bid auctioneer for K providers."""

    def __init__(self, book: PriceBook, estimators: EstimatorStore, ledger: ReliabilityLedger | None = None,
                 escrow: Escrow | None = None):
        K = book.n_providers
        if estimators.n_providers != K:
            raise ValueError(f"Market: {estimators.n_providers} estimators for {K} price tables")
        if estimators.n_resources != len(book.edges):
            raise ValueError(f"Market: estimators give {estimators.n_resources} resources, "
                             f"price tables have {len(book.edges)} resource axes")
        if estimators.delta != book.delta:
            raise ValueError(f"Market: patience bound differs (tables {book.delta}, estimators {estimators.delta})")
        self.book = book
        self.estimators = estimators
        self.ledger = ledger if ledger is not None else ReliabilityLedger(K)
        if self.ledger.n_providers != K:
            raise ValueError("Market: the reliability ledger has the wrong number of providers")
        self.escrow = escrow if escrow is not None else Escrow(K)
        self.n_providers = K
        self.delta = book.delta
        self.now = book.now
        self.estimators.advance(self.now)
        self.bids = 0
        self.truncated = 0  # bids whose reported deadline reached past a + Delta (decision 5)

    def copy(self) -> Market:
        """An independent copy (tables, estimators, ledger, escrow), for what-if audits."""
        import copy as _copy

        out = object.__new__(Market)
        out.__dict__.update(self.__dict__)
        out.book = self.book.copy()
        out.estimators = self.estimators.copy()
        out.ledger = _copy.deepcopy(self.ledger)
        out.escrow = _copy.deepcopy(self.escrow)
        return out

    # ------------------------------------------------------------------ time and settlement
    def advance(self, t: float) -> None:
        """Move the clock to ``t`` (never back)."""
        if t < self.now:
            raise ValueError(f"Market.advance: time {t} is before the market's clock {self.now}")
        self.book.roll(t)
        self.estimators.advance(t)
        self.now = float(t)

    def due(self) -> np.ndarray:
        """Escrow entries whose scheduled completion time has come (each returned once)."""
        return self.escrow.due_entries(self.now)

    def settle(self, entries, completed) -> tuple[float, float]:
        """Protocol step 2 at the current time: record reliability, pay or refund."""
        entries = np.atleast_1d(np.asarray(entries, dtype=np.int64))
        completed = column(completed, bool, entries.shape)
        paid, refunded = self.escrow.settle(entries, completed, self.now)
        self.ledger.record(self.escrow.provider[entries], completed, self.now)
        return paid, refunded

    # ------------------------------------------------------------------ provider actions
    def update_prices(self, k: int, table) -> None:
        """Provider ``k`` installs a new table now (rejected with the offending cells if inadmissible)."""
        self.book.update(k, table, self.now)

    def install_estimator(self, k: int, model, allow_inactive: bool = False) -> float:
        return self.estimators.install(k, model, self.now, allow_inactive)

    # ------------------------------------------------------------------ the auction
    def eligibility(self, bids: BidBatch) -> np.ndarray:
        """(B, K): the user's view, reliability ``>= gamma_hat`` (read now), provider active."""
        rel = self.ledger.reliability(self.now)
        el = (rel[None, :] >= bids.min_reliability[:, None]) & self.estimators.active(self.now)[None, :]
        if bids.view is not None:
            if bids.view.shape != el.shape:
                raise ValueError(f"Market: bid views have shape {bids.view.shape}, expected {el.shape}")
            el &= bids.view
        return el

    def quote(self, bids: BidBatch, menu: bool = False, window: bool = False) -> Outcome:
        """Equations 3-5 for bids arriving now, without collecting payment.

        ``window=True`` accepts bids stamped anywhere from now to the end of the current slot
        and prices them all against the current tables and reliabilities: exact when nothing
        is updated in between (providers that update only at slot boundaries, reliability
        published once per slot). The clock then moves to the last arrival, so no later update
        can be ordered before these bids.
        """
        if len(bids):
            if window:
                end = (self.book.slot_of(self.now) + 1) * self.book.slot
                bad = (bids.arrival < self.now) | (bids.arrival >= end)
                if bad.any():
                    i = int(np.argmax(bad))
                    raise ValueError(f"Market: bid {i} is stamped {bids.arrival[i]}, outside the current slot "
                                     f"[{self.now}, {end})")
            elif (bids.arrival != self.now).any():
                i = int(np.argmax(bids.arrival != self.now))
                raise ValueError(f"Market: bid {i} is stamped {bids.arrival[i]} but the market's clock is {self.now} "
                                 "(the infrastructure timestamps bids on receipt: advance the market first)")
        Q = self.estimators.estimates(bids.description)
        r = self.estimators.runtimes(Q)
        return clear(bids, self.book, Q, self.eligibility(bids), r, menu=menu)

    def submit(self, bids: BidBatch, jobs=None, menu: bool = False, window: bool = False) -> tuple[Outcome, np.ndarray]:
        """Clear bids arriving now and put the winners' payments in escrow (steps 1a-1d).

        Returns the outcome and, per bid, its escrow entry id (-1 if not scheduled). The
        escrow entry's due time is ``tau*``: the result is released and the money moves then.
        """
        n = len(bids)
        jobs = np.arange(self.bids, self.bids + n) if jobs is None else np.asarray(jobs, dtype=np.int64)
        if jobs.shape != (n,):
            raise ValueError(f"Market.submit: {jobs.shape[0]} job ids for {n} bids")
        out = self.quote(bids, menu, window)
        if window and n:
            self.advance(float(bids.arrival.max()))
        self.bids += n
        self.truncated += int(np.sum(bids.deadlines() >= bids.arrival + self.delta))
        entry = np.full(n, -1, np.int64)
        win = out.scheduled
        if win.any():
            entry[win] = self.escrow.hold(jobs[win], out.provider[win], out.price[win], out.completion[win])
        return out, entry
