"""The share market on two CPUs (Stößer 2009, section 6.4.1, serial jobs: ``x_j = min(1, tau_j N)``):
prints the shares each enforcement delivers against the rule.

Cases, each for Proportional Share and Sanghavi-Hajek with fixed bids 3, 2, 1 on CPUs 0 and 1:

* ``weights``: CFS weights proportional to ``x_j`` only, every job free to run on both CPUs (the
  earlier attempt: the scheduler balances the jobs over the CPUs, so the weights do not divide
  the pool as the rule says);
* ``placed``: the market's enforcement (first-fit decreasing placement, a CPU quota of ``x_j``
  per job, weights proportional to ``x_j``).

Each line: the rule's fraction of the jobs' CPU time, the delivered fraction (CPU time per
cgroup), the CPUs the rule gives and the CPUs delivered (CPU seconds over wall seconds). Run
under the live lock (it uses cgroups and both CPUs):

    flock /tmp/marketsched-live.lock python benchmarks/bench_share_cpus.py [seconds]   # default 20
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from marketsched.live.share import FixedBids, ShareMarket

BIDS = [3.0, 2.0, 1.0]


class WeightsOnly(ShareMarket):
    """Weights proportional to the shares, no quota, no placement (for comparison only)."""

    def apply(self) -> None:
        with self._lock:
            assert self.executor is not None
            top = self.shares.max()
            for i in range(self.users):
                job = self.jobs[(i, 0)]
                self.executor.set_affinity(job.key, self.pool)
                self.executor.set_weight(job.key, self.shares[i] / top)
                self._signal(job, __import__("signal").SIGCONT)


def run(kind: str, rule: str, seconds: float) -> None:
    pool = sorted(os.sched_getaffinity(0))[:2]
    m = (WeightsOnly if kind == "weights" else ShareMarket)(pool, rule, FixedBids(BIDS), BIDS, interval=1.0)
    try:
        m.start()
        time.sleep(1.0)
        t0 = time.monotonic()
        cpu_s, frac = m.measure(seconds)
        wall = time.monotonic() - t0
        x = m.shares.copy()
    finally:
        m.stop()
    rf = x / x.sum()
    print(f"{kind:>8} {rule}: rule {np.round(rf, 3)} delivered {np.round(frac[:, 0], 3)} "
          f"max error {np.abs(frac[:, 0] - rf).max():.3f}; CPUs rule {np.round(x, 3)} delivered "
          f"{np.round(cpu_s[:, 0] / wall, 3)}")


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    for rule in ("ps", "sh"):
        for kind in ("weights", "placed"):
            run(kind, rule, seconds)


if __name__ == "__main__":
    main()
