"""CPU seconds of `marketsched compare` on the built-in workload (5,000 jobs, 64 processors).

Runs the command as a child process ``--repeat`` times (default 3) and prints the child's CPU
seconds (user + system) per run, its minimum and median, and the per-mechanism CPU seconds of
the last run (the table's ``CPU s`` column). CPU seconds, not wall seconds: the machine is
shared. To measure another checkout (e.g. before a change), point PYTHONPATH at its ``src``:

    PYTHONPATH=/path/to/old/src python benchmarks/bench_compare.py
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a, extra = ap.parse_known_args()  # the rest goes to `marketsched compare`
    a.args = extra
    code = "import marketsched, sys; from marketsched.cli import main; sys.argv[0] = 'marketsched'; main()"
    where = subprocess.run([sys.executable, "-c", "import marketsched; print(marketsched.__file__)"],
                           capture_output=True, text=True).stdout.strip()
    print(f"marketsched from {where}")
    cpu, out = [], ""
    for i in range(a.repeat):
        before = child_cpu()
        r = subprocess.run([sys.executable, "-c", code, "compare", "--no-legend", *a.args], capture_output=True,
                           text=True, env=None)
        if r.returncode != 0 and "--no-legend" in r.stderr:  # an older marketsched, without the option
            before = child_cpu()
            r = subprocess.run([sys.executable, "-c", code, "compare", *a.args], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"compare failed:\n{r.stderr}")
        cpu.append(child_cpu() - before)
        out = r.stdout
        print(f"run {i + 1}: {cpu[-1]:.2f} CPU s")
    print(f"compare on the built-in workload: min {min(cpu):.2f}, median {statistics.median(cpu):.2f} CPU s "
          f"over {len(cpu)} runs")
    print(out)


if __name__ == "__main__":
    main()
