"""Benchmark of the grid exchange (Stößer 2009, chapter 3); prints figures.

* greedy allocation + k-pricing on 2,500 orders per side (thesis, section 3.6: 12.7 s);
* greedy + proportional critical-value pricing at 200 nodes / 200 and 600 jobs (thesis
  table 3.8: 2,630 ms at 200 x 200 with mean job runtime 5);
* exact MIP (HiGHS) runtimes beside thesis table 3.7 (CPLEX 9.1, 2008 Xeon 3.2 GHz).

Books from table 3.6 (``generate_order_book``); times are wall-clock medians over
``--repeat`` books. Run: ``python benchmarks/bench_greedex.py [--repeat 5] [--mip-limit 60]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from marketsched.mechanisms.clearing.exact import solve_exact
from marketsched.mechanisms.clearing.greedex import critical_value_pricing, greedy_allocation, k_pricing
from marketsched.mechanisms.clearing.orderbook import generate_order_book

THESIS_T37 = {(20, 1): 273.37, (40, 1): 2187.37, (60, 1): 11746.9, (80, 1): 22575.03, (100, 1): 51310.43,
              (20, 2): 2639.60, (40, 2): 24258.30, (20, 3): 27729.70}


def timed(fn):
    """(CPU seconds of this process, wall seconds, result): CPU time is the fairer figure on a
    shared machine, where wall time also counts waiting for a core."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.process_time() - c0, time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="books per size (median reported)")
    ap.add_argument("--mip-limit", type=float, default=60.0, help="HiGHS time limit per book, seconds")
    ap.add_argument("--mip-books", type=int, default=3, help="books per MIP cell")
    ap.add_argument("--skip-mip", action="store_true")
    args = ap.parse_args()

    print("greedy + k-pricing (k = 0.5), table 3.6 books, median over", args.repeat, "books")
    for n_nodes, n_jobs, d_trials, a_trials in ((2500, 2500, 5, 8), (2500, 2500, 8, 11), (2500, 7500, 5, 8)):
        times, walls, share = [], [], []
        for b in range(args.repeat):
            book = generate_order_book(n_nodes, n_jobs, np.random.default_rng([7, n_nodes, n_jobs, d_trials, b]),
                                       job_duration_trials=d_trials, node_availability_trials=a_trials)
            cpu, wall, (a, _) = timed(lambda: (lambda a: (a, k_pricing(book, a, 0.5)))(greedy_allocation(book)))
            times.append(cpu)
            walls.append(wall)
            share.append(a.allocated.mean())
        print(f"  {n_nodes:5d} nodes x {n_jobs:5d} jobs, mean job runtime {1 + d_trials / 2:.1f}: "
              f"{np.median(times) * 1e3:8.1f} ms CPU, {np.median(walls) * 1e3:8.1f} ms wall (medians; "
              f"{np.mean(share):.0%} of jobs run; thesis: 12,700 ms for 2,500 per side)")

    print("greedy + proportional critical-value pricing (exact critical values)")
    for n_nodes, n_jobs, d_trials, a_trials, thesis in ((200, 200, 8, 11, "2,630 ms (table 3.8)"),
                                                        (200, 200, 5, 8, "-"), (200, 600, 5, 8, "-")):
        times, walls = [], []
        for b in range(args.repeat):
            book = generate_order_book(n_nodes, n_jobs, np.random.default_rng([8, n_nodes, n_jobs, d_trials, b]),
                                       job_duration_trials=d_trials, node_availability_trials=a_trials)
            cpu, wall, _ = timed(lambda: critical_value_pricing(book, greedy_allocation(book)))
            times.append(cpu)
            walls.append(wall)
        print(f"  {n_nodes} nodes x {n_jobs} jobs, mean job runtime {1 + d_trials / 2:.1f}: "
              f"{np.median(times) * 1e3:8.1f} ms CPU, {np.median(walls) * 1e3:8.1f} ms wall (medians; "
              f"max CPU {max(times) * 1e3:.1f} ms; thesis {thesis})")

    if args.skip_mip:
        return
    print(f"exact MIP (HiGHS, 0.1 % gap, {args.mip_limit:g} s limit) beside table 3.7 (CPLEX, ms)")
    for (n_nodes, ratio), thesis in THESIS_T37.items():
        times, walls, hits, nv = [], [], 0, []
        for b in range(args.mip_books):
            book = generate_order_book(n_nodes, n_nodes * ratio, np.random.default_rng([9, n_nodes, ratio, b]))
            res = solve_exact(book, time_limit=args.mip_limit)
            times.append(res.cpu_time)
            walls.append(res.runtime)
            hits += res.status != "optimal"
            nv.append(res.n_variables)
        print(f"  {n_nodes:3d} nodes x {n_nodes * ratio:3d} jobs: {np.mean(times) * 1e3:10.1f} ms CPU, "
              f"{np.mean(walls) * 1e3:10.1f} ms wall (means; "
              f"{hits}/{args.mip_books} at the time limit, {np.mean(nv):.0f} variables); thesis {thesis:,.1f} ms")


if __name__ == "__main__":
    main()
