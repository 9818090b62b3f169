"""Figures for the live market on a multi-node Slurm cluster (scripts/cluster-up.sh; run on purpose).

Brings the cluster up as 4 nodes x 8 CPUs (``CLUSTER_CPUS=8 bash scripts/cluster-up.sh 4``: a
changed configuration restarts its controller with empty job state), then:

1. Decision to Slurm acting, with ``--queued`` (1,000) jobs queued behind 32 running ones: a
   queued bid is raised above the running ones (``broker.rebid``); the time until Slurm shows
   the raised job RUNNING (``squeue -j`` polled every 5 ms). p50 and p99 over ``--samples``.
2. The live schedule against the simulator's on the same ``--arrivals`` (500) arrivals: jobs
   arrive at Poisson times (seeded) with run times of 1-4 s and bids of 1-10; each job's command
   writes the wall time it started on its node. The live wait (start on the node minus
   submission) is compared with the simulator's wait on the recorded submissions and run times
   (``simulate_recorded``, HB with the k-th price, 32 processors): how many start within 2 s
   of the simulated start, and for the others, whether they were late or early and whether a
   preemption was involved.

Usage: python benchmarks/bench_cluster.py [--queued 1000] [--samples 30] [--arrivals 500] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_slurm import cleanup, pct

from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.replay import simulate_recorded
from marketsched.platform.slurm import run

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "cluster-up.sh"
NODES, CPUS = 4, 8


def job_state(slurm_id: int) -> str:
    return run(["squeue", "-h", "-j", str(slurm_id), "-o", "%T"]).strip()


def market(d: str, jobs: int) -> Broker:
    b = Broker(Path(d) / "m", MarketConfig(executor="slurm", sync="normal", single_user=True, charge_interval=0.5,
                                            slots=NODES * CPUS, max_jobs_per_user=jobs)).start()
    b.ensure_admin()
    b.add_user(True, "u", 1e9)
    return b


def bench_decision_to_running(queued: int, samples: int, rng) -> None:
    with tempfile.TemporaryDirectory() as d:
        b = market(d, queued + NODES * CPUS)
        prefix = b.executor.job_name(0)[:-1]
        try:
            fill = [b.submit("u", False, 100.0, "sleep 600")["id"] for _ in range(b.config.slots)]
            t0 = time.monotonic()
            waiting = [b.submit("u", False, float(rng.uniform(1, 50)), "sleep 600")["id"] for _ in range(queued)]
            t_sub = time.monotonic() - t0
            deadline = time.monotonic() + 120
            while any(job_state(b.executor.recorded(j)[0]) != "RUNNING" for j in fill):
                if time.monotonic() > deadline:
                    raise TimeoutError("the 32 first jobs did not all run")
                time.sleep(0.2)
            lat = []
            for i in range(samples):
                j = waiting[i]
                sid = b.executor.recorded(j)[0]
                time.sleep(0.3)
                t0 = time.monotonic()
                b.rebid("u", False, j, 200.0 + i)
                while job_state(sid) != "RUNNING":
                    if time.monotonic() - t0 > 60:
                        raise TimeoutError(f"job {j} did not run after its bid was raised")
                    time.sleep(0.005)
                lat.append(time.monotonic() - t0)
            print(f"decision to running: {NODES} nodes x {CPUS} CPUs, {queued} queued jobs "
                  f"(submitted in {t_sub:.1f} s, {t_sub / queued * 1e3:.1f} ms each): a queued bid raised above the "
                  f"running ones until Slurm runs it: p50 {pct(lat, 50) * 1e3:.0f} ms, p99 {pct(lat, 99) * 1e3:.0f} ms, "
                  f"max {max(lat) * 1e3:.0f} ms (n={len(lat)})")
        finally:
            b.stop(kill_jobs=True)
            cleanup(prefix)


def bench_live_vs_simulated(arrivals: int, rng) -> None:
    slots = NODES * CPUS
    runtime = rng.uniform(1.0, 4.0, arrivals).round(1)
    bids = rng.uniform(1.0, 10.0, arrivals).round(2)
    rate = 0.8 * slots / runtime.mean()  # offered load 0.8
    gaps = rng.exponential(1.0 / rate, arrivals)
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        starts = Path(d) / "starts"
        starts.mkdir()
        b = market(d, arrivals)
        prefix = b.executor.job_name(0)[:-1]
        try:
            ids, submit_wall = [], []
            t0 = time.time()
            due = t0
            for k in range(arrivals):
                due += gaps[k]
                time.sleep(max(0.0, due - time.time()))
                n = int(round(runtime[k] / 0.1))
                cmd = (f"date +%s.%N > {starts}/$MARKETSCHED_JOB_ID; i=0; "
                       f"while [ $i -lt {n} ]; do sleep 0.1; i=$((i+1)); done")
                submit_wall.append(time.time())
                ids.append(b.submit("u", False, float(bids[k]), cmd)["id"])
            t_arr = time.time() - t0
            deadline = time.monotonic() + 900
            while b.jobs("admin", True, ["queued", "running", "preempted"]):
                if time.monotonic() > deadline:
                    raise TimeoutError("jobs still active after 900 s")
                time.sleep(0.5)
            jobs = [b.job("admin", True, j) for j in ids]
        finally:
            b.stop(kill_jobs=True)
            cleanup(prefix)
        ok = [j["state"] == "completed" for j in jobs]
        rec = simulate_recorded([j["submit_t"] for j in jobs], [j["run_seconds"] for j in jobs], bids, slots)
        sim_wait = rec.first_start - np.array([j["submit_t"] for j in jobs])
        live_wait = np.array([float((starts / str(j)).read_text()) - s for j, s in zip(ids, submit_wall)])
        diff = live_wait - sim_wait
        within = np.abs(diff) <= 2.0
        live_pre = np.array([j["preemptions"] for j in jobs])
        sim_pre = rec.preemptions
        late, early = diff > 2.0, diff < -2.0
        print(f"live vs simulated starts: {arrivals} arrivals over {t_arr:.0f} s (offered load 0.8 of {slots} CPUs), "
              f"{sum(ok)} completed; {int(within.sum())} start within 2 s of the simulated start "
              f"({within.mean():.1%}); {int(late.sum())} later, {int(early.sum())} earlier")
        print(f"  start difference live - simulated: median {np.median(diff):.2f} s, p90 {np.quantile(diff, 0.9):.2f} s, "
              f"max {diff.max():.2f} s; live waits median {np.median(live_wait):.2f} s, simulated "
              f"{np.median(sim_wait):.2f} s")
        print(f"  preemptions: live {int(live_pre.sum())}, simulated {int(sim_pre.sum())}; of the jobs off by more "
              f"than 2 s, {int(((late | early) & ((live_pre > 0) | (sim_pre > 0))).sum())} were preempted in one "
              f"schedule or the other, {int(((late | early) & (live_pre == 0) & (sim_pre == 0)).sum())} were not")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--arrivals", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    p = subprocess.run(["bash", str(SCRIPT), str(NODES)], env={**os.environ, "CLUSTER_CPUS": str(CPUS)},
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"scripts/cluster-up.sh {NODES} failed:\n{p.stderr}")
    os.environ["SLURM_CONF"] = "/etc/slurm-cluster/slurm.conf"
    rng = np.random.default_rng(a.seed)
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]}")
    bench_decision_to_running(a.queued, a.samples, rng)
    bench_live_vs_simulated(a.arrivals, rng)
    print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
