"""Escrow, result gate and reliability ledger of the market infrastructure.

Source: Kang & Parkes (2007), section 3, steps 1(d), 1(e) and 2(a)-(c) of the
auction protocol:

* 1(d) the price is collected from the user when the job is awarded and held in escrow;
* 1(e) the winner must withhold (encrypt) the result until the scheduled completion time
  ``tau*`` even if it finishes early (rule R6);
* 2(a) at ``tau*`` the infrastructure checks completion and updates the provider's
  reliability;
* 2(b)-(c) if completed, the result is released and the payment goes to the provider; else
  the payment is refunded to the user (rule R5: no payment, no result).

:class:`Escrow` keeps one entry per award as columns (job, provider, amount, due time,
state) so a run with millions of awards settles in vectorised passes. Every entry is settled
exactly once, and not before its due time: **conservation** ``collected = paid + refunded +
held`` holds after every operation (:meth:`Escrow.check`).

:class:`ReliabilityLedger` (our decision on how to count) estimates "the frequency with
which the provider has successfully completed a job by the scheduled completion time"
(section 2.2) as the posterior mean of a Beta prior: ``(alpha + successes) / (alpha + beta +
attempts)``, counts optionally decaying with a half-life. Decisions: the default prior
``Beta(1, 1)`` starts a newcomer at 0.5 (a fixed 1 would let a fresh identity beat any
record; 0 would lock newcomers out of every auction with a minimum reliability); every
failure counts, whatever its cause (the infrastructure cannot tell a user's faulty job from
a provider's crash: it sees only "result by tau*" or not); reliability is read at the bid's
arrival, after the settlements due at that time (the engine's batch order).
"""

from __future__ import annotations

import heapq

import numpy as np

HELD, PAID, REFUNDED = 0, 1, 2
STATE_NAMES = {HELD: "held", PAID: "paid", REFUNDED: "refunded"}



def column(x, dtype, shape: tuple) -> np.ndarray:
    """``x`` as an array of ``dtype`` and ``shape``: itself when it has them, else broadcast (a scalar
    for every entry); ``np.broadcast_to`` costs microseconds a call that needs none spends for nothing."""
    a = np.asarray(x, dtype=dtype)
    return a if a.shape == shape else np.broadcast_to(a, shape)

class EscrowError(ValueError):
    """An escrow operation that would lose or duplicate money (double settlement, early release)."""


class Escrow:
    """Payments held between award and scheduled completion (protocol steps 1d, 2c).

    ``n_providers`` sizes the providers' revenue accounts.
    """

    def __init__(self, n_providers: int, capacity: int = 1024):
        if n_providers < 1:
            raise ValueError(f"Escrow: n_providers must be >= 1, got {n_providers}")
        self.n_providers = int(n_providers)
        self.n = 0
        cap = max(int(capacity), 16)
        self.job = np.empty(cap, np.int64)
        self.provider = np.empty(cap, np.int64)
        self.amount = np.empty(cap, np.float64)
        self.due = np.empty(cap, np.float64)
        self.state = np.empty(cap, np.int8)
        self.settled_at = np.empty(cap, np.float64)
        self.revenue = np.zeros(self.n_providers)  # paid out to each provider
        self.collected = 0.0
        self.paid = 0.0
        self.refunded = 0.0
        self._heap: list[tuple[float, int]] = []

    def _grow(self, extra: int) -> None:
        need = self.n + extra
        if need <= self.job.shape[0]:
            return
        cap = max(need, 2 * self.job.shape[0])
        for name in ("job", "provider", "amount", "due", "state", "settled_at"):
            old = getattr(self, name)
            new = np.empty(cap, old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def hold(self, job, provider, amount, due) -> np.ndarray:
        """Collect ``amount`` from each job and hold it until ``due`` (step 1d); return entry ids."""
        job = np.atleast_1d(np.asarray(job, dtype=np.int64))
        m = job.shape[0]
        provider = column(provider, np.int64, (m,))
        amount = column(amount, np.float64, (m,))
        due = column(due, np.float64, (m,))
        bad = ~(np.isfinite(amount) & (amount >= 0))  # NaN fails both
        if bad.any():
            i = int(np.argmax(bad))
            raise EscrowError(f"Escrow.hold: amount for job {job[i]} is {amount[i]}, must be a finite number >= 0")
        if ((provider < 0) | (provider >= self.n_providers)).any():
            raise EscrowError(f"Escrow.hold: provider outside 0..{self.n_providers - 1}")
        if not np.isfinite(due).all():
            raise EscrowError("Escrow.hold: due times must be finite")
        self._grow(m)
        ids = np.arange(self.n, self.n + m)
        self.job[ids] = job
        self.provider[ids] = provider
        self.amount[ids] = amount
        self.due[ids] = due
        self.state[ids] = HELD
        self.settled_at[ids] = np.nan
        self.n += m
        self.collected += float(amount.sum())
        for d, i in zip(due.tolist(), ids.tolist()):
            heapq.heappush(self._heap, (d, i))
        return ids

    def due_entries(self, at: float) -> np.ndarray:
        """Ids of held entries due at or before ``at`` (each returned once, in due order)."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= at:
            _, i = heapq.heappop(heap)
            if self.state[i] == HELD:
                out.append(i)
        return np.asarray(out, dtype=np.int64)

    def settle(self, entries, completed, at: float) -> tuple[float, float]:
        """Settle entries at ``at`` (step 2c): pay the provider if completed, else refund.

        Raises :class:`EscrowError` if an entry is already settled, or if ``at`` is before its
        due time (the result and the money are released only at ``tau*``). Returns
        ``(paid, refunded)`` amounts.
        """
        entries = np.atleast_1d(np.asarray(entries, dtype=np.int64))
        completed = column(completed, bool, entries.shape)
        if entries.size == 0:
            return 0.0, 0.0
        if entries.min() < 0 or entries.max() >= self.n:
            raise EscrowError(f"Escrow.settle: entry ids outside 0..{self.n - 1}")
        if np.unique(entries).size != entries.size:
            raise EscrowError("Escrow.settle: an entry appears twice in one settlement")
        st = self.state[entries]
        if (st != HELD).any():
            i = int(entries[np.argmax(st != HELD)])
            raise EscrowError(f"Escrow.settle: entry {i} (job {self.job[i]}) is already "
                              f"{STATE_NAMES[int(self.state[i])]}: money can be paid or refunded once")
        early = self.due[entries] > at
        if early.any():
            i = int(entries[np.argmax(early)])
            raise EscrowError(f"Escrow.settle: entry {i} (job {self.job[i]}) is due at {self.due[i]}, "
                              f"cannot settle at {at} (result withheld until tau*)")
        amt = self.amount[entries]
        self.state[entries] = np.where(completed, PAID, REFUNDED)
        self.settled_at[entries] = at
        np.add.at(self.revenue, self.provider[entries[completed]], amt[completed])
        paid = float(amt[completed].sum())
        refunded = float(amt[~completed].sum())
        self.paid += paid
        self.refunded += refunded
        return paid, refunded

    @property
    def held(self) -> float:
        st = self.state[: self.n]
        return float(self.amount[: self.n][st == HELD].sum())

    def counts(self) -> dict[str, int]:
        c = np.bincount(self.state[: self.n].astype(np.int64), minlength=3)
        return {STATE_NAMES[s]: int(c[s]) for s in (HELD, PAID, REFUNDED)}

    def check(self, rtol: float = 1e-9) -> None:
        """Raise :class:`EscrowError` unless ``collected == paid + refunded + held`` (to rounding)."""
        st = self.state[: self.n]
        amt = self.amount[: self.n]
        parts = (float(amt[st == PAID].sum()), float(amt[st == REFUNDED].sum()), float(amt[st == HELD].sum()))
        tol = rtol * max(1.0, abs(self.collected))
        if abs(self.collected - sum(parts)) > tol or abs(parts[0] - self.paid) > tol or \
                abs(parts[1] - self.refunded) > tol or abs(self.revenue.sum() - self.paid) > tol:
            raise EscrowError(f"Escrow.check: collected {self.collected} != paid {parts[0]} + refunded {parts[1]} "
                              f"+ held {parts[2]} (running totals paid {self.paid}, refunded {self.refunded}, "
                              f"revenue {self.revenue.sum()})")


class ReliabilityLedger:
    """Per-provider completion record and reliability (protocol step 2a; decision 8).

    ``reliability = (alpha + successes) / (alpha + beta + attempts)``; with ``half_life``
    (time units) both counts decay by ``2 ** (-dt / half_life)`` between records, so recent
    behaviour weighs more.
    """

    def __init__(self, n_providers: int, alpha: float = 1.0, beta: float = 1.0, half_life: float | None = None):
        if alpha <= 0 or beta < 0:
            raise ValueError(f"ReliabilityLedger: need alpha > 0 and beta >= 0, got {alpha}, {beta}")
        if half_life is not None and not half_life > 0:
            raise ValueError(f"ReliabilityLedger: half_life must be > 0, got {half_life}")
        self.n_providers = int(n_providers)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.half_life = half_life
        self.successes = np.zeros(n_providers)
        self.attempts = np.zeros(n_providers)
        self.total_successes = np.zeros(n_providers, np.int64)
        self.total_attempts = np.zeros(n_providers, np.int64)
        self.last = 0.0

    def _decay(self, at: float) -> None:
        if self.half_life is not None and at > self.last:
            f = 2.0 ** (-(at - self.last) / self.half_life)
            self.successes *= f
            self.attempts *= f
        self.last = max(self.last, at)

    def record(self, providers, completed, at: float) -> None:
        """Record outcomes (step 2a) of jobs due at ``at``."""
        providers = np.atleast_1d(np.asarray(providers, dtype=np.int64))
        completed = column(completed, bool, providers.shape)
        self._decay(at)
        np.add.at(self.attempts, providers, 1.0)
        np.add.at(self.successes, providers[completed], 1.0)
        np.add.at(self.total_attempts, providers, 1)
        np.add.at(self.total_successes, providers[completed], 1)

    def reliability(self, at: float | None = None) -> np.ndarray:
        """(K,) current reliability of every provider."""
        s, a = self.successes, self.attempts
        if self.half_life is not None and at is not None and at > self.last:
            f = 2.0 ** (-(at - self.last) / self.half_life)
            s, a = s * f, a * f
        return (self.alpha + s) / (self.alpha + self.beta + a)


class StaticReliability(ReliabilityLedger):
    """A ledger whose published reliability stays at given values (records are still counted).

    For experiments and tests that hold reliability fixed over a bid's patience window, the
    setting of theorem 1 (threshold-reliability beliefs are about a fixed set ``Gamma_i``).
    """

    def __init__(self, values):
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 1 or np.any(~(values >= 0)) or np.any(values > 1):
            raise ValueError(f"StaticReliability: values must be a 1-d array in [0, 1], got {values}")
        super().__init__(values.shape[0])
        self.values = values

    def reliability(self, at: float | None = None) -> np.ndarray:
        return self.values.copy()
