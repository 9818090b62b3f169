"""Incentive audit: incremental reruns (from the deviator's arrival) against full reruns.

Each case audits one mechanism twice, ``rerun="full"`` and ``rerun="incremental"``
(:mod:`marketsched.analysis.reruns`), checks that the two tables are equal, and prints the
CPU seconds of each and the speed-up (CPU seconds: the fairer figure on a shared machine).

Cases (5 focal jobs per value band, lies value x 0.5 and x 2 and a 600 s delay: 45 reruns):

* ``hb-first-sdsc``, ``hb-kth-sdsc``: HB with first / k-th price on the first 5,000 jobs of
  SDSC-SP2 split into 61,860 serial jobs, on its 128 processors;
* ``wsept-kth-sdsc``: WSEPT with k-th price on the same slice (estimates from the trace);
* ``hb-first-builtin``: HB with first price on the built-in workload (5,000 jobs, 64 nodes).

The saving depends on where the focal jobs arrive: a rerun from a job that arrives at a
fraction ``f`` of the trace skips about ``f`` of the events, so on uniformly drawn focal jobs
expect about 2x, less the one extra truthful pass the stepping engine makes and the per-rerun
set-up. Where most events come after the last arrival (an overloaded machine that works off its
backlog: the same slice at half its processors), the saving shrinks to a few percent.

    MARKETSCHED_TRACES=../shared/data/traces python benchmarks/bench_audit.py
    python benchmarks/bench_audit.py hb-first-builtin
"""

from __future__ import annotations

import sys

from harness import main, peak_mb, timed

SDSC = dict(trace="SDSC-SP2-1998-4.2-cln", jobs=5000, split=True, capacity=1.0)
CASES = {
    "hb-first-sdsc": dict(workload=SDSC, mechanism="hb", params={"pricing": "first"}, target=None),
    "hb-kth-sdsc": dict(workload=SDSC, mechanism="hb", params={"pricing": "kth"}, target=None),
    "wsept-kth-sdsc": dict(workload=SDSC, mechanism="wsept", params={"pricing": "kth"}, target=None),
    "hb-first-builtin": dict(workload=dict(synthetic_jobs=5000, synthetic_nodes=64), mechanism="hb",
                             params={"pricing": "first"}, target=None),
}


def measure(name: str) -> dict:
    from marketsched.analysis.audit import Deviation, audit
    from marketsched.scenario import Scenario, WorkloadSpec

    case = CASES[name]
    jobs = Scenario(WorkloadSpec(**case["workload"]), seed=1).build()
    devs = [Deviation("value", 0.5), Deviation("value", 2.0), Deviation("delay", 600.0)]
    kw = dict(per_band=5, seed=1)
    full, full_wall, full_cpu = timed(audit, jobs, case["mechanism"], case["params"], devs, rerun="full", **kw)
    inc, inc_wall, inc_cpu = timed(audit, jobs, case["mechanism"], case["params"], devs, rerun="incremental", **kw)
    if not inc.equals(full):
        raise AssertionError(f"{name}: the incremental audit differs from the full one")
    return {"case": name, "jobs": len(jobs.workload), "reruns": len(full), "full_cpu_s": full_cpu,
            "incremental_cpu_s": inc_cpu, "speed_up": full_cpu / inc_cpu, "full_wall_s": full_wall,
            "incremental_wall_s": inc_wall, "lies_paid": int((full["gain"] > 0).sum()), "peak_mb": peak_mb()}


if __name__ == "__main__":
    main(sys.argv[1:], CASES, measure, __file__)
