"""Benchmark of the Tycoon fixed-budget game (Feldman, Lai & Zhang 2005). Prints figures; asserts nothing.

    python benchmarks/bench_fixed_budget.py [--repeat 5]

1. One full best-response round (every user answers the others' current bids, the vectorised
   sort-and-prefix of section 4.1) for m = 10,000 users and n = 1,000 machines (target < 1 s).
2. The whole sequential best-response dynamics for m = 150, n = 100 (target < 0.1 s), with and
   without the per-iteration metrics.
3. Closed form against scipy.optimize.minimize (SLSQP) on the same best-response problems:
   time per problem, speed-up, largest utility difference.
4. Local search (section 4.2) per call, n = 100, Delta = 5 and 20.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from scipy.optimize import minimize

from marketsched.mechanisms.games import best_response, run_dynamics, uniform_game, weight_proportional_bids
from marketsched.mechanisms.games.best_response import local_search_one, response_utility


def timed(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def slsqp(w, y, budget):
    n = len(w)
    res = minimize(lambda x: -np.sum(w * x / (x + y)), w / w.sum() * budget, jac=lambda x: -w * y / (x + y) ** 2,
                   method="SLSQP", bounds=[(0, budget)] * n,
                   constraints=[{"type": "eq", "fun": lambda x: x.sum() - budget, "jac": lambda x: np.ones(n)}],
                   options={"ftol": 1e-12, "maxiter": 500})
    return res.x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}, numpy {np.__version__}")

    # 1 -------------------------------------------------------------------------------
    g = uniform_game(10_000, 1_000, np.random.default_rng(0))
    x = weight_proportional_bids(g)
    Y = x.sum(axis=0)
    others = Y[None, :] - x
    best_response(g.weights, others, g.budgets, reserve=g.reserve)      # warm up
    lo, med = timed(lambda: best_response(g.weights, others, g.budgets, reserve=g.reserve), args.repeat)
    print(f"1. best-response round, m=10,000 x n=1,000: best {lo:.3f} s, median {med:.3f} s "
          f"({1e9 * lo / g.weights.size:.1f} ns per user-machine pair)")

    # 2 -------------------------------------------------------------------------------
    g = uniform_game(150, 100, np.random.default_rng(1))
    res = run_dynamics(g)
    lo, med = timed(lambda: run_dynamics(g), args.repeat)
    print(f"2. dynamics m=150, n=100: {res.iterations} iterations, converged={res.converged}, "
          f"efficiency {res.efficiency[-1]:.3f}; best {lo * 1e3:.1f} ms, median {med * 1e3:.1f} ms "
          "(includes efficiency/uniformity/envy every iteration)")
    from marketsched.mechanisms.games.best_response import br_one

    def bare():
        xx = weight_proportional_bids(g)
        for _ in range(res.iterations):
            YY = xx.sum(axis=0) + g.reserve
            for i in range(g.m):
                yy = np.maximum(YY - xx[i], g.reserve)
                new = br_one(g.weights[i], yy, 1.0)
                YY = yy + new
                xx[i] = new
    lo, med = timed(bare, args.repeat)
    print(f"   the same {res.iterations} sequential rounds without metrics: best {lo * 1e3:.1f} ms, median {med * 1e3:.1f} ms")

    # 3 -------------------------------------------------------------------------------
    rng = np.random.default_rng(2)
    for n, count in ((10, 40), (100, 5)):
        problems = []
        for _ in range(count):
            w = rng.random(n)
            problems.append((w / w.sum(), rng.random(n) * 2 + 0.01, 1.0))
        t0 = time.perf_counter()
        closed = [best_response(w, y, b) for w, y, b in problems]
        t_closed = (time.perf_counter() - t0) / len(problems)
        t0 = time.perf_counter()
        numeric = [slsqp(w, y, b) for w, y, b in problems]
        t_num = (time.perf_counter() - t0) / len(problems)
        gap = max(response_utility(w, xn, y) - response_utility(w, xc, y)
                  for (w, y, _), xc, xn in zip(problems, closed, numeric))
        print(f"3. n={n}: closed form {t_closed * 1e6:.0f} us, SLSQP {t_num * 1e3:.2f} ms per problem, "
              f"speed-up x{t_num / t_closed:.0f}; largest SLSQP advantage in utility {gap:.2e} "
              "(<= 0: the closed form is never worse)")

    # 4 -------------------------------------------------------------------------------
    w = rng.random(100)
    w /= w.sum()
    y = rng.random(100) * 5 + 0.01
    for k in (5, 20):
        lo, med = timed(lambda: local_search_one(w, y, 1.0, k), max(args.repeat, 20))
        print(f"4. local search n=100, Delta={k}: {local_search_one(w, y, 1.0, k)[1]} swaps, "
              f"best {lo * 1e3:.2f} ms, median {med * 1e3:.2f} ms per call")


if __name__ == "__main__":
    main()
