"""Tycoon mode for real (seed 004): user agents re-split their budgets across hosts (CPUs) with the
library's best response every interval, and the CPU time the jobs' processes get follows the
bids. Stated tolerance: on every host, each user's measured fraction of the host's CPU time is
within 0.06 (absolute) of its share x_ij / sum_k x_kj, measured over 8 s (cgroup weights) or
6 s (stride fallback). A user bidding 0 on a host gets no CPU there."""

import os

import numpy as np
import pytest

from marketsched.live.tycoon import TycoonMarket, detect_enforcement, find_cgroup1_cpu, find_cgroup2_cpu
from marketsched.mechanisms.games.best_response import best_response

TOL = 0.06
WEIGHTS = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
BUDGETS = [1.0, 2.0, 1.5]


def hosts():
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[:2] if len(cpus) >= 2 else cpus * 2  # two hosts; on one CPU they share it


def replay_dynamics(rounds, reserve=1e-3):
    """The agents' arithmetic offline: sequential best responses from weight-proportional bids."""
    x = WEIGHTS / WEIGHTS.sum(axis=1, keepdims=True) * np.array(BUDGETS)[:, None]
    for _ in range(rounds):
        for i in range(len(BUDGETS)):
            x[i] = best_response(WEIGHTS[i], x.sum(axis=0) - x[i], BUDGETS[i], reserve=reserve)
    return x


def leftovers(market):
    alive = [j.pid for j in market.jobs.values() if j.popen.poll() is None]
    return alive, (market.root is not None and market.root.exists())


@pytest.mark.parametrize("enforcement", ["auto", "stride"])
def test_measured_cpu_shares_follow_best_response_bids(enforcement):
    hs = hosts()
    if len(set(hs)) < 2:
        pytest.skip("needs two CPUs to act as two hosts")
    m = TycoonMarket(hs, BUDGETS, WEIGHTS, interval=0.5, enforcement=enforcement)
    if enforcement == "auto":  # a writable cpu cgroup is used when there is one (here: v1)
        assert m.enforcement == detect_enforcement()
        if find_cgroup1_cpu() is not None or find_cgroup2_cpu() is not None:
            assert m.enforcement in ("cgroup1", "cgroup2")
    try:
        m.start()
        m.run_agents(4)
        # the agents played the library's sequential best-response dynamics
        np.testing.assert_allclose(m.bids, replay_dynamics(4), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m.bids.sum(axis=1), BUDGETS)
        share = m.shares()
        assert m.bids[0, 1] == 0  # user 0 values host 1 little: it puts its whole budget on host 0
        cpu, measured = m.measure(8.0 if m.enforcement != "stride" else 6.0)
        assert cpu.sum(axis=0).min() > 0.2, f"the hosts ran too little to measure: {cpu}"
        err = np.abs(measured - share)
        assert err.max() <= TOL, f"{m.enforcement}: bids' shares\n{share}\nmeasured\n{measured}"
        assert cpu[0, 1] <= 0.02  # a zero bid: the job is stopped
    finally:
        m.stop()
    alive, cg = leftovers(m)
    assert alive == [] and not cg


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="weights must be"):
        TycoonMarket([0], [1.0, 1.0], [[1.0]])
    with pytest.raises(ValueError, match="budgets must be positive"):
        TycoonMarket([0], [0.0], [[1.0]])
    with pytest.raises(ValueError, match="not available"):
        TycoonMarket([10_000], [1.0], [[1.0]])
    with pytest.raises(ValueError, match="unknown enforcement"):
        TycoonMarket([sorted(os.sched_getaffinity(0))[0]], [1.0], [[1.0]], enforcement="magic")
