"""Engine throughput on real traces: jobs per CPU-second, peak memory, bytes per job.

Groups of cases (name a group or single cases; no argument runs them all):

* ``main``: HB + k-th price on LPC-EGEE (220k serial jobs, 105 = 75% of 140 nodes), EASY on
  SDSC-SP2 (54k parallel jobs, 128 processors), HB + k-th on HPC2N split (1.29M serial jobs);
* ``rules``: every priority rule (HB, NPHB, WSPT, WSEPT), the queues (FCFS, EASY) and DLGM /
  P-DLGM on HPC2N split; targets 1,000,000 jobs per CPU-second (500,000 for DLGM, P-DLGM);
* ``scaling``: HB on the first 100k, 300k, 1M and all jobs of HPC2N split, on SDSC-BLUE split
  (9.6M serial jobs, 1,152 processors: targets, for the whole case with loading and splitting,
  under 30 CPU seconds and 2.5 GB peak, and the simulation under 200 bytes per job), and on
  LPC-EGEE at 100%, 50%, 25% and 10% of its 140 nodes (longer queues; the CPU per job at 10%
  against 100% is printed, target 1.3x);
* ``process``: the whole ``marketsched simulate --trace SDSC-SP2-1998-4.2-cln --mechanism
  easy`` (and ``fcfs``) process beside a plain standard-library EASY (FCFS) script
  (:data:`PLAIN_EASY`, written here), both on the same trace, with the check that both give
  every job the same start time (targets, with cached columns: 0.15x the plain script's CPU for
  EASY, 0.25x for FCFS); ``marketsched --help``; and the floors ``python -c pass`` and
  ``python -c "import numpy"``. The installed ``marketsched`` command is run, with its modules'
  bytecode compiled as an install leaves it (``PYTHONDONTWRITEBYTECODE`` is dropped for it);
  off a terminal, as a pipe or a CI log sees it (plain progress lines and table, no rich);
* ``load``: SDSC-SP2 and HPC2N parsed from the gzipped file (column cache off) and loaded from
  the column cache (every column then read through once, as mapped columns are read when used).

Each case runs in its own process. ``cpu_s`` is the simulation's CPU seconds (no loading);
``jobs_per_cpu_s`` = jobs / ``cpu_s``. ``peak_mb`` is the process's peak resident memory;
``sim_bytes_per_job`` is the simulation's own peak above the prepared workload (the peak is
reset just before it starts) divided by the jobs. Processes are compared in CPU seconds
(user + system, ``resource.getrusage``), which a busy machine inflates less than wall time.
Traces are found as everywhere in marketsched (MARKETSCHED_TRACES folder, cache, download).
The mechanisms with a compiled kernel (priority rules, FCFS, EASY) use it when it is built;
``MARKETSCHED_ENGINE=python`` measures the pure-Python reference path instead
(docs/engine.md, "Compiled kernels").

    python benchmarks/bench_engine.py                   # every group
    python benchmarks/bench_engine.py rules process     # two groups
    python benchmarks/bench_engine.py easy-sdsc         # one case
    python benchmarks/bench_engine.py hb-lpc-1.0 hb-lpc-0.1 hb-lpc-1.0 hb-lpc-0.1   # alternated runs

The 10%/100% line on LPC-EGEE is printed whenever both cases ran (in the ``scaling`` group or
named), from the medians over their runs, with the load average.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from harness import timed

# One BLAS thread, as the command line sets it: OpenBLAS's idle pool spins for a while after NumPy's
# import, and process_time counts every thread of a case, so the spin would be timed with the run.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HPC2N, LPC, SDSC = "HPC2N-2002-2.2-cln", "LPC-EGEE-2004-1.2-cln", "SDSC-SP2-1998-4.2-cln"
BLUE = "SDSC-BLUE-2000-4.2-cln"
RATE = 1_000_000  # jobs per CPU-second
RATE_DLGM = 500_000


def _case(trace, mechanism, split=True, capacity=1.0, rate=None, serial_jobs=None, cpu_target=None, mb_target=None,
          bytes_target=None):
    return dict(trace=trace, mechanism=mechanism, split=split, capacity=capacity, rate=rate, serial_jobs=serial_jobs,
                cpu_target=cpu_target, mb_target=mb_target, bytes_target=bytes_target)


CASES = {
    "hb-lpc": _case(LPC, "hb", split=False, capacity=0.75),
    "easy-sdsc": _case(SDSC, "easy", split=False),
    "hb-hpc2n": _case(HPC2N, "hb", rate=RATE),
    **{f"{m}-hpc2n": _case(HPC2N, m, rate=RATE) for m in ("nphb", "wspt", "wsept", "fcfs", "easy")},
    **{f"{m}-hpc2n": _case(HPC2N, m, rate=RATE_DLGM) for m in ("dlgm", "pdlgm")},
    **{f"hb-hpc2n-{label}": _case(HPC2N, "hb", serial_jobs=n) for label, n in
       (("100k", 100_000), ("300k", 300_000), ("1m", 1_000_000))},
    **{f"hb-lpc-{c}": _case(LPC, "hb", split=False, capacity=c) for c in (1.0, 0.5, 0.25, 0.1)},
    # memory at scale: 9.6M serial jobs on 1,152 processors, whole process under 30 CPU s and 2.5 GB
    "hb-blue": _case(BLUE, "hb", cpu_target=30.0, mb_target=2500.0, bytes_target=200.0),
}
GROUPS = {
    "main": ["hb-lpc", "easy-sdsc", "hb-hpc2n"],
    "rules": [f"{m}-hpc2n" for m in ("hb", "nphb", "wspt", "wsept", "fcfs", "easy", "dlgm", "pdlgm")],
    "scaling": ["hb-hpc2n-100k", "hb-hpc2n-300k", "hb-hpc2n-1m", "hb-hpc2n", "hb-blue",
                "hb-lpc-1.0", "hb-lpc-0.5", "hb-lpc-0.25", "hb-lpc-0.1"],
    "process": [],
    "load": [],
}

# ---------------------------------------------------------------------------- the plain script
#: A plain EASY backfilling over an SWF file, standard library only: what anyone would write
#: in an afternoon. Same cleaning as ``to_workload`` and the same conformance rules as the
#: engine (docs/engine.md): completions at t free processors, arrivals at t join the queue,
#: then one pass; a running job is expected to end at max(start + estimate, t); a missing
#: estimate is the run time. Prints the job count, mean wait and a hash of the start times.
#: With a second argument ``fcfs``: FCFS (the queue's head while it fits, no backfilling).
PLAIN_EASY = r'''
import gzip, hashlib, heapq, json, sys

def read(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    capacity, jobs = None, []
    with opener(path, "rt", encoding="latin-1") as fh:
        for line in fh:
            if line.startswith(";"):
                if capacity is None and "MaxProcs:" in line:
                    capacity = int(line.split("MaxProcs:")[1].split()[0])
                continue
            f = line.split(";")[0].split()
            if len(f) != 18:
                continue
            submit, run, req_procs, alloc, req_time = float(f[1]), float(f[3]), int(f[7]), int(f[4]), float(f[8])
            procs = req_procs if req_procs > 0 else alloc
            jobs.append((submit, run, procs, req_time))
    if capacity is None:
        capacity = max(p for _, _, p, _ in jobs)
    kept = [(s, r, p, (t if t >= 0 else r)) for s, r, p, t in jobs if r >= 0 and s >= 0 and 0 < p <= capacity]
    kept.sort(key=lambda j: j[0])  # stable: submit order, then file order
    return kept, capacity

def easy(jobs, capacity, backfill=True):
    n = len(jobs)
    submit = [j[0] for j in jobs]
    run = [j[1] for j in jobs]
    procs = [j[2] for j in jobs]
    est = [j[3] for j in jobs]
    start = [0.0] * n
    ends = []  # heap of (end, job) of running jobs
    running = set()
    queue = []
    free = capacity
    i = 0
    while i < n or queue or ends:
        t = min(submit[i] if i < n else float("inf"), ends[0][0] if ends else float("inf"))
        while ends and ends[0][0] <= t:
            _, j = heapq.heappop(ends)
            running.discard(j)
            free += procs[j]
        while i < n and submit[i] <= t:
            queue.append(i)
            i += 1
        k = 0
        while k < len(queue) and procs[queue[k]] <= free:  # the head, while it fits
            j = queue[k]
            k += 1
            start[j] = t
            free -= procs[j]
            running.add(j)
            heapq.heappush(ends, (t + run[j], j))
        queue = queue[k:]
        if not backfill or len(queue) < 2 or free == 0:
            continue
        head = procs[queue[0]]
        expected = sorted((max(start[j] + est[j], t), j) for j in running)
        avail, shadow = free, float("inf")
        for e, j in expected:
            avail += procs[j]
            if avail >= head:
                shadow = e
                break
        extra = free - head
        for e, j in expected:
            if e > shadow:
                break
            extra += procs[j]
        rest = [queue[0]]
        for j in queue[1:]:
            if procs[j] <= free and (t + est[j] <= shadow or procs[j] <= extra):
                start[j] = t
                free -= procs[j]
                running.add(j)
                heapq.heappush(ends, (t + run[j], j))
                if t + est[j] > shadow:
                    extra -= procs[j]
            else:
                rest.append(j)
        queue = rest
    return start, submit

jobs, capacity = read(sys.argv[1])
start, submit = easy(jobs, capacity, backfill=sys.argv[2:] != ["fcfs"])
wait = sum(s - u for s, u in zip(start, submit)) / len(jobs)
digest = hashlib.sha256(",".join(repr(s) for s in start).encode()).hexdigest()
print(json.dumps({"jobs": len(jobs), "capacity": capacity, "mean_wait": wait, "starts_sha256": digest}))
'''


def _starts_digest(first_start) -> str:
    return hashlib.sha256(",".join(repr(float(s)) for s in first_start).encode()).hexdigest()


# ---------------------------------------------------------------------------- memory
def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Reset this process's peak resident memory (Linux: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------- one case
def measure(name: str) -> dict:
    from marketsched.scenario import WorkloadSpec, simulate, true_values
    from marketsched.workloads import load_trace, to_workload

    case = CASES[name]
    jobs = None
    if case["serial_jobs"]:  # enough original jobs to give about this many serial jobs once split
        import numpy as np

        w, _ = to_workload(load_trace(case["trace"]))
        jobs = int(np.searchsorted(np.cumsum(w.procs), case["serial_jobs"])) + 1
    spec = WorkloadSpec(trace=case["trace"], split=case["split"], capacity=case["capacity"], jobs=jobs)
    (workload, values), prepare_s, prepare_cpu = timed(lambda: (w := spec.build(), true_values(w, "bimodal", 1)))
    before_kb = _rss_kb("VmRSS")
    exact_peak = _reset_peak()
    records, wall, cpu = timed(simulate, workload, case["mechanism"], values, "kth")
    sim_peak_kb = _rss_kb("VmHWM") if exact_peak else None
    n = len(workload)
    done = records.counts()["completed"]
    rate = n / cpu if cpu > 0 else float("inf")
    row = {"case": name, "jobs": n, "nodes": workload.capacity, "completed": done, "prepare_s": prepare_s,
           "simulate_s": wall, "cpu_s": cpu, "jobs_per_cpu_s": rate, "peak_mb": _peak_mb(),
           "sim_bytes_per_job": None if sim_peak_kb is None else max(0, sim_peak_kb - before_kb) * 1024 / n}
    if case["rate"]:
        row["rate_target"] = case["rate"]
        row["rate_ok"] = "ok" if rate >= case["rate"] else "MISSED"
    if case["cpu_target"]:  # the whole case: load, split, values and simulation
        row["total_cpu_s"] = prepare_cpu + cpu
        checks = [row["total_cpu_s"] <= case["cpu_target"], row["peak_mb"] <= case["mb_target"],
                  row["sim_bytes_per_job"] is not None and row["sim_bytes_per_job"] <= case["bytes_target"]]
        row["targets"] = f"<{case['cpu_target']:g} s, <{case['mb_target']:g} MB, <{case['bytes_target']:g} B/job"
        row["targets_ok"] = "ok" if all(checks) else "MISSED"
    return row


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3f}" if abs(v) < 1 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,d}"
    return "-" if v is None else str(v)


def _table(rows: list[dict]) -> None:
    header = list(dict.fromkeys(k for r in rows for k in r))
    widths = [max(len(h), *(len(_fmt(r.get(h))) for r in rows)) for h in header]
    print("  ".join(f"{h:>{w}s}" for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(f"{_fmt(r.get(h)):>{w}s}" for h, w in zip(header, widths)))
    sys.stdout.flush()


def run_cases(names: list[str]) -> list[dict]:
    """Run each case in a fresh process (in the given order; a name given twice runs twice), print
    their table and return the rows."""
    rows = []
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{name}: failed\n{out.stderr}")
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if rows:
        _table(rows)
    return rows


def queue_cost_ratio(rows: list[dict]) -> str | None:
    """The line comparing HB's CPU per job on LPC-EGEE at 10% of the nodes against 100% (the same jobs
    on a tenth of the nodes: longer queues), from the median over every run of each case among
    ``rows``; None when either case has not run."""
    import statistics

    cost: dict[str, list[float]] = {}
    for r in rows:
        cost.setdefault(r["case"], []).append(r["cpu_s"] / r["jobs"])
    if "hb-lpc-1.0" not in cost or "hb-lpc-0.1" not in cost:
        return None
    low, full = cost["hb-lpc-0.1"], cost["hb-lpc-1.0"]
    runs = (f"medians of {len(low)} and {len(full)} runs" if len(low) > 1 or len(full) > 1
            else "one run each: name both cases several times, alternated, for medians")
    # the spread: the ratio of each run at 10% to the run at 100% just before it (alternated runs
    # share the machine's state), smallest and largest
    pairs = []
    for prev, r in zip(rows, rows[1:]):
        if prev["case"] == "hb-lpc-1.0" and r["case"] == "hb-lpc-0.1":
            pairs.append((r["cpu_s"] / r["jobs"]) / (prev["cpu_s"] / prev["jobs"]))
    spread = f"; paired runs {min(pairs):.2f}-{max(pairs):.2f}x over {len(pairs)}" if pairs else ""

    def ns(xs: list[float]) -> str:
        return f"{statistics.median(xs) * 1e9:.0f} ns ({min(xs) * 1e9:.0f}-{max(xs) * 1e9:.0f})"

    return (f"HB on LPC-EGEE, CPU per job at 10% of the nodes against 100%: "
            f"{statistics.median(low) / statistics.median(full):.2f}x (target 1.3x; {runs}{spread}; "
            f"per job, median (min-max): {ns(low)} at 10%, {ns(full)} at 100%; "
            f"load average {os.getloadavg()[0]:.2f})")


# ---------------------------------------------------------------------------- whole processes
def _child_cpu(cmd: list[str], env=None) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, out.stdout


def _best(cmd, repeat=3, env=None) -> tuple[float, float, str]:
    runs = [_child_cpu(cmd, env) for _ in range(repeat)]
    return min(runs, key=lambda r: r[0])


def _marketsched() -> list[str]:
    """The installed ``marketsched`` command beside this Python (what a user runs), else
    ``python -m marketsched.cli``."""
    exe = os.path.join(os.path.dirname(sys.executable), "marketsched")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "marketsched.cli"]


def run_process() -> None:
    from marketsched.scenario import WorkloadSpec, simulate
    from marketsched.workloads import resolve_trace

    path = str(resolve_trace(SDSC))
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "plain_easy.py")
        with open(script, "w") as fh:
            fh.write(PLAIN_EASY)
        # as installed: modules load from their compiled bytecode (written by the first run if the
        # install did not), whatever PYTHONDONTWRITEBYTECODE says in this shell
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cold_env = {**env, "MARKETSCHED_COLUMN_CACHE": "off"}
        simulate_cmd = [*_marketsched(), "simulate", "--trace", path, "--mechanism"]
        _child_cpu([*simulate_cmd, "easy"], env)  # fills the column cache and the bytecode
        rows, same = [], []
        for mechanism, target in (("easy", 0.15), ("fcfs", 0.25)):
            cmd = [*simulate_cmd, mechanism]
            plain_cpu, plain_wall, plain_out = _best([sys.executable, script, path, mechanism], repeat=5, env=env)
            cold_cpu, cold_wall, _ = _best(cmd, repeat=5, env=cold_env)
            warm_cpu, warm_wall, _ = _best(cmd, repeat=5, env=env)
            plain = json.loads(plain_out)
            records = simulate(WorkloadSpec(trace=path).build(), mechanism)
            same.append(_starts_digest(records.first_start) == plain["starts_sha256"])
            name = mechanism.upper()
            rows += [
                {"process": f"plain {name} script (standard library)", "cpu_s": plain_cpu, "wall_s": plain_wall,
                 "vs_plain": 1.0, "of_plain": 1.0},
                {"process": f"simulate {mechanism}, column cache off", "cpu_s": cold_cpu, "wall_s": cold_wall,
                 "vs_plain": plain_cpu / cold_cpu, "of_plain": cold_cpu / plain_cpu},
                {"process": f"simulate {mechanism}, cached columns", "cpu_s": warm_cpu, "wall_s": warm_wall,
                 "vs_plain": plain_cpu / warm_cpu, "of_plain": warm_cpu / plain_cpu, "target": target,
                 "ok": "ok" if warm_cpu <= target * plain_cpu else "MISSED"},
            ]
        help_cpu, help_wall, _ = _best([*_marketsched(), "--help"], repeat=5, env=env)
        bare_cpu, bare_wall, _ = _best([sys.executable, "-c", "pass"], repeat=5, env=env)
        numpy_cpu, numpy_wall, _ = _best([sys.executable, "-c", "import numpy"], repeat=5, env=env)
    rows += [
        {"process": "marketsched --help", "cpu_s": help_cpu, "wall_s": help_wall},
        {"process": "python -c pass", "cpu_s": bare_cpu, "wall_s": bare_wall},
        {"process": "python -c 'import numpy'", "cpu_s": numpy_cpu, "wall_s": numpy_wall},
    ]
    print(f"whole process on {SDSC} ({plain['jobs']:,} jobs, {plain['capacity']} processors), best of 5, CPU s:")
    _table(rows)
    print(f"of_plain: CPU against the plain script's (targets: cached columns, EASY 0.15x, FCFS 0.25x); vs_plain, "
          f"its inverse. Every job's start time identical in marketsched and the plain script: "
          f"{'yes' if all(same) else 'NO'}; --help target 0.15 s. The last two rows are floors: "
          f"Python alone, and Python importing NumPy (which the simulate path needs for its columns, the value draws and the summary).")


def run_load() -> None:
    rows = []
    for trace, target in ((SDSC, 0.05), (HPC2N, 0.2)):
        out = subprocess.run([sys.executable, __file__, "--load-child", trace], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{trace}: failed\n{out.stderr}")
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["cached_target_s"] = target
        row["ok"] = "ok" if row["cached_cpu_s"] <= target else "MISSED"
        rows.append(row)
    if rows:
        print("trace loading, CPU s (parse: gzipped SWF, column cache off; cached: from the column cache):")
        _table(rows)


def _read_every_column(log):
    """``log`` with every column read through (the column cache maps its columns from the file and
    reads a column's bytes when first used: the load's whole cost shows only once they are used)."""
    for column in log.columns.values():
        column.sum()
    return log


def measure_load(trace: str) -> dict:
    from marketsched.workloads import load_trace, read_swf, resolve_trace

    path = resolve_trace(trace)
    log, parse_wall, parse_cpu = timed(read_swf, path)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MARKETSCHED_COLUMN_CACHE"] = tmp
        load_trace(path)  # parse and store
        best = min((timed(lambda: _read_every_column(load_trace(path))) for _ in range(5)), key=lambda r: r[2])
    return {"trace": trace, "jobs": len(log), "parse_cpu_s": parse_cpu, "cached_cpu_s": best[2],
            "cached_wall_s": best[1]}


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        print(json.dumps(measure(argv[1])))
        return
    if argv[:1] == ["--load-child"]:
        print(json.dumps(measure_load(argv[1])))
        return
    wanted = argv or list(GROUPS)
    unknown = [n for n in wanted if n not in GROUPS and n not in CASES]
    if unknown:
        sys.exit(f"unknown group or case {', '.join(unknown)}; groups: {', '.join(GROUPS)}; cases: {', '.join(CASES)}")
    rows: list[dict] = []
    singles: list[str] = []  # cases named on the command line: one table, in the given order
    for item in wanted + [""]:
        if singles and item not in CASES:
            rows += run_cases(singles)
            print()
            singles = []
        if item in CASES:
            singles.append(item)
        elif item == "process":
            run_process()
            print()
        elif item == "load":
            run_load()
            print()
        elif item:
            print(f"{item}:")
            rows += run_cases(GROUPS[item])
            print()
    line = queue_cost_ratio(rows)  # also when the two cases come from different groups or arguments
    if line:
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
