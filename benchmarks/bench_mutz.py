"""Benchmarks of issue 7 (Mutz 2008): prints the three figures.

    python benchmarks/bench_mutz.py

1. EES payments for a 244-job queue with 1,000 draws (thesis Fig 4.3 text: over 2 hours).
2. DPGVA payments (m+1 solves) for 44 bids, 6 h at 15 min (thesis Fig 5.10: under 6 s).
3. DPGVA payments for 1,000 bids over a day at 15-minute granularity.
Each figure is the best of 3 runs (wall clock, seconds).
"""

from __future__ import annotations

import time

import numpy as np

from marketsched.mechanisms.clearing.dpgva import dpgva
from marketsched.mechanisms.online.ees import EES, QueueSnapshot, TypePrior, Uniform


def best_of(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(2)
    prior = TypePrior(Uniform(0, 250), Uniform(0, 100))
    n = 244
    q = QueueSnapshot(np.arange(n), prior.value.sample(rng, n), prior.delay_cost.sample(rng, n), np.full(n, 0.25))
    ees = EES(prior, n_draws=1000)
    t1 = best_of(lambda: ees.decide(q, np.random.default_rng(0)))
    print(f"EES payments, 244-job queue, 1000 draws (cached O(n^2 S)): {t1:.3f} s   (target < 5 s; thesis > 2 h)")

    m = 44
    l, d, v = rng.integers(1, 9, m), rng.integers(1, 25, m), rng.uniform(1, 1000, m)
    t2 = best_of(lambda: dpgva(l, d, v, 24))
    print(f"DPGVA schedule + payments, 44 bids, 24 slots (6 h / 15 min): {t2:.4f} s   (target < 0.1 s; thesis < 6 s)")

    m = 1000
    l, d, v = rng.integers(1, 17, m), rng.integers(1, 97, m), rng.uniform(1, 1000, m)
    t3 = best_of(lambda: dpgva(l, d, v, 96))
    print(f"DPGVA schedule + payments, 1000 bids, 96 slots (1 day / 15 min): {t3:.3f} s   (target < 10 s)")


if __name__ == "__main__":
    main()
