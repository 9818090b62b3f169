"""The share market on two CPUs with real processes (``marketsched market share --cpus 2``).

Each job, serial, receives ``x_j = min(1, tau_j N)`` CPUs (Stößer 2009, section 6.4.1), enforced
by placement (first-fit decreasing, each CPU carrying at most one CPU of shares), a CPU quota of
``x_j`` per job and weights proportional to ``x_j``. The default tests check what the load of
other programs cannot break: the quotas and pinning the kernel reports, and that no job receives
more CPU time than its share allows (a quota caps from above). ``-m measure`` measures the
delivered shares (each job's fraction of the jobs' CPU time, and the CPUs it received) against
the rule over 30 s per rule: within 0.05 (five percentage points).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from live_helpers import wait_for
from marketsched.live.share import FixedBids, ShareMarket
from marketsched.platform.cgroups import PERIOD_US
from test_share_cpus import reference_allocation
from test_tycoon_live_share import our_cgroups

POOL = sorted(os.sched_getaffinity(0))[:2]
pytestmark = pytest.mark.skipif(len(POOL) < 2, reason="needs two CPUs")
BIDS = [3.0, 2.0, 1.0]  # PS: x = 1, 2/3, 1/3 (packs exactly); SH: x = 1, 32/54, 14/54 (0.148 CPU wasted)
TOL = 0.05
HANG = 600.0  # a guard against a hang, not a timing claim
MEASURE = 30.0


def market(rule, interval):
    """The rule's CPUs for BIDS on two CPUs (exact reference) and a market (not started) for them."""
    x = np.array([float(v) for v in reference_allocation(rule, BIDS, 2)])
    return x, ShareMarket(POOL, rule, FixedBids(BIDS), BIDS, interval=interval)


def window(m, cpu_seconds):
    """CPU time each job used while together they used ``cpu_seconds``, and the monotonic time
    that surely covers the window (taken before the first reading and after the last)."""
    t0 = time.monotonic()
    a = m.cpu_seconds()[:, 0]
    ok = wait_for(lambda: (m.cpu_seconds()[:, 0] - a).sum() >= cpu_seconds, timeout=HANG, every=0.1)
    d = m.cpu_seconds()[:, 0] - a
    wall = time.monotonic() - t0
    assert ok, f"the jobs did not use {cpu_seconds} CPU-seconds in {HANG} s: {d}"
    return d, wall


@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_two_cpus_quotas_and_placement_cap_every_job_at_its_share(rule):
    x, m = market(rule, 0.2)
    try:
        m.start()
        assert wait_for(lambda: len(m.history) >= 3, timeout=HANG), "the bidders did not rebid"
        with m._lock:  # what the kernel has been told, as it reports it
            assert m.placement.tolist() == [0, 1, 1]
            for i in range(3):
                key = m.jobs[(i, 0)].key
                assert m.executor.usage(key)["limits"]["cpus"] == pytest.approx(x[i], abs=1.0 / PERIOD_US)
                pids = m.executor.procs[key].cgroup.pids()
                assert pids and all(os.sched_getaffinity(p) == {POOL[m.placement[i]]} for p in pids)
        d, wall = window(m, 2.0)
    finally:
        m.stop()
    assert our_cgroups() == []
    for p in m.history:
        np.testing.assert_allclose(p.shares, x, rtol=1e-12)
    # a quota gives at most x_j CPU-seconds per period: over the window (plus the period the
    # window may cut and the accounting's tick) no job has more, however busy the machine is
    bound = x * (wall + 2 * PERIOD_US / 1e6) + 0.02
    assert np.all(d <= bound), f"{rule}: CPU seconds {d} over {wall:.2f} s exceed the quotas' {bound}"


@pytest.mark.measure
@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_two_cpus_delivered_shares_over_half_a_minute_follow_the_rule(rule):
    x, m = market(rule, 1.0)
    try:
        m.start()
        t0 = time.monotonic()
        cpu_s, frac = m.measure(MEASURE)
        wall = time.monotonic() - t0
    finally:
        m.stop()
    rule_frac = x / x.sum()
    got = cpu_s[:, 0] / wall
    err = np.abs(frac[:, 0] - rule_frac).max()
    print(f"\nshare {rule} on 2 CPUs: rule {np.round(rule_frac, 4)} delivered {np.round(frac[:, 0], 4)} "
          f"(max error {err:.4f}); CPUs rule {np.round(x, 4)} delivered {np.round(got, 4)}")
    assert cpu_s.sum() > 0.5 * MEASURE, f"the CPUs ran too little to measure: {cpu_s}"
    assert err <= TOL


def test_cli_on_two_cpus_shows_cpus_and_placement_and_leaves_nothing():
    from click.testing import CliRunner

    from marketsched.live.cli import market

    res = CliRunner().invoke(market, ["share", "--rule", "ps", "--cpus", "2", "--bids", "3,2,1", "--interval", "0.5",
                                      "--duration", "1.5", "--every", "0"])
    assert res.exit_code == 0, res.output
    assert our_cgroups() == []
    lines = res.output.splitlines()
    assert lines[0].startswith(f"share: Proportional Share, 3 jobs on CPUs {POOL[0]},{POOL[1]}; enforcement ")
    h = next(i for i, line in enumerate(lines) if line.split()[:2] == ["job", "bid"])
    assert lines[h].split()[-1] == "on"
    rows = [line.split() for line in lines[h + 1: h + 4]]
    assert [float(r[2]) for r in rows] == pytest.approx([1.0, 2 / 3, 1 / 3], abs=5e-5)  # CPUs
    assert [float(r[3]) for r in rows] == pytest.approx([1 / 2, 1 / 3, 1 / 6], abs=5e-5)  # the rule's fraction
    assert [r[-1] for r in rows] == [str(POOL[0]), str(POOL[1]), str(POOL[1])]
    assert lines[-1].startswith("stopped: 3 jobs killed")
