"""Provider price tables and the admissibility rules of definition 6.

Source: Kang & Parkes (2007), section 2.4. Provider ``k`` keeps a table
``phi_k^t(Q, tau)``: the price, quoted at time ``t``, for completing a job with resource
requirements ``Q`` by ``tau``; one axis per resource plus one for the completion period.
The infrastructure accepts only *admissible* tables (definition 6):

1. ``phi`` is non-decreasing in every component ``Q[l]`` (for every ``tau`` and ``t``);
2. an entry for a completion time inside the patience window does not decrease over time:
   ``phi^{t'}(Q, tau) >= phi^t(Q, tau)`` for ``t' > t`` and ``t' <= tau <= t + Delta``.

Example 1 (section 2.4) is the test oracle: with ``Delta = 3`` h and hour-long columns from
``t0``, the first three columns may only rise, the fourth may move freely.

Representation (decisions; the paper leaves it open)
----------------------------------------------------
* Completion times are grouped in **absolute slots** ``s`` covering ``[s*slot, (s+1)*slot)``;
  column ``h`` of the book is slot ``base + h``. Absolute indexing is what rule 2 needs (it
  compares the *same* completion time across quote times); the paper's tables are written
  relative to ``t0``. A price column covers every completion time in its slot.
* Resources are grouped in **buckets** per dimension ``l`` with edges
  ``0 <= e_0 < e_1 < ... < e_n``: bucket ``i`` is ``[e_i, e_{i+1})`` (``Q < e_1`` falls in
  bucket 0); ``Q >= e_n`` is not offered.
* Every provider's table lives in one stacked array ``prices`` of shape
  ``(K, n_1, ..., n_L, H)`` (:class:`PriceBook`), so the auctioneer gathers all providers'
  rows for many bids with one fancy index. Providers may have their own edges (same number
  of buckets per dimension).
* **Not offered** is ``+inf``. Lowering ``+inf`` to a finite price is a decrease, so a cell
  can be opened only outside the locked window; new columns enter the window at ``+inf``.
* **The locked window** (decision 2, half-open): an update at time ``u`` may not lower any
  entry of a slot ``s`` with ``start(s) < u + Delta`` and ``end(s) > u``. Because every
  change passes this check, the history is admissible and the check needs only the current
  table (decision 3). The half-open window reproduces example 1; with the closed window of
  definition 6 as printed (``tau <= t + Delta``) the column ``[t0+3, t0+4)`` would be locked
  and example 1's update rejected.
* **Reject, never repair** (decision 3): :meth:`PriceBook.update` raises
  :class:`AdmissibilityError` listing each offending cell and the rule it broke;
  :meth:`PriceBook.project` is offered to providers who want the nearest admissible table
  above their wish (locked cells raised to the current price, then a running maximum along
  each resource axis).
* Prices must be ``>= 0`` and not NaN (a negative price would pay the user to run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RULE_MONOTONE = "def6(1) non-decreasing in resources"
RULE_LOCKED = "def6(2) no decrease inside the patience window"
RULE_VALUE = "price must be a number >= 0 (or +inf: not offered)"
MAX_LISTED = 20


@dataclass(frozen=True)
class Violation:
    """One cell of a rejected update: which provider, which cell, which rule, which numbers.

    ``cell`` is ``(bucket index per resource..., absolute slot)``; ``other`` is the old
    price of the cell (rule 2) or the price of the next-smaller bucket along ``axis``
    (rule 1), which the new price undercuts.
    """

    provider: int
    rule: str
    cell: tuple[int, ...]
    new: float
    other: float
    axis: int | None = None

    def __str__(self) -> str:
        where = f"provider {self.provider}, cell (buckets {self.cell[:-1]}, slot {self.cell[-1]})"
        if self.rule == RULE_MONOTONE:
            return (f"{where}: {self.rule}: price {self.new:g} is below {self.other:g} of the smaller "
                    f"bucket along resource axis {self.axis}")
        if self.rule == RULE_LOCKED:
            return f"{where}: {self.rule}: price would fall from {self.other:g} to {self.new:g}"
        return f"{where}: {self.rule}: got {self.new}"


class AdmissibilityError(ValueError):
    """A price-table update that breaks definition 6; ``violations`` lists the cells."""

    def __init__(self, violations: list[Violation], total: int):
        self.violations = violations
        self.total = total
        shown = "\n  ".join(str(v) for v in violations)
        more = f"\n  ... and {total - len(violations)} more" if total > len(violations) else ""
        super().__init__(f"inadmissible price-table update ({total} cell(s)):\n  {shown}{more}")


def _edges_array(e, k: int, dim: int) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64)
    if e.ndim == 1:
        e = np.broadcast_to(e, (k, e.shape[0])).copy()
    if e.ndim != 2 or e.shape[0] != k or e.shape[1] < 2:
        raise ValueError(f"PriceBook: edges of resource {dim} must be (n+1,) or ({k}, n+1) with n >= 1, got {e.shape}")
    if not np.all(np.isfinite(e)) or np.any(e[:, 0] < 0) or np.any(np.diff(e, axis=1) <= 0):
        raise ValueError(f"PriceBook: edges of resource {dim} must be finite, >= 0 and strictly increasing")
    return e


class PriceBook:
    """The price tables of ``K`` providers over (resource buckets x absolute slots).

    Parameters
    ----------
    n_providers:
        ``K``.
    edges:
        One entry per resource dimension: bucket edges (n+1 numbers, shared) or a
        ``(K, n+1)`` array (per provider).
    slot:
        Length of a completion slot (the market's time unit, e.g. 3600 s, or 1 h in the
        paper's examples).
    delta:
        The patience bound ``Delta`` (same unit).
    horizon:
        Number of slot columns ``H`` kept from the current slot on.
    start:
        The time the book starts at; column 0 is the slot containing it.
    prices:
        Initial tables ``(K, n_1, ..., n_L, H)`` (checked for rule 1); default all ``+inf``.
    """

    def __init__(self, n_providers: int, edges: Sequence, slot: float, delta: float, horizon: int,
                 start: float = 0.0, prices=None):
        if isinstance(n_providers, bool) or not isinstance(n_providers, (int, np.integer)) or n_providers < 1:
            raise ValueError(f"PriceBook: n_providers must be a whole number >= 1, got {n_providers!r}")
        if not (np.isfinite(slot) and slot > 0):
            raise ValueError(f"PriceBook: slot must be a finite number > 0, got {slot!r}")
        if not (np.isfinite(delta) and delta >= 0):
            raise ValueError(f"PriceBook: delta must be a finite number >= 0, got {delta!r}")
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"PriceBook: horizon must be a whole number of slots >= 1, got {horizon!r}")
        if len(edges) < 1:
            raise ValueError("PriceBook: need at least one resource dimension (edges)")
        self.n_providers = int(n_providers)
        self.edges = [_edges_array(e, self.n_providers, d) for d, e in enumerate(edges)]
        self.n_buckets = tuple(e.shape[1] - 1 for e in self.edges)
        self.slot = float(slot)
        self.delta = float(delta)
        self.horizon = int(horizon)
        self.now = float(start)
        self.base = int(self.slot_of(start))  # absolute slot of column 0
        shape = (self.n_providers, *self.n_buckets, self.horizon)
        if prices is None:
            self.prices = np.full(shape, np.inf)
        else:
            p = np.array(prices, dtype=np.float64)
            if p.shape != shape:
                raise ValueError(f"PriceBook: prices have shape {p.shape}, expected {shape}")
            self.prices = np.full(shape, np.inf)
            for k in range(self.n_providers):
                viol, total = self._check(k, p[k], locked=np.zeros(self.horizon, bool))
                if total:
                    raise AdmissibilityError(viol, total)
            self.prices[...] = p
        # upper edges for lookups: (K, n) per dim
        self._upper = [e[:, 1:] for e in self.edges]
        # per dim: every provider has the same edges (one binary search serves them all)
        self._shared_edges = [bool(np.all(up == up[:1])) for up in self._upper]
        # for the compiled auctioneer: every dimension's (K, n) upper edges in one flat array, the counts
        self.upper_edges = np.concatenate([up.ravel() for up in self._upper])
        self.bucket_counts = np.array(self.n_buckets, dtype=np.int64)
        self.updates = 0
        self.rejected = 0

    # ------------------------------------------------------------------ time
    def slot_of(self, t) -> np.ndarray | int:
        """Absolute slot index containing time ``t``."""
        s = np.floor(np.asarray(t, dtype=np.float64) / self.slot).astype(np.int64)
        return int(s) if s.ndim == 0 else s

    @property
    def slot_starts(self) -> np.ndarray:
        """Start times of the ``H`` columns."""
        return (self.base + np.arange(self.horizon)) * self.slot

    @property
    def slots(self) -> np.ndarray:
        """Absolute slot index of every column."""
        return self.base + np.arange(self.horizon)

    def roll(self, t: float) -> None:
        """Advance the clock to ``t``: drop past slots, append new columns at ``+inf``.

        New columns are *not offered* until the provider prices them; they enter at the far
        end of the window, so they are unlocked as long as ``horizon * slot >= Delta + 2 slot``.
        """
        t = float(t)
        if t < self.now:
            raise ValueError(f"PriceBook.roll: time {t} is before the book's clock {self.now}")
        self.now = t
        new_base = math.floor(t / self.slot)  # slot_of(t) for one number, without the array round trip
        shift = new_base - self.base
        if shift <= 0:
            return
        if shift >= self.horizon:
            self.prices[...] = np.inf
        else:
            self.prices[..., :-shift] = self.prices[..., shift:]
            self.prices[..., -shift:] = np.inf
        self.base = new_base

    def locked_columns(self, at: float) -> np.ndarray:
        """Columns an update at ``at`` may not lower: ``start < at + Delta`` and ``end > at``."""
        starts = self.slot_starts
        return (starts < at + self.delta) & (starts + self.slot > at)

    # ------------------------------------------------------------------ checks and updates
    def _check(self, k: int, new: np.ndarray, locked: np.ndarray, limit: int = MAX_LISTED):
        """(violations listed, total count) of table ``new`` for provider ``k``."""
        viol: list[Violation] = []
        total = 0
        cur = self.prices[k]
        base = self.base

        def add(rule, mask, other, axis=None):
            nonlocal total
            n = int(mask.sum())
            if not n:
                return
            total += n
            for idx in np.argwhere(mask)[: max(0, limit - len(viol))]:
                idx = tuple(int(i) for i in idx)
                if rule == RULE_MONOTONE:
                    prev = list(idx)
                    prev[axis] -= 1
                    o = float(new[tuple(prev)])
                    # report the larger-bucket cell (the one that undercuts)
                elif rule == RULE_LOCKED:
                    o = float(cur[idx])
                else:
                    o = float("nan")
                viol.append(Violation(k, rule, idx[:-1] + (base + idx[-1],), float(new[idx]), o, axis))

        bad = ~(new >= 0)  # NaN or negative
        if bad.any():
            add(RULE_VALUE, bad, None)
            return viol, total
        for axis in range(new.ndim - 1):
            lo = [slice(None)] * new.ndim
            hi = [slice(None)] * new.ndim
            lo[axis] = slice(None, -1)
            hi[axis] = slice(1, None)
            dec = new[tuple(hi)] < new[tuple(lo)]
            if dec.any():
                mask = np.zeros(new.shape, dtype=bool)
                mask[tuple(hi)] = dec
                add(RULE_MONOTONE, mask, None, axis)
        if locked.any():
            lower = new[..., locked] < cur[..., locked]
            if lower.any():
                mask = np.zeros(new.shape, dtype=bool)
                mask[..., locked] = lower
                add(RULE_LOCKED, mask, None)
        return viol, total

    def _table(self, k: int, new) -> np.ndarray:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < self.n_providers:
            raise ValueError(f"PriceBook: provider {k!r} is not in 0..{self.n_providers - 1}")
        new = np.asarray(new, dtype=np.float64)
        if new.shape != self.prices.shape[1:]:
            raise ValueError(f"PriceBook: provider {k}'s table has shape {new.shape}, expected {self.prices.shape[1:]}")
        return new

    def violations(self, k: int, new, at: float) -> list[Violation]:
        """Every rule ``new`` would break if provider ``k`` installed it at ``at`` (listing capped)."""
        self.roll(at)
        new = self._table(k, new)
        return self._check(k, new, self.locked_columns(at))[0]

    def update(self, k: int, new, at: float) -> None:
        """Install provider ``k``'s table ``new`` at time ``at`` (rolls the book to ``at`` first).

        Raises :class:`AdmissibilityError` (a ``ValueError``) naming each cell that breaks
        definition 6 and leaves the table unchanged.
        """
        self.roll(at)
        new = self._table(k, new)
        viol, total = self._check(k, new, self.locked_columns(at))
        if total:
            self.rejected += 1
            raise AdmissibilityError(viol, total)
        self.prices[k] = new
        self.updates += 1

    def update_many(self, providers, tables, at: float) -> dict[int, list[Violation]]:
        """Install several providers' tables at once (vectorised check over providers, buckets, slots).

        Accepted tables are installed; rejected ones are returned as ``{provider: violations}``
        (their tables stay as they were).
        """
        self.roll(at)
        ks = np.asarray(providers, dtype=np.int64)
        new = np.asarray(tables, dtype=np.float64)
        if new.shape != (ks.shape[0],) + self.prices.shape[1:]:
            raise ValueError(f"PriceBook.update_many: tables have shape {new.shape}, "
                             f"expected {(ks.shape[0],) + self.prices.shape[1:]}")
        if ks.size and (ks.min() < 0 or ks.max() >= self.n_providers or np.unique(ks).size != ks.size):
            raise ValueError("PriceBook.update_many: providers must be distinct indices in 0..K-1")
        cur = self.prices[ks]
        locked = self.locked_columns(at)
        red = tuple(range(1, new.ndim))
        bad = np.isnan(new) | (new < 0)
        ok = ~bad.any(axis=red)
        for axis in range(1, new.ndim - 1):
            lo = [slice(None)] * new.ndim
            hi = [slice(None)] * new.ndim
            lo[axis] = slice(None, -1)
            hi[axis] = slice(1, None)
            ok &= ~(new[tuple(hi)] < new[tuple(lo)]).any(axis=red)
        if locked.any():
            ok &= ~(new[..., locked] < cur[..., locked]).any(axis=red)
        self.prices[ks[ok]] = new[ok]
        self.updates += int(ok.sum())
        out = {}
        for i in np.nonzero(~ok)[0]:
            out[int(ks[i])] = self._check(int(ks[i]), new[i], locked)[0]
        self.rejected += len(out)
        return out

    def project(self, k: int, desired, at: float) -> np.ndarray:
        """The least admissible table >= ``desired`` on locked cells, for provider ``k`` at ``at``.

        Steps: (a) NaN and negative wishes become ``+inf`` and 0; (b) on locked columns,
        ``max(desired, current)``; (c) a running maximum along each resource axis (repairs
        rule 1 without lowering anything, so (b) still holds).
        """
        self.roll(at)
        new = self._table(k, desired).copy()
        new[np.isnan(new)] = np.inf
        np.maximum(new, 0.0, out=new)
        locked = self.locked_columns(at)
        new[..., locked] = np.maximum(new[..., locked], self.prices[k][..., locked])
        for axis in range(new.ndim - 1):
            np.maximum.accumulate(new, axis=axis, out=new)
        return new

    # ------------------------------------------------------------------ lookups
    def bucket_index(self, Q) -> np.ndarray:
        """Flat row index of requirement vectors ``Q`` (shape (..., K, L)) per provider; -1 = not offered."""
        Q = np.asarray(Q, dtype=np.float64)
        L = len(self.edges)
        if Q.shape[-1] != L or Q.shape[-2] != self.n_providers:
            raise ValueError(f"PriceBook.bucket_index: Q must have shape (..., {self.n_providers}, {L}), got {Q.shape}")
        if not (Q >= 0).all():  # NaN fails the comparison too
            raise ValueError("PriceBook.bucket_index: resource estimates must be numbers >= 0")
        flat = np.zeros(Q.shape[:-1], dtype=np.int64)
        offered = np.ones(Q.shape[:-1], dtype=bool)
        for d in range(L):
            up = self._upper[d]  # (K, n)
            q = Q[..., d]
            if self._shared_edges[d]:  # edges shared by every provider: one binary search
                idx = np.searchsorted(up[0], q, side="right")
            else:
                idx = np.empty(q.shape, dtype=np.int64)
                for k in range(self.n_providers):
                    idx[..., k] = np.searchsorted(up[k], q[..., k], side="right")
            offered &= idx < self.n_buckets[d]
            flat = flat * self.n_buckets[d] + np.minimum(idx, self.n_buckets[d] - 1)
        return np.where(offered, flat, -1)

    def flat_prices(self) -> np.ndarray:
        """``prices`` viewed as ``(K, rows, H)``."""
        return self.prices.reshape(self.n_providers, -1, self.horizon)

    def table(self, k: int) -> PriceTable:
        return PriceTable(self, k)

    def copy(self) -> PriceBook:
        out = object.__new__(PriceBook)
        out.__dict__.update(self.__dict__)
        out.prices = self.prices.copy()
        return out


class PriceTable:
    """Provider ``k``'s table in a :class:`PriceBook` (a view: updates go through the book's checks)."""

    def __init__(self, book: PriceBook, k: int):
        if not 0 <= k < book.n_providers:
            raise ValueError(f"PriceTable: provider {k} is not in 0..{book.n_providers - 1}")
        self.book = book
        self.k = int(k)

    @classmethod
    def create(cls, edges: Sequence, slot: float, delta: float, horizon: int, prices=None,
               start: float = 0.0) -> PriceTable:
        """A one-provider book (for examples and tests)."""
        p = None if prices is None else np.asarray(prices, dtype=np.float64)[None]
        return cls(PriceBook(1, edges, slot, delta, horizon, start, p), 0)

    @property
    def prices(self) -> np.ndarray:
        """The current table (a read-only view)."""
        v = self.book.prices[self.k].view()
        v.flags.writeable = False
        return v

    def update(self, new, at: float) -> None:
        self.book.update(self.k, new, at)

    def violations(self, new, at: float) -> list[Violation]:
        return self.book.violations(self.k, new, at)

    def project(self, desired, at: float) -> np.ndarray:
        return self.book.project(self.k, desired, at)

    def price(self, Q, tau: float) -> float:
        """``phi(Q, tau)`` at the book's current time; ``+inf`` if not offered or outside the window."""
        Q = np.asarray(Q, dtype=np.float64)
        full = np.zeros((self.book.n_providers, Q.shape[-1]))
        full[self.k] = Q
        r = int(self.book.bucket_index(full)[self.k])
        h = self.book.slot_of(tau) - self.book.base
        if r < 0 or not 0 <= h < self.book.horizon:
            return float("inf")
        return float(self.book.flat_prices()[self.k, r, h])
