"""A small, documented synthetic workload: the project's built-in default (no download).

This is *not* Lublin-Feitelson (2003); it is a simpler model with the features that matter
for market scheduling (bursty arrivals so queues form, a heavy-tailed run time, inexact
user estimates, and an exact offered load), chosen so that it can be stated in a few lines:

1. **Run time** (seconds): two-phase hyper-exponential, with probability
   ``p_long`` = 0.2 exponential of mean 12,000 s (long jobs), else exponential of mean
   600 s; then ``ceil`` and at least 1 s. Mean about 2,880 s, coefficient of variation
   about 2.4 (trace logs: LPC 3,212 s and CV 5, Stößer 2009, Table 5.1).
2. **Processors**: 1 for every job when ``parallel=False``. Otherwise serial with
   probability ``p_serial`` = 0.3, else ``2**k`` with ``k`` uniform on
   ``{1, ..., floor(log2(max_procs))}`` (powers of two dominate real logs; ``max_procs``
   defaults to the capacity).
3. **Run-time estimate**: ``runtime * f`` with ``f`` uniform on [1, 5], rounded *up* to the
   next round value of :data:`ROUND_ESTIMATES` (1, 5, 10, 15, 30 min; 1, 2, 4, 8, 12, 24,
   48 h; beyond that a multiple of 24 h), so that ``estimate >= runtime`` always.
4. **Arrivals**: a non-homogeneous Poisson process with a daily cycle,
   ``rate(t) = r * (1 + a * cos(2 pi (t - peak) / 86400))`` with amplitude ``a`` = 0.5 and
   the peak at 14:00 (``t`` = 0 is midnight). It is drawn by time rescaling: unit-rate
   Poisson times (cumulated exponential gaps) are mapped through the inverse of the
   integrated rate ``Lambda(t)`` (exact closed form, inverted by interpolation on a 60 s grid).
5. **Load**: ``r`` is set so that the offered load equals ``load``:
   ``r * mean(runtime * procs) / capacity = load``, using the drawn jobs' own mean.
6. **Users**: ``user_id`` uniform on ``{0, ..., n_users - 1}``.

Draw order from ``numpy.random.default_rng(seed)`` (fixed, so a seed gives the same jobs
bit for bit): run-time phase, run time, procs, estimate factor, arrival gaps, users.
At ``load=0.9`` the daily peaks exceed capacity (1.5 x 0.9 = 1.35), so queues form every
afternoon and drain at night: the competition a market needs.
"""

from __future__ import annotations

import numpy as np

from .workload import Workload

DAY = 86_400.0

#: Round values (seconds) estimates are rounded up to; beyond the last, whole days.
ROUND_ESTIMATES = np.array(
    [60, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800], dtype=np.float64
)


def round_up_estimate(x: np.ndarray) -> np.ndarray:
    """Each value rounded up to the next of :data:`ROUND_ESTIMATES` (then to whole days)."""
    x = np.asarray(x, dtype=np.float64)
    idx = np.searchsorted(ROUND_ESTIMATES, x, side="left")
    out = ROUND_ESTIMATES[np.minimum(idx, len(ROUND_ESTIMATES) - 1)].copy()
    beyond = idx >= len(ROUND_ESTIMATES)
    out[beyond] = np.ceil(x[beyond] / DAY) * DAY
    return out


def _integrated_rate(t: np.ndarray, rate: float, amplitude: float, peak: float) -> np.ndarray:
    w = 2 * np.pi / DAY
    return rate * (t + amplitude / w * (np.sin(w * (t - peak)) + np.sin(w * peak)))


def synthetic_workload(
    n_jobs: int = 5000,
    capacity: int = 64,
    load: float = 0.9,
    parallel: bool = False,
    seed: int = 0,
    *,
    mean_short: float = 600.0,
    mean_long: float = 12_000.0,
    p_long: float = 0.2,
    p_serial: float = 0.3,
    amplitude: float = 0.5,
    peak_hour: float = 14.0,
    n_users: int = 50,
    max_procs: int | None = None,
    name: str | None = None,
) -> Workload:
    """A synthetic :class:`Workload` (model and decisions in the module docstring).

    Deterministic per ``seed``. ``load`` is the offered load (work / capacity / time) over
    the arrival period; ``parallel=False`` gives serial jobs only.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs < 1:
        raise ValueError(f"synthetic_workload: n_jobs must be a whole number >= 1, got {n_jobs!r}")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"synthetic_workload: capacity must be a whole number >= 1, got {capacity!r}")
    if not (np.isfinite(load) and load > 0):
        raise ValueError(f"synthetic_workload: load must be a finite number > 0, got {load!r}")
    if not 0 <= amplitude < 1:
        raise ValueError(f"synthetic_workload: amplitude must be in [0, 1), got {amplitude!r}")
    for label, p in (("p_long", p_long), ("p_serial", p_serial)):
        if not 0 <= p <= 1:
            raise ValueError(f"synthetic_workload: {label} must be in [0, 1], got {p!r}")
    if mean_short <= 0 or mean_long <= 0 or n_users < 1:
        raise ValueError("synthetic_workload: mean_short, mean_long must be > 0 and n_users >= 1")
    widest = int(capacity) if max_procs is None else max_procs
    if isinstance(widest, bool) or not isinstance(widest, (int, np.integer)) or not 1 <= widest <= capacity:
        raise ValueError(f"synthetic_workload: max_procs must be a whole number in [1, capacity={capacity}], "
                         f"got {max_procs!r}")
    rng = np.random.default_rng(seed)
    n = int(n_jobs)

    # 1. run times: hyper-exponential
    is_long = rng.random(n) < p_long
    runtime = rng.exponential(1.0, n) * np.where(is_long, mean_long, mean_short)
    runtime = np.maximum(np.ceil(runtime), 1.0)

    # 2. processors
    if parallel and widest > 1:
        kmax = int(np.floor(np.log2(widest)))
        k = rng.integers(1, kmax + 1, size=n)
        procs = np.where(rng.random(n) < p_serial, 1, 2**k).astype(np.int64)
    else:
        procs = np.ones(n, dtype=np.int64)

    # 3. estimates: runtime * U[1, 5], rounded up to a round value
    estimate = round_up_estimate(runtime * rng.uniform(1.0, 5.0, n))

    # 4.-5. arrivals with a daily cycle at the rate giving the requested load
    rate = load * capacity / float(np.mean(runtime * procs))  # jobs per second
    peak = peak_hour * 3600.0
    unit_times = np.cumsum(rng.exponential(1.0, n))  # unit-rate Poisson arrival "times"
    horizon = unit_times[-1] / (rate * (1 - amplitude)) + DAY  # Lambda(t) >= rate (1 - a) t - const
    grid = np.arange(0.0, horizon + 60.0, 60.0)
    submit = np.interp(unit_times, _integrated_rate(grid, rate, amplitude, peak), grid)
    submit = np.floor(submit)  # whole seconds, as in SWF
    submit -= submit[0]

    # 6. users
    user_id = rng.integers(0, n_users, size=n)

    return Workload.from_columns(
        submit_time=submit,
        runtime=runtime,
        runtime_estimate=estimate,
        procs=procs,
        user_id=user_id,
        capacity=int(capacity),
        name=name or (f"synthetic(n={n}, capacity={capacity}, load={load}, "
                      + (f"procs<={widest}" if parallel and max_procs is not None else f"parallel={parallel}")
                      + f", seed={seed})"),
        meta={"generator": "marketsched.workloads.synthetic", "seed": seed, "load": load,
              "arrival_rate": rate},
    )
