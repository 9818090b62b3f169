"""Engine throughput on real traces: prints seconds, jobs per second and peak memory.

Cases (issue 2 targets on a 2-core machine):

* ``hb-lpc``: HB + k-th price on LPC-EGEE (about 220k serial jobs, 105 = 75% of 140 nodes),
  target under 3 s;
* ``easy-sdsc``: EASY backfilling on SDSC-SP2 (59k parallel jobs, 128 processors), target
  under 1 s;
* ``hb-hpc2n``: HB + k-th price on HPC2N split into 1.29M serial jobs (240 nodes), target
  under 30 s and 2 GB.

Traces are found as everywhere in marketsched (MARKETSCHED_TRACES folder, cache, download).
Each case runs in its own process so that the peak resident memory it prints is its own;
"simulate" is the engine run alone, "total" adds reading and preparing the trace.

    python benchmarks/bench_engine.py            # all cases
    python benchmarks/bench_engine.py hb-lpc     # one case
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

CASES = {
    "hb-lpc": dict(trace="LPC-EGEE-2004-1.2-cln", split=False, capacity=0.75, mechanism="hb", target=3.0),
    "easy-sdsc": dict(trace="SDSC-SP2-1998-4.2-cln", split=False, capacity=1.0, mechanism="easy", target=1.0),
    "hb-hpc2n": dict(trace="HPC2N-2002-2.2-cln", split=True, capacity=1.0, mechanism="hb", target=30.0),
}


def run_case(name: str) -> dict:
    from marketsched.scenario import WorkloadSpec, simulate, true_values

    case = CASES[name]
    t0 = time.perf_counter()
    spec = WorkloadSpec(trace=case["trace"], split=case["split"], capacity=case["capacity"])
    workload = spec.build()
    values = true_values(workload, "bimodal", 1)
    t1 = time.perf_counter()
    records = simulate(workload, case["mechanism"], values, "kth")
    t2 = time.perf_counter()
    assert records.counts()["completed"] == len(workload)
    return {
        "case": name,
        "jobs": len(workload),
        "nodes": workload.capacity,
        "prepare_s": t1 - t0,
        "simulate_s": t2 - t1,
        "jobs_per_s": len(workload) / (t2 - t1),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "target_s": case["target"],
    }


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--child":
        print(json.dumps(run_case(argv[1])))
        return
    names = argv or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit(f"unknown case {n!r}; choose from {', '.join(CASES)}")
    print(f"{'case':10s} {'jobs':>10s} {'nodes':>6s} {'prepare s':>10s} {'simulate s':>11s} {'jobs/s':>10s} "
          f"{'peak MB':>8s} {'target s':>9s}")
    for n in names:
        out = subprocess.run([sys.executable, __file__, "--child", n], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{n:10s} failed:\n{out.stderr}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ok = "ok" if r["simulate_s"] <= r["target_s"] else "MISSED"
        print(f"{r['case']:10s} {r['jobs']:>10,d} {r['nodes']:>6d} {r['prepare_s']:>10.2f} {r['simulate_s']:>11.2f} "
              f"{r['jobs_per_s']:>10,.0f} {r['peak_mb']:>8.0f} {r['target_s']:>8.1f} {ok}")


if __name__ == "__main__":
    main(sys.argv[1:])
