"""The k-th price's payments on whole traces against an exact recomputation of the same schedule.

For HB, WSPT and WSEPT (Shudler et al. 2010, sections IV and V) on all of LPC-EGEE and KTH-SP2,
split into serial jobs, at 75% of their processors, truthful bimodal bids (seed 1): the engine's
payments (Python path, and the compiled kernel's, which must be the same bits) against the same
schedule's payments in exact integer arithmetic. Prints, per case, the largest relative error of
a payment and the job it is on (target: at most 1e-12).

Steps of the exact recomputation (a subclass of the k-th price that only watches): every float is
read as an exact binary fraction (an integer times 2^-1100); at every event the exact ``k* dt``
(or the exact ``dt`` of an empty queue) is added to an exact running total, which, exact, may be
differenced: a job's regime (capped or not) opens at a mark and is settled as the engine settles
it, ``c_i`` times the exact growth of the ``k*`` total plus the growth of the empty-queue total,
or ``bid * (b - a)`` while capped. The schedule and the regimes are the engine's; only the
arithmetic is checked.

    MARKETSCHED_TRACES=... python benchmarks/exact_kth_payments.py            # both traces
    python benchmarks/exact_kth_payments.py KTH-SP2-1996-2.1-cln              # one
    python benchmarks/exact_kth_payments.py KTH-SP2-1996-2.1-cln --jobs 2000  # a slice
"""

from __future__ import annotations

import argparse
import os
import time
from fractions import Fraction

import numpy as np

from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.pricing import KthPrice
from marketsched.mechanisms.online.priority import make_priority_mechanism
from marketsched.scenario import true_values
from marketsched.workloads import first_jobs, load_trace, scale_capacity, split_parallel, to_workload

TRACES = ("LPC-EGEE-2004-1.2-cln", "KTH-SP2-1996-2.1-cln")
RULES = ("hb", "wspt", "wsept")
SHIFT = 1100  # every double is an integer multiple of 2^-1074


def fx(x: float) -> int:
    """``x`` as an exact integer multiple of 2^-SHIFT."""
    n, d = float(x).as_integer_ratio()
    return n << (SHIFT - (d.bit_length() - 1))


class ExactKth(KthPrice):
    """:class:`KthPrice` that also keeps every payment exactly, in units of 2^-(3 SHIFT)."""

    def bind(self, policy, sim) -> None:
        super().bind(policy, sim)
        self.xK = 0  # exact integral of k* (units 2^-2 SHIFT)
        self.xE = 0  # exact time with an empty queue (units 2^-2 SHIFT)
        self.x_mark: dict[int, tuple[int, int, int]] = {}
        self.exact = [0] * sim.n_jobs  # units 2^-3 SHIFT

    def advance(self, t: float) -> None:
        if t != self.last:
            dt = fx(t) - fx(self.last)
            if self.kstar is None:
                self.xE += dt << SHIFT
            elif self.kstar != float("inf"):
                self.xK += fx(self.kstar) * dt
        super().advance(t)

    def _mark(self, j: int) -> None:
        super()._mark(j)
        self.x_mark[j] = (self.xK, self.xE, fx(self.last))

    def _settle(self, j: int) -> None:
        k0, e0, t0 = self.x_mark[j]
        if self.capped[j]:
            self.exact[j] += fx(self.bid[j]) * (fx(self.last) - t0) << SHIFT
        else:
            self.exact[j] += fx(self.cost[j]) * (self.xK - k0) + ((self.xE - e0) << SHIFT)
        super()._settle(j)


def max_relative_error(paid: np.ndarray, exact: list[int]) -> tuple[float, int, int]:
    """(largest relative error, its job row, number of payments with an error above 1e-12)."""
    worst, at, above = 0.0, -1, 0
    for j, (p, x) in enumerate(zip(paid.tolist(), exact)):
        px = fx(p) << (2 * SHIFT)
        if px == x:
            continue
        err = float(Fraction(abs(px - x), abs(x))) if x else float("inf")
        above += err > 1e-12
        if err > worst:
            worst, at = err, j
    return worst, at, above


def errors(w, rule: str, values) -> tuple[float, int, int, bool]:
    """The k-th payments of ``rule`` on workload ``w`` with bids ``values``, Python path, against
    their exact recomputation: (largest relative error, its job row, payments above 1e-12, whether
    the compiled kernel gave the same bits as the Python path; True when it is not built)."""
    from marketsched.engine import compiled

    pricing = ExactKth()
    old = os.environ.get("MARKETSCHED_ENGINE")
    try:
        os.environ["MARKETSCHED_ENGINE"] = "python"
        py = Simulator(w, make_priority_mechanism(rule, w, values, pricing)).run()
        same = True
        if compiled.available("_priority"):
            os.environ["MARKETSCHED_ENGINE"] = "compiled"
            comp = Simulator(w, make_priority_mechanism(rule, w, values, "kth")).run()
            same = py.payment.tolist() == comp.payment.tolist()
    finally:
        if old is None:
            os.environ.pop("MARKETSCHED_ENGINE", None)
        else:
            os.environ["MARKETSCHED_ENGINE"] = old
    worst, at, above = max_relative_error(py.payment, pricing.exact)
    return worst, at, above, same


def workload(trace: str, jobs: int | None = None):
    """``trace`` (its first ``jobs`` jobs), split into serial jobs, at 75% of its processors, and
    truthful bimodal bids (seed 1)."""
    w, _ = to_workload(load_trace(trace))
    if jobs:
        w = first_jobs(w, jobs)
    w = scale_capacity(split_parallel(w), 0.75)
    return w, true_values(w, "bimodal", seed=1)


def check(trace: str, jobs: int | None) -> None:
    w, values = workload(trace, jobs)
    for rule in RULES:
        t0 = time.process_time()
        worst, at, above, same = errors(w, rule, values)
        where = f"job row {at}" if at >= 0 else "every payment exact"
        print(f"{trace} split, {len(w):,} jobs, {w.capacity} nodes, {rule} k-th: max relative error {worst:.3g} "
              f"({where}); {above} above 1e-12; compiled kernel same bits: {same}; "
              f"{time.process_time() - t0:.1f} CPU s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", default=list(TRACES))
    parser.add_argument("--jobs", type=int, default=None, help="only the first JOBS jobs of each trace")
    args = parser.parse_args()
    for trace in args.traces:
        check(trace, args.jobs)


if __name__ == "__main__":
    main()
