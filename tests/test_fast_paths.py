"""Fast paths against their references, on random instances with ties: equal results, record for record."""

import numpy as np
import pytest

from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.ees import TypePrior, Uniform
from marketsched.mechanisms.online.ees_driver import RelaxedEESPolicy
from marketsched.mechanisms.online.profile import AvailabilityProfile, greedy_starts
from marketsched.workloads.workload import Workload

RECORDS = ("first_start", "end_time", "preemptions", "payment", "state")


def assert_same_records(a, b):
    for name in RECORDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def random_profile(rng, capacity):
    """A profile with reservations on whole times (ties: equal starts and ends)."""
    p = AvailabilityProfile(capacity, float(rng.integers(0, 3)))
    for _ in range(rng.integers(0, 12)):
        n = int(rng.integers(1, capacity + 1))
        p.place(n, float(rng.integers(1, 6)), after=float(rng.integers(0, 15)))
    return p


@pytest.mark.parametrize("seed", range(300))
def test_greedy_starts_on_lists_equal_the_profile_reference(seed):
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 9))
    p = random_profile(rng, capacity)
    before = (p.times.copy(), p.used.copy())
    k = int(rng.integers(0, 15))
    runtime = rng.integers(1, 6, k).astype(float) * (0.5 if seed % 3 == 0 else 1.0)
    nodes = rng.integers(1, capacity + 1, k)
    fast = greedy_starts(runtime, nodes, capacity, p)
    ref = greedy_starts(runtime, nodes, capacity, p, fast=False)
    np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(p.times, before[0])  # the profile is not modified
    np.testing.assert_array_equal(p.used, before[1])


def test_greedy_starts_refuses_a_job_wider_than_the_machine():
    with pytest.raises(ValueError, match="5 nodes requested on a 4-node machine"):
        greedy_starts([1.0], [5], 4)


def random_parallel_workload(rng, n, capacity):
    submit = np.sort(rng.integers(0, n * 2, n)).astype(float)   # ties in submit times
    runtime = rng.integers(1, 20, n).astype(float)             # ties in run times
    estimate = runtime * rng.integers(1, 3, n)
    procs = rng.integers(1, capacity + 1, n)
    return Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=estimate, procs=procs,
                                 capacity=capacity)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("compress", [True, False])
def test_relaxed_ees_fast_equals_reference(seed, compress):
    rng = np.random.default_rng(seed)
    w = random_parallel_workload(rng, 60, int(rng.integers(2, 9)))
    v = rng.integers(1, 40, len(w)).astype(float)
    d = rng.integers(0, 4, len(w)).astype(float)
    prior = TypePrior(Uniform(0.0, 40.0), Uniform(0.0, 4.0))
    runs = []
    for fast in (True, False):
        pol = RelaxedEESPolicy(v, d, prior, n_draws=20, seed=seed, time_unit=1.0, compress=compress, fast=fast)
        runs.append((Simulator(w, pol).run(), pol))
    (a, pa), (b, pb) = runs
    assert_same_records(a, b)
    assert pa.planned_start == pb.planned_start and pa.moved_up == pb.moved_up
