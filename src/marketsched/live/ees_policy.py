"""The simulator's EES and relaxed-EES policies fed one submission at a time (the live engine).

:class:`~marketsched.mechanisms.online.ees_driver.EESPolicy` and
:class:`~marketsched.mechanisms.online.ees_driver.RelaxedEESPolicy` (Mutz 2008, chapters 4 and
6) are built for a trace: every job's value, delay cost and declared run time are given before
the run. A live market learns them as users submit. :class:`LiveEESPolicy` and
:class:`LiveRelaxedEESPolicy` are those very classes with the three hooks the live engine
(:class:`~marketsched.platform.engine.LiveEngine`) calls and a trace never needs; their
``step`` (the run-or-discard rule, eqs. 4.1-4.3 / 6.1-6.3, and the expected-externality
payments, eq. 4.4 / 6.4) is the simulator's, unchanged:

* ``add_jobs(values, delay_costs, runtimes)``: new rows (the engine's arrival ``(bid, key,
  cost)`` carries value, delay cost per second and declared run time); the columns grow by
  doubling, so an arrival costs amortised O(1);
* ``withdraw(j)``: a cancelled row leaves the queue (or, in the relaxed EES, its planned start);
* every decision is kept in :attr:`records` with the state of the Monte Carlo generator just
  before it (``numpy``'s PCG64 state: two integers) and, in the relaxed EES, the availability
  profile it was taken on, so :func:`replay_decision` takes it again and gets the same payments
  bit for bit.

Units: the live market's delay costs are per second (``time_unit = 1``, as the registry's EES).
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import numpy as np

from marketsched.mechanisms.online.ees import EES, Decision, QueueSnapshot, RelaxedEES, TypePrior
from marketsched.mechanisms.online.ees_driver import EESPolicy, RelaxedEESPolicy
from marketsched.mechanisms.online.profile import ListProfile, profile_lists

EMPTY_WORKLOAD = SimpleNamespace(runtime=np.zeros(0), procs=np.zeros(0, dtype=np.int64))


class _Live:
    """The hooks of the live engine on the simulator's EES policies (module docstring)."""

    sim: object
    queue: deque[int]
    rng: np.random.Generator
    value: np.ndarray
    delay_cost: np.ndarray
    d_per_second: np.ndarray
    runtime: np.ndarray
    _procs: np.ndarray
    time_unit: float

    def __init__(self, prior: TypePrior, *, n_draws: int, estimator: str, seed: int, **kw):
        super().__init__(np.zeros(0), np.zeros(0), prior, n_draws=n_draws, estimator=estimator,  # type: ignore[call-arg]
                         seed=seed, time_unit=1.0, runtime=np.zeros(0), **kw)
        self.records: list[dict] = []  # every decision taken, in order (see the module docstring)

    def bind(self, sim) -> None:
        sim.workload = EMPTY_WORKLOAD  # the live engine has no trace: rows come by add_jobs
        super().bind(sim)  # type: ignore[misc]
        self._n = 0
        self._rng_state = self.rng.bit_generator.state
        self._profile_seen: tuple[list, list] | None = None
        mech = self.mechanism  # type: ignore[attr-defined]
        decide = mech.decide

        def recording_decide(queue, rng=None, profile=None, now=0.0):
            self._profile_seen = None if profile is None else profile_lists(profile)
            return decide(queue, rng, profile, now)

        mech.decide = recording_decide

    def add_jobs(self, bids, keys, costs) -> None:
        v, d, r = (np.asarray(x, dtype=np.float64) for x in (bids, keys, costs))
        for name, a in (("value", v), ("delay cost", d), ("run time", r)):
            if not np.all(np.isfinite(a)):
                raise ValueError(f"EES: a {name} is not finite")
        if np.any(d < 0) or np.any(r <= 0):
            raise ValueError("EES: delay costs must be >= 0 and run times > 0")
        n0, n1 = self._n, self._n + len(v)
        if n1 > len(self.value):
            size = max(16, 2 * len(self.value), n1)
            for name in ("value", "delay_cost", "d_per_second", "runtime", "_procs"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[:n0] = old[:n0]
                setattr(self, name, new)
        self.value[n0:n1] = v
        self.delay_cost[n0:n1] = d
        self.d_per_second[n0:n1] = d / self.time_unit
        self.runtime[n0:n1] = r
        self._procs[n0:n1] = self.sim.procs[n0:n1]  # type: ignore[attr-defined]
        runtime_list = getattr(self, "_runtime_list", None)
        if runtime_list is not None:
            runtime_list.extend(r.tolist())
        self._n = n1

    def withdraw(self, j: int) -> bool:
        if j in self.queue:
            self.queue.remove(j)
            return True
        committed = getattr(self, "committed", None)
        if committed is not None and j in committed:
            del committed[j]
            return True
        return False

    def _charge(self, dec: Decision, t: float) -> None:
        super()._charge(dec, t)  # type: ignore[misc]
        rows = dec.job_ids
        self.records.append({
            "t": t, "rows": rows.tolist(), "runs": dec.runs, "value": dec.value, "externality": dec.externality,
            "weights": dec.weights.tolist(), "payments": dec.payments.tolist(),
            "start": dec.start_time, "rng": self._rng_state,
            "values": self.value[rows].tolist(), "delay_cost": self.d_per_second[rows].tolist(), "runtime": self.runtime[rows].tolist(),
            "procs": self._procs[rows].tolist(), "profile": self._profile_seen,
        })
        self._rng_state = self.rng.bit_generator.state


class LiveEESPolicy(_Live, EESPolicy):
    """:class:`~marketsched.mechanisms.online.ees_driver.EESPolicy` fed by the live engine."""


class LiveRelaxedEESPolicy(_Live, RelaxedEESPolicy):
    """:class:`~marketsched.mechanisms.online.ees_driver.RelaxedEESPolicy` fed by the live engine."""


def replay_decision(record: dict, prior: TypePrior, n_draws: int, estimator: str, capacity: int | None = None
                    ) -> Decision:
    """Take a recorded decision again: the same snapshot (values, delay costs per second, run
    times, CPUs), the generator restored to its recorded state, and for the relaxed EES
    (``capacity`` given) the recorded availability profile; returns the mechanism's
    :class:`~marketsched.mechanisms.online.ees.Decision` (equal to the recorded one)."""
    rows = np.asarray(record["rows"], dtype=np.int64)
    snap = QueueSnapshot(job_id=rows, value=np.asarray(record["values"], dtype=np.float64),
                         delay_cost=np.asarray(record["delay_cost"], dtype=np.float64),
                         runtime=np.asarray(record["runtime"], dtype=np.float64),
                         nodes=None if capacity is None else np.asarray(record["procs"], dtype=np.int64))
    rng = np.random.default_rng()
    rng.bit_generator.state = record["rng"]
    if capacity is None:
        return EES(prior, n_draws, estimator).decide(snap, rng)
    times, used = record["profile"]
    prof = ListProfile(capacity, times[0])
    prof.times, prof.used = list(times), list(used)
    return RelaxedEES(prior, capacity, n_draws, estimator).decide(snap, rng, profile=prof)
