"""Shared driver for the trace benchmarks: one child process per case, a table of figures.

A benchmark script defines ``CASES`` (name -> parameters, with a ``target`` in seconds or
None) and ``measure(name) -> dict`` (its figures), then calls ``main(sys.argv[1:], CASES,
measure, __file__)``. Each case runs in its own process so the peak resident memory it
reports (``peak_mb``) is its own; ``timed(fn)`` gives wall and CPU seconds of a call.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time


def timed(fn, *args, **kwargs):
    """``(result, wall seconds, CPU seconds)`` of ``fn(*args, **kwargs)``."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0, time.process_time() - c0


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,d}"
    return "-" if v is None else str(v)


def main(argv: list[str], cases: dict, measure, script: str) -> None:
    if argv and argv[0] == "--child":
        print(json.dumps(measure(argv[1])))
        return
    names = argv or list(cases)
    unknown = [n for n in names if n not in cases]
    if unknown:
        sys.exit(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(cases)}")
    header = None
    for name in names:
        out = subprocess.run([sys.executable, script, "--child", name], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{name}: failed\n{out.stderr}")
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        target = cases[name].get("target")
        row["target_s"] = target
        row["verdict"] = "" if target is None else ("ok" if row["simulate_s"] <= target else "MISSED")
        if header is None:
            header = list(row)
            print("  ".join(f"{h:>12s}" for h in header))
        print("  ".join(f"{_fmt(row.get(h)):>12s}" for h in header))
