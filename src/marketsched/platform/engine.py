"""The live engine: the simulator's policy-facing API on an injected clock.

One rule, one implementation: the live market does not re-implement any
mechanism. It drives the very policy objects the :class:`~marketsched.engine.simulator.Simulator`
drives (e.g. :class:`~marketsched.mechanisms.online.priority.PriorityScheduler` with
:class:`~marketsched.mechanisms.online.pricing.KthPrice`), through the same interface:

* attributes ``n_jobs``, ``procs``, ``running``, ``used``, ``free``, ``capacity``, ``now``,
  ``payment``, ``state``, ``first_start``, ``end_time``, ``preemptions``;
* actions ``start``, ``preempt``, ``finish``, ``kill``, ``discard``, ``reject``, ``charge``,
  ``wake_at``;
* hooks it calls on the policy: ``bind``, ``advance(t)`` (before anything changes), ``step(t,
  arrived, completed)``, ``close(t)``.

What differs from the simulator is where events come from. In the simulator, arrivals are the
workload's rows and completions come from a heap of run times; here rows are appended as users
submit (:meth:`LiveEngine.batch`), and a job completes when its real process exits (the broker
reports it). The engine keeps no processes: each action a policy takes is appended to
:attr:`LiveEngine.effects` as ``(kind, row, t)``, and the broker carries the effects out (launch,
SIGCONT, SIGSTOP, kill) after each decision. With a :class:`~marketsched.platform.clock.FakeClock`
and a scripted sequence of arrivals and completions, the live engine makes exactly the decisions
and payments the simulator makes (``tests/test_live_engine.py``).

Event order is the simulator's: one batch per call of :meth:`LiveEngine.batch`, in which the
policy's ``advance(now)`` runs first, then the completions (``completed``, sorted), then the
arrivals (a range of new rows, in submission order), then the due timers, then one ``step``.

Extra operations a real market needs and a trace never has (documented decisions):

* **withdraw** (a user cancels a job, its owner runs out of money, or its process ended while it
  was queued): a running row is stopped and reported to the policy in ``completed`` (for the
  priority mechanisms a stopped job is exactly that: its node frees and its payment is
  settled); a queued row is taken out of the policy's queue with the policy's ``withdraw(j)``.
  The row ends in a final state (KILLED for cancelled or held jobs, COMPLETED when its process
  ended), and the decision that follows is the same single ``step`` as for any batch.
* **rebid** (a user changes the bid of a queued or running job): the policy's ``rebid(j, bid,
  key)`` after the completions and withdrawals and before the arrivals of the batch; rebids are
  checked first (a row must be in the market and not ending in the same batch), so a refused
  one changes nothing.
* **capacity** (the processors the policy may use) changes within a batch when the machine
  changes (the live market on Slurm: a node goes down or comes back): set after the completions,
  withdrawals and bid changes and before the arrivals; it may fall below the processors in use,
  and the policy's ``step`` then stops the jobs it would not run with fewer processors (for the
  priority mechanisms: lowest key first). The engine only sets the number; the policy decides.
  Each change is kept in :attr:`LiveEngine.capacity_changes` as ``(t, capacity)`` for a replay.
* **accrued_at** (a job's payment up to an earlier time): a job whose machine failed is known
  to have stopped only when the failure is detected, later (the live market on Slurm: a node
  declared down some 15 s after it died). Its payment is settled up to the failure time:
  prices change only at events, so after every batch the engine keeps the pricing's regime
  (:meth:`~marketsched.mechanisms.online.pricing.KthPrice.regime`: what every running job's
  price depends on until the next event) with its time, for :data:`REGIME_HORIZON` seconds;
  the payment up to ``t`` is the payment up to now less, for each interval since ``t``, the
  job's price in that interval's regime times its length. O(1) per batch; a query costs the
  batches since ``t``.
* A re-entered job (after a restart, or after its owner paid again) is a *new row*: rows are
  the mechanism's view of a job's presence in the market; the broker maps rows to jobs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from marketsched.engine.records import FinalState
from marketsched.engine.state import ClusterState, SchedulingError

INF = math.inf
REGIME_HORIZON = 3600.0  # s of price regimes kept for accrued_at (a failure is detected well within it)
_PENDING = int(FinalState.PENDING)
_COMPLETED = int(FinalState.COMPLETED)
_KILLED = int(FinalState.KILLED)


class LiveEngine(ClusterState):
    """Wall-clock (or fake-clock) counterpart of :class:`~marketsched.engine.simulator.Simulator`.

    Parameters
    ----------
    policy:
        The mechanism object (same interface as for the simulator). Its ``bind`` is called
        here, with no jobs yet; jobs are added through ``policy.add_jobs(bid, key, cost)``.
    capacity:
        Processors (slots) the policy may use.
    clock:
        A callable returning the current market time in seconds (never going back).
    """

    def __init__(self, policy, capacity: int, clock: Callable[[], float]):
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity must be a whole number of at least 1 slot, got {capacity!r}")
        self.capacity = int(capacity)
        self.max_capacity = self.capacity  # a job may ask for at most this many (the configured size)
        self.capacity_changes: list[tuple[float, int]] = []
        self.clock = clock
        self.policy = policy
        self.now = float(clock())
        self.n_jobs = 0
        self.submit: list[float] = []
        self.procs: list[int] = []
        self.running: list[bool] = []
        self.run_start: list[float] = []
        self.used = 0
        self.first_start: list[float] = []
        self.end_time: list[float] = []
        self.preemptions: list[int] = []
        self.payment: list[float] = []
        self.state: list[int] = []
        self.effects: list[tuple[str, int, float]] = []
        self._timers: list[float] = []
        self.batches = 0
        self.regimes: list[tuple[float, object]] = []  # (t, pricing regime from t on), see accrued_at
        policy.bind(self)
        self._advance = getattr(policy, "advance", None)

    # ------------------------------------------------------------------ queries
    def next_timer(self) -> float:
        """Time of the earliest timer a policy asked for (``inf`` if none)."""
        return self._timers[0] if self._timers else INF

    def accrued(self, j: int) -> float:
        """Payment of row ``j`` up to now, including a running job's open interval.

        Integrates the policy's prices up to now first (its ``advance`` hook, which only
        extends integrals and may be called at any time), then asks the payment scheme.
        """
        self._tick()
        return self.policy.pricing.accrued(j)

    def rate(self, j: int) -> float:
        """Price per second row ``j`` pays at this moment (0 if not running)."""
        return self.policy.pricing.rate(j)

    # ------------------------------------------------------------------ engine hooks
    def _effect(self, kind: str, j: int) -> None:
        self.effects.append((kind, j, self.now))

    start_metered = ClusterState.start  # the live engine never knows run times: every job is metered by its process

    # ------------------------------------------------------------------ events from the world
    def _tick(self) -> float:
        t = float(self.clock())
        if t < self.now:  # never backwards (see WallClock)
            t = self.now
        self.now = t
        if self._advance is not None:
            self._advance(t)
        return t

    def batch(self, arrivals=(), completed=(), withdrawn=(), withdrawn_state: int = _KILLED, rebids=(),
              capacity: int | None = None) -> range:
        """One batch of events at the clock's current time, then one decision.

        ``arrivals``: sequence of ``(bid, key, cost, procs)`` for new jobs (rows are appended in
        this order and returned). ``completed``: rows whose processes ended (running or, after
        a race with a preemption, queued). ``withdrawn``: rows leaving the market without
        completing (cancelled, held); they end in ``withdrawn_state``. ``rebids``: ``(row, bid,
        key)`` of queued or running jobs whose owners changed their bid (the policy's
        ``rebid``). ``capacity``: the processors usable from now (0 to the configured size; None:
        unchanged). Order within the batch: completions and withdrawals, bid changes, capacity,
        arrivals.
        """
        if capacity is not None and (int(capacity) != capacity or not 0 <= capacity <= self.max_capacity):
            raise ValueError(f"capacity must be a whole number from 0 to {self.max_capacity}, got {capacity!r}")
        ending = set(completed) | set(withdrawn)
        for j, _, _ in rebids:  # checked before anything changes
            if not 0 <= j < self.n_jobs or self.state[j] != _PENDING or j in ending:
                raise SchedulingError(f"job row {j} is not in the market: its bid cannot change")
        t = self._tick()
        stopped: list[int] = []
        for rows, code in ((completed, _COMPLETED), (withdrawn, withdrawn_state)):
            for j in rows:
                if self.state[j] != _PENDING:
                    raise SchedulingError(f"job row {j} already ended in state {FinalState(self.state[j]).name}")
                if self.running[j]:
                    self._stop(j)
                    stopped.append(j)
                elif not self.policy.withdraw(j):
                    raise SchedulingError(f"job row {j} is neither running nor queued")
                self.state[j] = code
                self.end_time[j] = t
        stopped.sort()
        for j, bid, key in rebids:
            self.policy.rebid(j, bid, key)
        if capacity is not None and int(capacity) != self.capacity:
            self.capacity = int(capacity)
            self.capacity_changes.append((t, self.capacity))
        first = self.n_jobs
        if arrivals:
            for a in arrivals:
                if not 1 <= a[3] <= self.max_capacity:
                    raise ValueError(f"a job needs {a[3]} processors but the market has {self.max_capacity}")
            bids, keys, costs = [], [], []
            for bid, key, cost, procs in arrivals:
                bids.append(bid)
                keys.append(key)
                costs.append(cost)
                self.submit.append(t)
                self.procs.append(int(procs))
                self.running.append(False)
                self.run_start.append(0.0)
                self.first_start.append(math.nan)
                self.end_time.append(math.nan)
                self.preemptions.append(0)
                self.payment.append(0.0)
                self.state.append(_PENDING)
            self.n_jobs += len(bids)
            try:
                self.policy.add_jobs(bids, keys, costs)  # validates before it appends anything
            except Exception:
                self._truncate(first)
                raise
        arrived = range(first, self.n_jobs)
        while self._timers and self._timers[0] <= t:
            heapq.heappop(self._timers)
        self.policy.step(t, arrived, stopped)
        self.batches += 1
        self._log_regime(t)
        return arrived

    def _log_regime(self, t: float) -> None:
        regime = getattr(getattr(self.policy, "pricing", None), "regime", None)
        if regime is None:  # a policy without a per-second pricing (DLGM, EES): nothing to keep
            return
        log = self.regimes
        if log and log[-1][0] == t:
            log[-1] = (t, regime())
        else:
            log.append((t, regime()))
        if len(log) > 4096 and log[1][0] < t - REGIME_HORIZON:  # amortised O(1): drop the old ones at once
            keep = next(i for i, (ti, _) in enumerate(log) if ti >= t - REGIME_HORIZON)
            del log[:max(keep - 1, 0)]

    def accrued_at(self, j: int, t: float) -> float:
        """Payment of running row ``j`` up to the earlier time ``t`` (see the module docstring):
        its payment up to now less its price in each regime since ``max(t, its start)`` times the
        regime's length. ``t`` at or after now: the payment up to now. A row not running: its
        settled payment. ``t`` older than the regimes kept: the oldest kept regime's time."""
        acc = self.accrued(j)
        if not self.running[j] or not self.regimes:
            return acc
        lo = max(float(t), self.run_start[j], self.regimes[0][0])
        end = self.now
        if lo >= end:
            return acc
        rate_in = self.policy.pricing.rate_in
        refund = 0.0
        for ti, regime in reversed(self.regimes):
            start = max(ti, lo)
            if start < end:
                refund += rate_in(j, regime) * (end - start)
            end = ti
            if ti <= lo:
                break
        return acc - refund

    def _truncate(self, n: int) -> None:
        for col in (self.submit, self.procs, self.running, self.run_start, self.first_start, self.end_time,
                    self.preemptions, self.payment, self.state):
            del col[n:]
        self.n_jobs = n

    def submit_job(self, bid: float, key: float, cost: float, procs: int = 1) -> int:
        """One arrival now; returns its row."""
        return self.batch(arrivals=[(bid, key, cost, procs)])[0]

    def complete(self, *rows: int) -> None:
        """Processes of ``rows`` ended now."""
        self.batch(completed=rows)

    def rebid(self, row: int, bid: float, key: float) -> None:
        """The bid of ``row`` changes now (to ``bid``, priority ``key``)."""
        self.batch(rebids=[(row, bid, key)])

    def withdraw(self, *rows: int, state: int = _KILLED) -> None:
        """``rows`` leave the market now without completing."""
        self.batch(withdrawn=rows, withdrawn_state=state)

    def poll(self) -> bool:
        """Fire due timers (one batch) if any; returns whether a batch ran."""
        if self._timers and self._timers[0] <= self.clock():
            self.batch()
            return True
        return False

    def close(self) -> None:
        """Settle every open payment at the current time (end of a replay)."""
        self._tick()
        close = getattr(self.policy, "close", None)
        if close is not None:
            close(self.now)

    def drain(self) -> list[tuple[str, int, float]]:
        """Return and clear the effects recorded since the last drain."""
        out, self.effects = self.effects, []
        return out
