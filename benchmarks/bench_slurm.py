"""Figures for the live market on Slurm (needs `bash scripts/slurm-up.sh`; run on purpose).

1. Time from a bid (or a bid change) to Slurm acting on it:
   a. a higher bid arrives in a full market (every CPU runs a lower bid): from the submission
      (broker.submit called) until Slurm shows the victim SUSPENDED and the newcomer RUNNING
      (squeue polled every 5 ms);
   b. a queued higher bid when a CPU frees (the market cancels a running job): from the cancel
      until Slurm runs the best queued bid;
   d. a bid change (``broker.rebid``) raising a queued bid above the lowest running one: until
      Slurm shows that one SUSPENDED and the raised bid RUNNING;
   e. a bid change of a queued job that crosses nothing: until ``scontrol show job`` has the new
      priority;
   f. the single Slurm controls the executor issues (scontrol update priority / suspend /
      resume, sbatch), median and p95 latency.
2. Jobs per second the broker sustains on Slurm: N jobs (`true`) submitted as fast as one
   client can, then run to completion; submissions/s and completed jobs/s end to end.

Usage: python benchmarks/bench_slurm.py [--jobs 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from marketsched.live.broker import Broker, MarketConfig
from marketsched.platform.slurm import SlurmExecutor, priority_of, run, slurm_up


def slurm_states(prefix: str) -> dict[str, str]:
    out = run(["squeue", "-h", "-a", "-o", "%j|%T"])
    return {n: s for n, s in (line.split("|") for line in out.splitlines()) if n.startswith(prefix)}


def wait_state(prefix, want: dict[str, str], timeout=30.0, every=0.005) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = slurm_states(prefix)
        if all(st.get(n) == s for n, s in want.items()):
            return time.monotonic()
        time.sleep(every)
    raise TimeoutError(f"Slurm did not reach {want}: {slurm_states(prefix)}")


def cpus(d) -> int:
    """The partition's CPUs: the market's slots (so that Slurm's priorities order the queue)."""
    return SlurmExecutor(Path(d) / "probe").cpus


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def cleanup(prefix: str) -> None:
    for line in run(["squeue", "-h", "-a", "-o", "%i|%j"]).splitlines():
        i, n = line.split("|")
        if n.startswith(prefix):
            subprocess.run(["scancel", i], capture_output=True)


def bench_bid_to_slurm(repeats: int) -> None:
    over, pre, res, raise_, reprio = [], [], [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            b = Broker(Path(d) / "m", MarketConfig(executor="slurm", sync="normal", single_user=True, charge_interval=0.5,
                                                    slots=cpus(d))).start()
            ex = b.executor
            prefix = ex.job_name(0)[:-1]
            name = ex.job_name
            try:
                b.add_user(True, "u", 1e6)
                fill = [b.submit("u", False, 100.0, "sleep 600")["id"] for _ in range(b.config.slots)]
                wait_state(prefix, {name(j): "RUNNING" for j in fill}, 60)
                q3 = b.submit("u", False, 3.0, "sleep 600")["id"]
                q4 = b.submit("u", False, 4.0, "sleep 600")["id"]
                time.sleep(0.5)
                # (b) a CPU frees: Slurm starts the best queued bid by its priority
                t0 = time.monotonic()
                b.cancel("admin", True, fill[0])
                over.append(wait_state(prefix, {name(q4): "RUNNING"}, 30) - t0)
                assert slurm_states(prefix)[name(q3)] == "PENDING"
                time.sleep(0.5)
                # (a) a higher bid preempts the lowest running bid (q4)
                t0 = time.monotonic()
                hi = b.submit("u", False, 200.0, "sleep 600")["id"]
                pre.append(wait_state(prefix, {name(q4): "SUSPENDED", name(hi): "RUNNING"}, 30) - t0)
                # (c) the preemptor leaves after the 2 s rule: the market resumes q4
                time.sleep(2.5)
                t0 = time.monotonic()
                b.cancel("admin", True, hi)
                res.append(wait_state(prefix, {name(q4): "RUNNING"}, 30) - t0)
                # (d) a queued bid is raised above the lowest running one (broker.rebid)
                time.sleep(0.5)
                t0 = time.monotonic()
                b.rebid("u", False, q3, 150.0)
                raise_.append(wait_state(prefix, {name(q4): "SUSPENDED", name(q3): "RUNNING"}, 30) - t0)
                # (e) a queued bid changes without crossing a running one: Slurm's priority moves
                q5 = b.submit("u", False, 2.0, "sleep 600")["id"]
                t0 = time.monotonic()
                b.rebid("u", False, q5, 3.5)
                want = str(priority_of(3.5))
                while ex.show(ex.queued[q5].pid)["Priority"] != want:
                    if time.monotonic() - t0 > 30:
                        raise TimeoutError("Slurm priority did not follow the bid")
                    time.sleep(0.005)
                reprio.append(time.monotonic() - t0)
            finally:
                b.stop(kill_jobs=True)
                cleanup(prefix)
    for label, xs in (("(a) higher bid -> Slurm suspended the lowest running bid and runs the newcomer", pre),
                      ("(b) CPU freed (market cancel) -> Slurm runs the best queued bid (priority)", over),
                      ("(c) preemptor cancelled -> the market resumed the suspended bid", res),
                      ("(d) bid change: a queued bid raised above the lowest running one -> Slurm suspended "
                       "that one and runs the raised bid", raise_),
                      ("(e) bid change of a queued job (no crossing) -> Slurm shows the new priority", reprio)):
        print(f"{label}: median {statistics.median(xs) * 1e3:.0f} ms, max {max(xs) * 1e3:.0f} ms (n={len(xs)})")


def bench_controls(n: int = 40) -> None:
    with tempfile.TemporaryDirectory() as d:
        ex = SlurmExecutor(Path(d) / "jobs")
        times: dict[str, list[float]] = {"sbatch": [], "priority": [], "suspend": [], "resume": []}
        ids = []
        try:
            for k in range(n):
                t0 = time.monotonic()
                job = ex._sbatch(k, "sleep 600", None, 1000 + k, gated=True)
                times["sbatch"].append(time.monotonic() - t0)
                ids.append(job)
            for job in ids:
                t0 = time.monotonic()
                ex._update(job, priority=5000)
                times["priority"].append(time.monotonic() - t0)
            for job in ids[:4]:
                ex._update(job, StartTime="now")
            time.sleep(2)
            for _ in range(5):
                for job in ids[:4]:
                    t0 = time.monotonic()
                    run(["scontrol", "suspend", str(job.pid)])
                    times["suspend"].append(time.monotonic() - t0)
                time.sleep(2.1)
                for job in ids[:4]:
                    t0 = time.monotonic()
                    run(["scontrol", "resume", str(job.pid)])
                    times["resume"].append(time.monotonic() - t0)
        finally:
            for job in ids:
                subprocess.run(["scancel", str(job.pid)], capture_output=True)
        for k, v in times.items():
            print(f"(f) {k:<9} median {statistics.median(v)*1e3:.1f} ms, p95 {pct(v, 95)*1e3:.1f} ms (n={len(v)})")


def bench_throughput(n_jobs: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        b = Broker(Path(d) / "m", MarketConfig(executor="slurm", sync="normal", single_user=True, charge_interval=0.5,
                                                    slots=cpus(d))).start()
        prefix = b.executor.job_name(0)[:-1]
        try:
            b.add_user(True, "u", 1e9)
            t0 = time.monotonic()
            ids = [b.submit("u", False, 1.0 + (i % 7), "true")["id"] for i in range(n_jobs)]
            t_sub = time.monotonic() - t0
            while True:
                left = sum(1 for j in b.jobs("admin", True, ["queued", "running", "preempted"]))
                if left == 0:
                    break
                if time.monotonic() - t0 > 600:
                    raise TimeoutError(f"{left} jobs still active after 600 s")
                time.sleep(0.2)
            t_all = time.monotonic() - t0
            done = [j for j in b.jobs("admin", True) if j["id"] in set(ids)]
            ok = sum(1 for j in done if j["state"] == "completed" and j["exit_code"] == 0)
            print(f"throughput: {n_jobs} jobs (`true`), {b.config.slots} slots: submissions {n_jobs / t_sub:.0f}/s "
                  f"({t_sub / n_jobs * 1e3:.1f} ms each, sbatch included); all completed in {t_all:.1f} s = "
                  f"{n_jobs / t_all:.1f} jobs/s; {ok}/{n_jobs} completed with exit 0; "
                  f"Slurm commands issued {b.executor.calls}")
        finally:
            b.stop(kill_jobs=True)
            cleanup(prefix)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    if not slurm_up():
        raise SystemExit("Slurm does not answer: run `bash scripts/slurm-up.sh` first")
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]}")
    bench_controls()
    bench_bid_to_slurm(a.repeats)
    bench_throughput(a.jobs)
    print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
