"""Shared-resource market (Stößer 2009, ch. 6; issue 9): prints microseconds per market second and run times.

Cases (targets of issue 9, 2-core machine):

* ``second``: one second of market (allocation and pay-as-bid payments) for 1,000 active
  requests, PS and SH (exact integral; random bids of comparable size and, as harder cases for
  SH, one dominant bid or a few large bids), target under 1 ms. Best of 7 repeats of 200 calls;
* ``qlearning``: the Q-learning market (PS, wide valuations, chosen parameters) on the first
  1,000 requests of the DAS2-fs0 substitute (KTH-SP2: 751 requests after the >10-CPU filter,
  890,557 rounds), one run (``B = 1``), reported for the first 400,000 rounds (the thesis's
  size, target under 2 minutes) and for the whole trace; and the per-run cost in a batch of 60
  runs (how the reproduction runs);
* ``engine``: the same market driven by the discrete-event engine (``run_on_engine``) on the
  first 20,000 rounds, for comparison with the vectorised loop.

    MARKETSCHED_TRACES=../shared/data/traces python benchmarks/bench_share.py            # all
    MARKETSCHED_TRACES=../shared/data/traces python benchmarks/bench_share.py second     # one case
"""

from __future__ import annotations

import sys
import time
import timeit

import numpy as np


def bench_second() -> None:
    from marketsched.mechanisms.online import share as sm

    rng = np.random.default_rng(0)
    n = 1000
    c = rng.integers(1, 9, n).astype(float)
    cases = {
        "comparable bids U(1, 160)": rng.uniform(1, 160, n),
        "integer ZIC-like bids {1..160}": rng.integers(1, 161, n).astype(float),
        "one dominant bid (x1000)": np.r_[rng.uniform(1, 10, n - 1), 10_000.0],
        "five large bids, 995 small": np.r_[rng.uniform(1, 10, n - 5), [6e3, 7e3, 8e3, 9e3, 1e4]],
    }
    sm.sh_shares(cases["comparable bids U(1, 160)"])  # node tables are cached once per size
    sm.sh_shares(cases["one dominant bid (x1000)"])
    print(f"one second of market, {n} active requests (best of 7 x 200 calls)")
    for label, bids in cases.items():
        for rule in ("ps", "sh"):
            t = min(timeit.repeat(lambda: sm.market_round(rule, bids, c, 10.0), number=200, repeat=7)) / 200
            flag = "ok" if t < 1e-3 else "ABOVE 1 ms target"
            print(f"  {rule.upper()}  {label:32s} {t * 1e6:9.1f} us  {flag}")


def _plan():
    from marketsched.experiments.stoesser_ch6 import build_plan

    plan, notes = build_plan()
    return plan, notes


def bench_qlearning() -> None:
    from marketsched.behaviour.learning import CHOSEN, QLearning
    from marketsched.experiments.stoesser_ch6 import draw_values
    from marketsched.mechanisms.online import share as sm

    plan, notes = _plan()
    values = draw_values(len(plan), "wide", 0)[None, :]
    print(f"Q-learning market on {notes['trace']}: {len(plan)} requests, {plan.rounds:,} rounds, PS, wide, {CHOSEN}")
    for rounds in (400_000, plan.rounds):
        p = plan.truncated(rounds)
        t0 = time.perf_counter()
        sm.simulate(p, values, "ps", QLearning(**CHOSEN, low=10, high=160), seeds=[1])
        dt = time.perf_counter() - t0
        flag = "ok" if dt < 120 else "ABOVE 2 min"
        print(f"  one run, {p.rounds:>9,} rounds: {dt:7.1f} s  ({dt / p.rounds * 1e6:.0f} us/round)  {flag}")
    p = plan.truncated(50_000)
    B = 60
    vals = np.stack([draw_values(len(plan), "wide", w % 30) for w in range(B)])
    t0 = time.perf_counter()
    sm.simulate(p, vals, ["ps", "sh"] * (B // 2), QLearning(**CHOSEN, low=10, high=160), seeds=range(B))
    dt = time.perf_counter() - t0
    per_run = dt / B / p.rounds * plan.rounds
    print(f"  batch of {B} runs (PS and SH), {p.rounds:,} rounds: {dt:.1f} s -> {per_run:.1f} s per run for the whole trace")


def bench_engine() -> None:
    from marketsched.behaviour.learning import CHOSEN, QLearning
    from marketsched.experiments.stoesser_ch6 import draw_values
    from marketsched.mechanisms.online import share as sm
    from marketsched.workloads import Workload

    plan, notes = _plan()
    p = plan.truncated(20_000)
    rows = p.active_rows()
    last = max(t1 for _, t1, _ in p.segments)
    rows = rows[plan.submit[rows] < last]
    runtime = np.minimum(plan.runtime[rows], last - plan.submit[rows])  # cut at the same second
    w = Workload.from_columns(submit_time=plan.submit[rows], runtime=runtime, procs=plan.cpus[rows], capacity=10)
    values = draw_values(len(plan), "wide", 0)[rows]
    t0 = time.perf_counter()
    records, policy = sm.run_on_engine(w, values, "ps", QLearning(**CHOSEN, low=10, high=160), rng=1)
    dt = time.perf_counter() - t0
    print(f"engine policy, {policy.rounds:,} rounds, {len(w)} requests: {dt:.1f} s ({dt / policy.rounds * 1e6:.0f} us/round)")
    sub = sm.MarketPlan.from_workload(w)
    t0 = time.perf_counter()
    sm.simulate(sub, values[None, :], "ps", QLearning(**CHOSEN, low=10, high=160), seeds=[1])
    dt = time.perf_counter() - t0
    print(f"vectorised loop, same market: {dt:.1f} s ({dt / sub.rounds * 1e6:.0f} us/round)")


CASES = {"second": bench_second, "qlearning": bench_qlearning, "engine": bench_engine}

if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    for name in names:
        if name not in CASES:
            raise SystemExit(f"unknown case {name!r}; known: {', '.join(CASES)}")
        CASES[name]()
