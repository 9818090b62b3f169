"""Provider agents on the engine: local schedulers, pricing strategies, failures.

Source: Kang & Parkes (2007), section 3: "A resource provider can employ a
scheduling algorithm of choice, and retains autonomy to decide when to actually schedule a
job ... to get paid for a job it wins, it must schedule the job so the job can be completed on
or before the scheduled completion time". Pricing, scheduling and failure behaviour are left
to the implementer; this module supplies baselines.

:class:`EggPolicy` plugs the market infrastructure (:class:`~.market.Market`) and ``K``
provider agents into the engine (:class:`marketsched.engine.simulator.Simulator`). The engine
counts processors; each agent keeps its own share (``capacity``). Per batch at time ``t``
(the engine's order: completions, arrivals, timers, then this ``step``):

1. the market clock advances (tables roll; estimators whose inactive period ended activate);
2. jobs whose work ended free their provider's processor; their result is held until ``tau*``
   (rule R6);
3. crashes due now kill their job (the result will be missing at ``tau*``);
4. settlements due now (protocol step 2): completed by ``tau*`` -> paid; otherwise the job,
   if still queued or running, is dropped (the provider gains nothing by finishing late) and
   the payment refunded (``sim.charge(j, -p)``); reliability recorded;
5. providers install new price tables: all of them when a new slot enters the window, a
   load-aware one also when its state changed (at most every ``reprice_every`` seconds); a
   table is the provider's wish *projected* on the admissible set
   (:meth:`PriceBook.project`), so nothing is rejected; wishes submitted raw
   (``raw_updates=True``) may be rejected and are counted;
6. probes due now run (read-only audits: they see exactly what a bid arriving now sees);
7. bids arriving now are cleared together (all see the same tables); winners pay into escrow
   (``sim.charge(j, p)``) and join their provider's queue with a timer at ``tau*``; the rest
   are rejected (``sim.reject``);
8. every provider starts queued jobs on free processors in its scheduler's order.

Local schedulers (decision 12): ``"edf"`` (earliest scheduled completion first) and
``"fifo"`` (award order); non-preemptive; serial jobs only (split parallel jobs first). With
``drop_hopeless`` a provider discards a queued job whose *estimated* run time can no longer
meet ``tau*`` (it would not be paid) instead of wasting a processor on it.

Pricing (decision 11): :class:`StaticPricing` (per-unit: ``rate x (run-time bucket's upper
edge in hours + fee)``, the same in every slot) and :class:`LoadAwarePricing` (the static
price times ``1 + kappa * u(s)^2``, ``u(s)`` the share of the capacity up to the end of slot
``s`` already committed to jobs due by then, and ``+inf`` where a job of the bucket's size
would no longer fit by EDF's test). Both are projected: inside the locked window
``[now, now + Delta)`` a price can only rise, so a load-aware provider lowers prices only
outside it (and a slot it closed as full cannot reopen while locked).

Failures (decision 13): random crashes at a rate per second of run time (the crash point of
job ``j`` is ``E_j / rate`` with ``E_j ~ Exp(1)`` drawn once per job: common random numbers
across configurations), and deadline misses from overload or from run times longer than the
estimate (jobs are killed at ``tau*``). A crashed job is not restarted.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from marketsched.engine.state import require_serial
from marketsched.mechanisms.online.egg.bids import BidBatch
from marketsched.mechanisms.online.egg.market import Market
from marketsched.mechanisms.online.egg.price_table import AdmissibilityError

SCHEDULERS = ("edf", "fifo")


@dataclass
class StaticPricing:
    """Per-unit price: ``rate * (upper edge of the run-time bucket in hours + fee)``, flat in time."""

    rate: float = 1.0
    fee: float = 0.1
    hour: float = 3600.0

    def wish(self, agent: ProviderAgent, market: Market, now: float) -> np.ndarray:
        return self.base(market, agent.k)

    def base(self, market: Market, k: int) -> np.ndarray:
        book = market.book
        if len(book.edges) != 1:
            raise ValueError("StaticPricing prices one resource axis (run time); the book has "
                             f"{len(book.edges)}")
        upper = book.edges[0][k, 1:]
        col = self.rate * (upper / self.hour + self.fee)
        return np.broadcast_to(col[:, None], (upper.shape[0], book.horizon)).copy()

    @property
    def dynamic(self) -> bool:
        return False


@dataclass
class LoadAwarePricing(StaticPricing):
    """Static price times ``1 + kappa * u(s)^2``; ``+inf`` where the bucket's work no longer fits."""

    kappa: float = 4.0

    @property
    def dynamic(self) -> bool:
        return True

    def wish(self, agent: ProviderAgent, market: Market, now: float) -> np.ndarray:
        book = market.book
        base = self.base(market, agent.k)
        avail, need, suffix_min = edf_room(agent.capacity, agent.committed_work(book, now), book, now)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(avail > 0, np.minimum(need / avail, 1.0), 1.0)
        price = base * (1.0 + self.kappa * u[None, :] ** 2)
        work = book.edges[0][agent.k, 1:]
        price[work[:, None] > suffix_min[None, :]] = np.inf
        return price


def edf_room(capacity: float, due: np.ndarray, book, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """EDF's test on a book's columns for ``capacity`` processors holding work ``due`` (processor-
    seconds due in each column): per column, the processor-seconds available from ``now`` to its
    end, the work due by then, and the room, the least ``available - due`` from that column on. A
    new job of work ``w`` due in column ``s`` fits beside the others (every job still meets its
    column by earliest deadline first) iff ``w <= room[s]``."""
    ends = book.slot_starts + book.slot
    avail = capacity * np.maximum(ends - now, 0.0)
    need = np.cumsum(due)
    return avail, need, np.minimum.accumulate((avail - need)[::-1])[::-1]


@dataclass
class ProviderAgent:
    """One provider: processors, local scheduler, pricing, failure rate (its own share of the engine)."""

    capacity: int
    scheduler: str = "edf"
    pricing: StaticPricing = field(default_factory=StaticPricing)
    crash_rate: float = 0.0  # crashes per second of run time
    drop_hopeless: bool = True
    reprice_every: float = 0.0  # a dynamic pricer reprices at most this often (and at every new slot)
    name: str = ""

    def __post_init__(self):
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"ProviderAgent: scheduler must be one of {SCHEDULERS}, got {self.scheduler!r}")
        if isinstance(self.capacity, bool) or int(self.capacity) != self.capacity or self.capacity < 1:
            raise ValueError(f"ProviderAgent: capacity must be a whole number >= 1, got {self.capacity!r}")
        if not (self.crash_rate >= 0 and math.isfinite(self.crash_rate)):
            raise ValueError(f"ProviderAgent: crash_rate must be a finite number >= 0, got {self.crash_rate!r}")
        self.capacity = int(self.capacity)

    def reset(self, k: int) -> None:
        self.k = k
        self.free = self.capacity
        self.queue: list[tuple[float, int, int]] = []  # (key, seq, job)
        self.running: set[int] = set()
        self.deadline: dict[int, float] = {}
        self.estimate: dict[int, float] = {}
        self.started: dict[int, float] = {}
        self.seq = 0
        self.changed = True
        self.next_reprice = -math.inf

    def enqueue(self, j: int, deadline: float, estimate: float) -> None:
        self.deadline[j] = deadline
        self.estimate[j] = estimate
        key = deadline if self.scheduler == "edf" else float(self.seq)
        heapq.heappush(self.queue, (key, self.seq, j))
        self.seq += 1
        self.changed = True

    def forget(self, j: int) -> None:
        self.deadline.pop(j, None)
        self.estimate.pop(j, None)
        self.started.pop(j, None)
        self.changed = True

    def committed_work(self, book, now: float) -> np.ndarray:
        """Estimated processor-seconds still to do, per column of the book, by due column.

        A queued job counts its estimate; a running one its estimate minus the time it has run,
        and, once it has overrun its estimate, the time left to its deadline (it holds its
        processor until it ends or is killed at ``tau*``).
        """
        out = np.zeros(book.horizon)
        if not self.deadline:
            return out
        jobs = list(self.deadline)
        d = np.fromiter((self.deadline[j] for j in jobs), float, len(jobs))
        r = np.fromiter((self.estimate[j] - (now - self.started[j] if j in self.started else 0.0) for j in jobs),
                        float, len(jobs))
        running = np.fromiter((j in self.started for j in jobs), bool, len(jobs))
        r = np.where(running & (r <= 0), d - now, r)
        col = np.clip(np.ceil(d / book.slot).astype(np.int64) - 1 - book.base, 0, book.horizon - 1)
        np.add.at(out, col, np.maximum(r, 0.0))
        return out


class EggPolicy:
    """The Egg market on the engine: infrastructure + provider agents (see the module docstring).

    Parameters
    ----------
    market:
        The infrastructure (tables, estimators, ledger, escrow), at the workload's start time.
    agents:
        One :class:`ProviderAgent` per provider of the market.
    bids:
        One reported bid per workload row (``arrival`` = the row's submit time).
    crash_draws:
        ``E_j ~ Exp(1)`` per job (default: none crash).
    probes:
        ``[(time, fn)]``: ``fn(policy, t)`` is called at ``time`` (read-only audits).
    raw_updates:
        Submit providers' wishes without projection (rejected ones are counted, the old
        table stays).
    """

    def __init__(self, market: Market, agents: list[ProviderAgent], bids: BidBatch, crash_draws=None,
                 probes=None, raw_updates: bool = False, name: str = "egg"):
        if len(agents) != market.n_providers:
            raise ValueError(f"EggPolicy: {len(agents)} agents for {market.n_providers} providers")
        self.market = market
        self.agents = agents
        self.bids = bids
        self.crash_draws = None if crash_draws is None else np.asarray(crash_draws, dtype=np.float64)
        self.probes = sorted(probes or [], key=lambda p: p[0])
        self.raw_updates = raw_updates
        self.name = name

    # ------------------------------------------------------------------ engine hooks
    def bind(self, sim) -> None:
        n = sim.n_jobs
        if len(self.bids) != n:
            raise ValueError(f"{self.name}: {len(self.bids)} bids for {n} jobs")
        if not np.array_equal(self.bids.arrival, np.asarray(sim.submit)):
            raise ValueError(f"{self.name}: bid arrivals must equal the workload's submit times")
        require_serial(self.name, sim.procs)
        total = sum(a.capacity for a in self.agents)
        if total > sim.capacity:
            raise ValueError(f"{self.name}: providers hold {total} processors, the machine has {sim.capacity}")
        if self.crash_draws is not None and self.crash_draws.shape != (n,):
            raise ValueError(f"{self.name}: crash_draws must have one entry per job ({n})")
        self.sim = sim
        for k, a in enumerate(self.agents):
            a.reset(k)
        self.provider = np.full(n, -1, np.int64)
        self.price = np.zeros(n)
        self.completion = np.full(n, np.nan)  # tau*
        self.entry = np.full(n, -1, np.int64)
        self.finished = np.full(n, np.nan)  # when the work ended
        self.paid = np.zeros(n, bool)
        self.crashes: list[tuple[float, int]] = []
        self.crashed = np.zeros(n, bool)
        self.dropped = np.zeros(n, bool)
        self.killed_at_deadline = np.zeros(n, bool)
        self.rejected_updates = 0
        self.last_slot: int | None = None
        self.reliability_log: list[tuple[float, np.ndarray]] = []
        self._job_of_entry: dict[int, int] = {}
        for t, _ in self.probes:
            sim.wake_at(t)
        self._probe_i = 0

    def step(self, t: float, arrived: range, completed: list[int]) -> None:
        sim = self.sim
        market = self.market
        market.advance(t)
        agents = self.agents
        for j in completed:
            a = agents[self.provider[j]]
            a.free += 1
            a.running.discard(j)
            a.forget(j)
            self.finished[j] = t
        while self.crashes and self.crashes[0][0] <= t:
            _, j = heapq.heappop(self.crashes)
            a = agents[self.provider[j]]
            if j in a.running:
                sim.kill(j)
                a.running.discard(j)
                a.free += 1
                a.forget(j)
                self.crashed[j] = True
        due = market.due()
        if due.size:
            jobs = market.escrow.job[due]
            ok = np.array([self.finished[j] <= self.completion[j] for j in jobs.tolist()], dtype=bool)
            for j, good in zip(jobs.tolist(), ok.tolist()):
                if good:
                    self.paid[j] = True
                    continue
                a = agents[self.provider[j]]
                if j in a.running:
                    sim.kill(j)
                    a.running.discard(j)
                    a.free += 1
                    self.killed_at_deadline[j] = True
                elif sim.state[j] == 0:  # still queued
                    sim.discard(j)
                    self.dropped[j] = True
                a.forget(j)
                sim.charge(j, -self.price[j])  # refund
            market.settle(due, ok)
        slot = market.book.base
        new_slot = slot != self.last_slot
        if new_slot:  # new columns entered the window: every provider prices them
            self.last_slot = slot
            self.reliability_log.append((t, market.ledger.reliability(t).copy()))
        for a in agents:
            if new_slot or (a.changed and a.pricing.dynamic and t >= a.next_reprice):
                self._reprice(a, t)
        while self._probe_i < len(self.probes) and self.probes[self._probe_i][0] <= t:
            self.probes[self._probe_i][1](self, t)
            self._probe_i += 1
        if len(arrived):
            rows = np.arange(arrived.start, arrived.stop)
            batch = self.bids.take(rows)
            out, entry = market.submit(batch, rows)
            for b, j in enumerate(rows.tolist()):
                k = int(out.provider[b])
                if k < 0:
                    sim.reject(j)
                    continue
                p = float(out.price[b])
                self.provider[j] = k
                self.price[j] = p
                self.completion[j] = out.completion[b]
                self.entry[j] = entry[b]
                sim.charge(j, p)
                agents[k].enqueue(j, float(out.completion[b]), float(out.runtime[b]))
                sim.wake_at(float(out.completion[b]))
        for a in agents:
            self._dispatch(a, t)

    def _reprice(self, a: ProviderAgent, t: float) -> None:
        market = self.market
        wish = a.pricing.wish(a, market, t)
        if not self.raw_updates:
            wish = market.book.project(a.k, wish, t)
        try:
            market.update_prices(a.k, wish)
        except AdmissibilityError:
            self.rejected_updates += 1
        a.changed = False
        a.next_reprice = t + a.reprice_every

    def _dispatch(self, a: ProviderAgent, t: float) -> None:
        sim = self.sim
        while a.free > 0 and a.queue:
            _, _, j = heapq.heappop(a.queue)
            if sim.state[j] != 0 or j not in a.deadline:
                continue  # already settled (dropped at its deadline)
            if a.drop_hopeless and t + a.estimate[j] > a.deadline[j]:
                sim.discard(j)
                self.dropped[j] = True
                a.deadline.pop(j, None)  # keeps its escrow entry: refunded at tau*
                a.changed = True
                continue
            sim.start(j)
            a.free -= 1
            a.running.add(j)
            a.started[j] = t
            a.changed = True
            if a.crash_rate > 0 and self.crash_draws is not None:
                ct = t + self.crash_draws[j] / a.crash_rate
                if ct < t + sim.remaining[j]:
                    heapq.heappush(self.crashes, (ct, j))
                    sim.wake_at(ct)

    def close(self, t: float) -> None:
        pass

    # ------------------------------------------------------------------ results
    def completed_on_time(self) -> np.ndarray:
        """Boolean per job: awarded and its result was ready by ``tau*`` (paid)."""
        return self.paid.copy()
