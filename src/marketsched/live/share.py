"""Proportional Share and Sanghavi-Hajek as a running market on one or several CPUs of this machine.

Source: Stößer (2009), chapter 6: section 6.2.2 (Proportional Share), section 6.2.3 (the
Sanghavi-Hajek rule of Sanghavi & Hajek (2004)) and section 6.4.1 (the multi-request market:
every second each active request bids, receives ``x_j = min(c_j, tau_j C)`` CPUs and pays its
bid ``b_j c_j``). The rule is the simulator's own :func:`marketsched.mechanisms.online.share.market_round`
(which calls :func:`~marketsched.mechanisms.online.share.shares`); the bidders are objects with
the simulator's bidder interface (``reset``, ``begin``, ``bid``, ``observe``, ``end``, as
:class:`marketsched.behaviour.learning.ZIC`), so the simulator's ZIC and Q-learning bidders
(:func:`~marketsched.behaviour.learning.make_bidder`) run here as live agents unchanged.

Steps of one period (:meth:`ShareMarket.resplit`, every ``interval`` seconds on the periodic
thread of :class:`~marketsched.live.tycoon.CpuShareHosts`, the machinery Tycoon mode runs on):

1. draw one uniform per job from the market's seeded generator (in job order, as the
   simulator's policy draws them) and ask the bidder for this period's bids;
2. shares and payments by ``market_round(rule, bids, cpus, capacity)``;
3. enforce the shares: on one CPU each job's cgroup CPU weight is its share scaled so the
   largest share maps to the cgroup's largest weight (or the stride fallback: tickets = shares);
   on several CPUs (:meth:`ShareMarket.apply`) each job is placed on a CPU by :func:`place`,
   capped at its share by a CPU quota and weighted by its share among the jobs of its CPU;
4. record the period (bids, shares, payments) in ``history``; the bidder observes the shares.

Decisions
---------
* **The machine**: one CPU (``host``) shared by ``n`` jobs, each asking for one CPU (``c_j = 1``,
  pool ``C = 1``), so ``x_j = tau_j``: the job's share of the CPU's time. Jobs asking for more
  than one CPU (``c_j > 1``) are not done live.
* **Several CPUs** (``host`` a list of ``N`` CPUs, ``marketsched market share --cpus N``): the
  pool of section 6.4.1 with ``C = N`` and serial jobs (``c_j = 1``). A serial job cannot use
  more than one CPU, so the thesis's allocation is ``x_j = min(1, tau_j N)`` CPUs
  (``market_round`` with capacity ``N``), and what a job's share would give above one CPU is
  **wasted, not re-divided**: section 6.4.1 allocates ``x_jt = min{c_j, tau_j C}`` and
  section 6.4.3 names the excess "a waste since the current allocation rule does not
  re-allocate this excess allocation to other requests". Re-dividing it would be another
  mechanism (and the simulator, whose payments and CPU-seconds the books are checked against,
  wastes it too). CFS weights alone cannot give these shares (a serial job runs on one CPU at a
  time and the scheduler balances the runnable jobs over the CPUs: weights for the shares
  [0.5, 0.33, 0.17] of two CPUs delivered [0.33, 0.28, 0.39]), so a period's ``x`` is enforced
  in three parts:

  1. **placement** (:func:`place`): first-fit decreasing, each job pinned (CPU affinity) to the
     first CPU whose placed shares leave room for ``x_j``; a CPU then carries at most one CPU of
     shares and its weights divide it as the rule says. A job that fits on no CPU (the shares
     cannot always be packed: three jobs of 2/3 on two CPUs) may run on every CPU of the pool;
  2. **a CPU quota** per job (cgroup ``cpu.cfs_quota_us`` / ``cpu.max``): ``x_j`` times the
     kernel's period, so no job receives more than its share, whatever the others do (this is
     what wastes the excess, and what lets a job that fits nowhere use the room the others'
     quotas leave);
  3. **CPU weights** proportional to ``x_j``, which divide a CPU among its jobs when others'
     programs also want it.

  Stride scheduling (the user-space fallback) runs one CPU only.
* **A period is the thesis's second**: with ``interval`` 1 s (the default) a period is exactly
  the market's round of section 6.4.1; with another interval a bid is the payment for one
  period. Payments are pay-as-bid per period (``b_j c_j``), for Proportional Share and for
  Sanghavi-Hajek alike, as the simulator's :class:`~marketsched.mechanisms.online.share.ShareMarketPolicy`
  charges them (the sum of the bids times ``c_j``, charged when the job ends).
* **Money**: the payments are recorded per period in ``history`` and totalled in
  :attr:`ShareMarket.paid` (exact to the micro-unit of what the simulator computes for the same
  bids: :func:`replay_through_simulator`). Given ``books`` (:class:`~marketsched.live.sharebooks.ShareBooks`),
  each period is also booked in the live market's ledger, exactly once: the bids are taken to
  micro-units and capped at each owner's balance before the rule (the budget decision is in
  :mod:`marketsched.live.sharebooks`), the period is booked before its shares are enforced, and a
  market started again on the same books continues at the first round not booked, with the
  bidders' generator advanced past the booked rounds (a stateless bidder, fixed or ZIC, then
  bids as in an uninterrupted run; a Q-learning bidder starts learning again).
* **The first period** is bid and enforced when the jobs start (round 0), the next one interval
  later; a run of ``k`` rounds is ``k`` periods.
"""

from __future__ import annotations

import os
import signal
from collections import deque
from dataclasses import dataclass

import numpy as np

from marketsched.live.tycoon import CpuShareHosts
from marketsched.mechanisms.online.share import RULES, market_round
from marketsched.platform.clock import SteadyClock
from marketsched.platform.ledger import MICRO

USAGE_KEPT = 64  # periods of CPU-time samples a market keeps for its page


class FixedBids:
    """A bidder that bids the same amounts every period (bids given by hand), with the
    simulator's bidder interface (see :class:`marketsched.behaviour.learning.ZIC`)."""

    stateful = False

    def __init__(self, bids) -> None:
        b = np.asarray(bids, dtype=np.float64)
        if b.ndim != 1 or not len(b):
            raise ValueError(f"fixed bids: need a list of bids, got {bids!r}")
        if not np.all(np.isfinite(b)) or np.any(b < 0):
            raise ValueError(f"fixed bids must be finite and >= 0, first bad one at index {int(np.argmax(~(b >= 0) | ~np.isfinite(b)))}")
        if not b.max() > 0:
            raise ValueError("fixed bids: at least one bid must be positive")
        self.fixed = b

    def reset(self, values, cpus) -> None:
        if np.shape(values)[-1] != len(self.fixed):
            raise ValueError(f"fixed bids: {len(self.fixed)} bids for {np.shape(values)[-1]} jobs")

    def begin(self, rows) -> None:
        self.v = self.fixed[np.asarray(rows)]

    def bid(self, u) -> np.ndarray:
        return np.broadcast_to(self.v, np.shape(u)).copy()

    def observe(self, x, bids) -> None:
        pass

    def end(self) -> None:
        pass


class RecordedBids(FixedBids):
    """Replays recorded bids, one period per call of :meth:`bid` (``rounds x jobs``)."""

    stateful = True  # one call per second: the simulator's policy must not bid in chunks

    def __init__(self, rounds) -> None:
        r = np.asarray(rounds, dtype=np.float64)
        if r.ndim != 2 or not r.shape[0]:
            raise ValueError(f"recorded bids: need a (rounds x jobs) table, got shape {r.shape}")
        super().__init__(r[0])
        self.rounds, self.k = r, 0

    def begin(self, rows) -> None:
        self.rows = np.asarray(rows)

    def bid(self, u) -> np.ndarray:
        if self.k >= len(self.rounds):
            raise ValueError(f"recorded bids: asked for round {self.k}, only {len(self.rounds)} recorded")
        b = self.rounds[self.k, self.rows]
        self.k += 1
        return np.broadcast_to(b, np.shape(u)).copy()


def place(shares, ncpus: int, tol: float = 1e-9) -> np.ndarray:
    """Which of ``ncpus`` CPUs each job runs on, for shares ``x_j`` (CPUs, each in [0, 1]):
    first-fit decreasing. Steps: (1) jobs in decreasing share (ties: job order); (2) each job
    with a positive share goes to the first CPU whose placed shares plus ``x_j`` stay within one
    CPU (``tol`` for rounding); (3) a job that fits on none gets -1 (it may run on every CPU:
    its quota caps it); a job with share 0 gets -2 (it does not run). Returns the CPU index
    (0..ncpus-1) per job."""
    x = np.asarray(shares, dtype=np.float64)
    if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x < 0) or np.any(x > 1 + tol):
        raise ValueError(f"place: shares must be a list of numbers in [0, 1], got {shares!r}")
    if ncpus < 1:
        raise ValueError(f"place: need at least one CPU, got {ncpus}")
    load = np.zeros(int(ncpus))
    out = np.full(len(x), -2, dtype=np.int64)
    for i in np.argsort(-x, kind="stable"):
        if x[i] <= 0:
            continue
        room = np.flatnonzero(load + x[i] <= 1.0 + tol)
        out[i] = room[0] if len(room) else -1
        if len(room):
            load[room[0]] += x[i]
    return out


@dataclass(frozen=True)
class Period:
    """One period of a live share market: its bids, the rule's shares and the payments (per job)."""

    round: int
    bids: np.ndarray
    shares: np.ndarray
    payments: np.ndarray


class ShareMarket(CpuShareHosts):
    """Proportional Share (``rule="ps"``) or Sanghavi-Hajek (``"sh"``) on CPU ``host`` (or on the
    pool of CPUs ``host``, a list) among ``len(values)`` jobs (Stößer 2009, chapter 6; see the
    module docstring for the steps and for what a share of several CPUs is).

    ``bidder``: an object with the simulator's bidder interface (:class:`FixedBids`,
    :class:`~marketsched.behaviour.learning.ZIC`, ...); ``values``: the jobs' true values per
    CPU-second (the bidder's input; ZIC bids on ``{1..v}``); ``seed``: the generator of the
    bidders' uniforms; ``interval``, ``enforcement``, ``quantum``: as for
    :class:`~marketsched.live.tycoon.CpuShareHosts`; ``books``: the market's
    :class:`~marketsched.live.sharebooks.ShareBooks` (None: payments recorded, not booked);
    ``clock``: every time the market reads, in seconds: the time booked with a period and the
    time of each CPU-time sample (the page's CPUs received are CPU seconds over its differences);
    default a :class:`~marketsched.platform.clock.SteadyClock` (Unix time that a change of the
    system clock does not step, so the samples' differences are elapsed seconds). The periodic
    thread's pacing (:class:`~marketsched.live.tycoon.CpuShareHosts`) waits in real time: it is
    not a reading the market records."""

    kind = "share"

    def __init__(self, host: int | list[int], rule: str, bidder, values, *, interval: float = 1.0, seed: int = 0,
                 enforcement: str = "auto", quantum: float = 0.02, name: str | None = None, books=None,
                 clock=None):
        if str(rule).lower() not in RULES:
            raise ValueError(f"unknown rule {rule!r}: use 'ps' (Proportional Share) or 'sh' (Sanghavi-Hajek)")
        self.values = np.asarray(values, dtype=np.float64)
        if self.values.ndim != 1 or len(self.values) < 1 or not np.all(np.isfinite(self.values)):
            raise ValueError(f"values must be a non-empty list of finite numbers, got {values!r}")
        try:  # one CPU, or any sequence of CPUs (a list, a range, an array)
            self.pool = [int(h) for h in np.atleast_1d(np.asarray(host)).tolist()]
        except (TypeError, ValueError):
            raise ValueError(f"the CPUs of a share market are a CPU number or a list of them, got {host!r}") from None
        if not self.pool or len(set(self.pool)) != len(self.pool):
            raise ValueError(f"the CPUs of a share market must be distinct, got {self.pool}")
        # the jobs start on the pool's first CPU (frozen); apply() places them on several CPUs
        super().__init__(self.pool[:1], len(self.values), interval=interval, enforcement=enforcement,
                         quantum=quantum, name=name)
        missing = sorted(set(self.pool) - os.sched_getaffinity(0))
        if missing:
            raise ValueError(f"CPU(s) {missing} are not available to this process (CPUs {sorted(os.sched_getaffinity(0))})")
        if len(self.pool) > 1 and self.enforcement == "stride":
            raise ValueError("a share market on several CPUs needs cgroup CPU quotas and weights; stride scheduling "
                             "runs one CPU")
        self.rule = str(rule).lower()
        self.capacity = float(len(self.pool))  # C CPUs (module docstring, "The machine", "Several CPUs")
        self.placement = np.full(len(self.values), -2, dtype=np.int64)  # where apply() put each job (place)
        self.cpus = np.ones(self.users)
        self.bidder = bidder
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        bidder.reset(self.values[None, :], self.cpus)
        bidder.begin(np.arange(self.users))
        self.shares = np.zeros(self.users)
        self.paid = np.zeros(self.users)  # pay-as-bid payments so far, per job
        self.history: list[Period] = []
        self.books, self.clock = books, SteadyClock() if clock is None else clock
        # after each period is enforced: (clock time, CPU seconds per job, the shares in force)
        self.usage: deque[tuple[float, np.ndarray, np.ndarray]] = deque(maxlen=USAGE_KEPT)
        self._started = False
        if books is not None:
            if len(books.owners) != self.users:
                raise ValueError(f"the books have {len(books.owners)} owners for {self.users} jobs")
            if books.rule != self.rule:
                raise ValueError(f"the books are for rule {books.rule!r}, the market's is {self.rule!r}")
            if books.cpus != len(self.pool):
                raise ValueError(f"the books are for {books.cpus} CPU(s), the market has {len(self.pool)}")
            for p in books.periods():  # a market started again continues its books
                b = np.asarray(p["bids"], dtype=np.float64) / MICRO
                pay = np.asarray(p["payments"], dtype=np.float64) / MICRO
                self.history.append(Period(p["round"], b, np.asarray(p["shares"]), pay))
                self.paid += pay
            self.rng.random((len(self.history), self.users))  # the draws of the booked rounds

    def tickets(self) -> np.ndarray:
        """The rule's shares: each job's CPU weight is proportional to its share."""
        return self.shares[:, None]

    def apply(self) -> None:
        """Enforce the current shares. One CPU: the cgroup weights (or stride tickets) of
        :class:`~marketsched.live.tycoon.CpuShareHosts`. Several CPUs (module docstring, "Several
        CPUs"): each job with a positive share is pinned where :func:`place` puts it (a job that
        fits nowhere: every CPU of the pool), gets the CPU quota ``x_j`` and the weight
        ``x_j / max x``; a job with share 0 is stopped (frozen)."""
        if len(self.pool) == 1:
            super().apply()
            return
        with self._lock:
            assert self.executor is not None  # started
            x = self.shares
            where = place(np.minimum(x, 1.0), len(self.pool))
            top = x.max() if len(x) else 0.0
            for i in range(self.users):
                job = self.jobs[(i, 0)]
                if where[i] == -2:
                    self._signal(job, signal.SIGSTOP)
                    continue
                cpus = self.pool if where[i] == -1 else [self.pool[where[i]]]
                self.executor.set_affinity(job.key, cpus)
                job.extra["quota"] = self.executor.set_cpus(job.key, float(x[i]))
                job.extra["weight"] = self.executor.set_weight(job.key, x[i] / top)
                job.extra["cpus"] = list(cpus)
                self._signal(job, signal.SIGCONT)
            self.placement = where

    def start(self, commands=None):
        """Bid round 0, then start the jobs (with round 0's shares) and the periodic thread."""
        with self._lock:
            if self._started or self._stop.is_set():
                raise RuntimeError("a ShareMarket starts once")
            self._started = True
            if self.books is not None:
                self.books.end_leftovers()  # what a killed market on these books left (sharebooks)
            self._round()
        super().start(commands)
        with self._lock:
            self._sample()
        if self.books is not None:
            assert self.executor is not None
            layout = self.executor.layout
            self.books.claim(layout.track[0] if layout.track else None, layout.dirs())
        return self

    def resplit(self) -> Period | None:
        """One period: new bids, the rule's shares enforced, payments recorded; returns it (None:
        not played, nobody could pay)."""
        with self._lock:
            period = self._round()
            self.apply()
            self._sample()
            return period

    def _sample(self) -> None:
        self.usage.append((self.clock(), self.cpu_seconds()[:, 0], self.shares.copy()))

    def status(self, periods: int = 10) -> dict:
        """The market's state for its page (:mod:`marketsched.live.share_page`): rule, CPUs,
        enforcement, rounds played, and per job its last bid, its CPUs (the rule's ``x_j``), the
        rule's fraction of the jobs' CPU time and the delivered fraction (CPU time per cgroup)
        over the last ``periods`` periods enforced, the CPUs it received there (CPU seconds over
        wall seconds), its CPU seconds so far, what it has paid and where it runs."""
        with self._lock:
            rounds, bids, x = len(self.history), self.bids[:, 0].copy(), self.shares.copy()
            paid, placement = self.paid.copy(), self.placement.copy()
            kept = list(self.usage)[-(periods + 1):]
        n = self.users
        rule = delivered = received = np.full(n, np.nan)
        if len(kept) >= 2:
            dt = kept[-1][0] - kept[0][0]
            d = kept[-1][1] - kept[0][1]
            mean = np.mean([k[2] for k in kept[:-1]], axis=0)
            if mean.sum() > 0:
                rule = mean / mean.sum()
            if d.sum() > 0:
                delivered = d / d.sum()
            received = d / dt if dt > 0 else received
        cpu = kept[-1][1] if kept else np.zeros(n)

        def num(v) -> float | None:
            return None if not np.isfinite(v) else float(v)

        many = len(self.pool) > 1
        jobs = [{"job": i, "owner": self.books.owners[i] if self.books is not None else None,
                 "bid": float(bids[i]), "cpus": float(x[i]), "rule": num(rule[i]), "delivered": num(delivered[i]),
                 "received": num(received[i]), "cpu_seconds": float(cpu[i]), "paid": float(paid[i]),
                 "on": (None if placement[i] == -2 else "any" if placement[i] == -1 else self.pool[placement[i]])
                 if many else (self.pool[0] if x[i] > 0 else None)}
                for i in range(n)]
        return {"rule": self.rule, "cpus": list(self.pool), "enforcement": self.enforcement,
                "interval": self.interval, "rounds": rounds, "window": max(len(kept) - 1, 0),
                "books": self.books.market if self.books is not None else None, "jobs": jobs}

    def _round(self) -> Period | None:
        u = self.rng.random((1, self.users))
        b = np.asarray(self.bidder.bid(u), dtype=np.float64)[0]
        k = len(self.history)
        if self.books is not None:
            micro = self.books.cap(b)
            b = micro / MICRO
            if not micro.any():  # nobody can pay: the period is not played (sharebooks, "Budgets")
                self.bids[:, 0] = 0.0
                self.shares = np.zeros(self.users)
                return None
        x, pay = market_round(self.rule, b, self.cpus, self.capacity)
        if self.books is not None:  # booked (exactly once) before the shares are enforced
            self.books.book(k, self.clock(), micro, x, np.rint(pay * MICRO).astype(np.int64))
        self.bidder.observe(x[None, :], b[None, :])
        self.bids[:, 0] = b
        self.shares = x
        self.paid += pay
        period = Period(k, b.copy(), x.copy(), pay.copy())
        self.history.append(period)
        return period

    def snapshot(self) -> tuple[int, np.ndarray, np.ndarray]:
        """``(rounds played, bids, shares)`` of the last period, taken together (per job)."""
        with self._lock:
            return len(self.history), self.bids[:, 0].copy(), self.shares.copy()

    def cpu_seconds(self) -> np.ndarray:
        """CPU seconds each job's cgroup has used so far (jobs x 1; the process's without a cgroup)."""
        assert self.executor is not None, "the market has not started"
        return np.array([[self.executor.cpu_seconds(self.jobs[(i, 0)].key)] for i in range(self.users)])

    def since(self, k: int) -> tuple[int, np.ndarray, np.ndarray]:
        """``(rounds played, mean share per job over rounds k.. (the last one if none), paid so far)``."""
        with self._lock:
            periods = self.history[k:] or self.history[-1:]
            return len(self.history), np.mean([p.shares for p in periods], axis=0), self.paid.copy()


def replay_through_simulator(rule: str, bids, capacity: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Recorded bids (``rounds x jobs``, one row per period) replayed through the simulator's
    share market: :func:`~marketsched.mechanisms.online.share.run_on_engine` on a workload of
    the same jobs (released at 0, one CPU each, running for the recorded number of rounds) on a
    pool of ``capacity`` CPUs (the live market's ``C``), with a bidder that bids the recorded rows. Returns ``(CPU-seconds received,
    payments)`` per job, as the simulator computes them (its policy's ``received`` and the
    engine's charged payments)."""
    from marketsched.mechanisms.online.share import run_on_engine
    from marketsched.workloads.workload import Workload

    b = np.asarray(bids, dtype=np.float64)
    rounds, n = b.shape
    w = Workload.from_columns(submit_time=np.zeros(n), runtime=np.full(n, float(rounds)), capacity=int(capacity),
                              name="live share market replay")
    records, policy = run_on_engine(w, np.ones(n), rule, RecordedBids(b), capacity=float(capacity))
    return policy.received.copy(), np.asarray(records.payment, dtype=np.float64)
